// Q3_K: 110-byte super-blocks of 256: hmask[32], qs[64], scales[12], d: f16.
// Element e has its low two bits in qs as Q2_K lays them out (byte
// 32(e / 128) + e % 32, bits 2((e % 128) / 32)) and its third bit at bit e / 32
// of hmask[e % 32]; q = low | third << 2, value = d * (scale - 32) * (q - 4).
// The sixteen 6-bit sub-block scales: low nibble of byte s (s < 8) or high
// nibble of byte s - 8, top two bits at bits 2(s / 4) of byte 8 + s % 4.
// Blocks are only 2-byte aligned, so everything is read as 16-bit halves:
// hmask = halves 0..15, qs = 16..47, scales = 48..53, d = 54.
#define QUANT_K 256
#define QUANT_BLOCK_BYTES 110

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    uint64_t a = row + uint64_t(ib) * QUANT_BLOCK_BYTES;
    U16s b = U16s(a);
    float d = unpackHalf2x16(uint(b.v[54])).x;
    // Sub-block s = j / 2.
    uint s = j >> 1;
    uint sl = (uint(b.v[48u + ((s & 7u) >> 1)]) >> (8u * (s & 1u) + 4u * (s >> 3))) & 0x0Fu;
    uint sh = (uint(b.v[52u + ((s & 3u) >> 1)]) >> (8u * (s & 1u) + 2u * (s >> 2))) & 3u;
    float dl = d * float(int(sl | (sh << 4)) - 32);
    // Bytes l0..l0+7 of hmask and of qs group j / 16, with l0 = 8(j % 4).
    uint m = 4u * (j & 3u);
    uint hb = j >> 2; // hmask bit
    uint h0 = ((uint(b.v[m]) | (uint(b.v[m + 1u]) << 16)) >> hb) & 0x01010101u;
    uint h1 = ((uint(b.v[m + 2u]) | (uint(b.v[m + 3u]) << 16)) >> hb) & 0x01010101u;
    uint k = 16u + 16u * (j >> 4) + m;
    uint shift = 2u * ((j >> 2) & 3u);
    uint q0 = (((uint(b.v[k]) | (uint(b.v[k + 1u]) << 16)) >> shift) & 0x03030303u) | (h0 << 2);
    uint q1 = (((uint(b.v[k + 2u]) | (uint(b.v[k + 3u]) << 16)) >> shift) & 0x03030303u) | (h1 << 2);
    lo = dl * (vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) - 4.0);
    hi = dl * (vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) - 4.0);
}
