// Q6_K: 210-byte super-blocks of 256: ql[128], qh[64], scales: int8[16],
// d: f16. In half h (128 elements), element 128h + 32t + l (t in 0..3, l in
// 0..31) has its low nibble in ql[64h + 32(t & 1) + l] (low nibble for t < 2)
// and its top two bits at bits 2t..2t+1 of qh[32h + l]; sub-block e / 16 has
// scale scales[e / 16]. value = d * scale * (q - 32).
// Blocks are only 2-byte aligned, so everything is read as 16-bit halves:
// ql = halves 0..63, qh = 64..95, scales = 96..103, d = 104.
#define QUANT_K 256
#define QUANT_BLOCK_BYTES 210

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    uint64_t a = row + uint64_t(ib) * QUANT_BLOCK_BYTES;
    U16s b = U16s(a);
    float d = unpackHalf2x16(uint(b.v[104])).x;
    // Sub-block j / 2: signed byte (j / 2) & 1 of half 96 + j / 4.
    int sc = bitfieldExtract(int(uint(b.v[96u + (j >> 2)])), int(8u * ((j >> 1) & 1u)), 8);
    float dl = d * float(sc);
    uint h = j >> 4;          // 128-element half
    uint t = (j >> 2) & 3u;   // 32-element run within it
    uint l0 = 4u * (j & 3u);  // first byte / 2 within the run
    uint k = 32u * h + 16u * (t & 1u) + l0;
    uint shift = 4u * (t >> 1);
    uint m = 64u + 16u * h + l0;
    uint hs = 2u * t;
    uint h0 = (((uint(b.v[m]) | (uint(b.v[m + 1u]) << 16)) >> hs) & 0x03030303u) << 4;
    uint h1 = (((uint(b.v[m + 2u]) | (uint(b.v[m + 3u]) << 16)) >> hs) & 0x03030303u) << 4;
    uint q0 = (((uint(b.v[k]) | (uint(b.v[k + 1u]) << 16)) >> shift) & 0x0F0F0F0Fu) | h0;
    uint q1 = (((uint(b.v[k + 2u]) | (uint(b.v[k + 3u]) << 16)) >> shift) & 0x0F0F0F0Fu) | h1;
    lo = dl * (vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) - 32.0);
    hi = dl * (vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) - 32.0);
}
