// Q5_0: 22-byte blocks of 32: d: f16, qh: u32, qs[16]; element i has its low
// nibble in qs (byte i low for i < 16, byte i - 16 high otherwise) and its
// fifth bit at bit i of qh; value = d * (q - 16).
// Blocks are only 2-byte aligned, so everything is read as 16-bit halves:
// half 0 = d, halves 1..2 = qh, halves 3..10 = qs.
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 22

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    uint64_t a = row + uint64_t(ib) * QUANT_BLOCK_BYTES;
    U16s b = U16s(a);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    // qh byte j holds the fifth bits of elements 8j..8j+7.
    uint h = (uint(b.v[1u + (j >> 1)]) >> (8u * (j & 1u))) & 0xFFu;
    uvec4 h0 = (uvec4(h, h >> 1, h >> 2, h >> 3) & 1u) << 4;
    uvec4 h1 = (uvec4(h >> 4, h >> 5, h >> 6, h >> 7) & 1u) << 4;
    // qs bytes 8(j & 1)..+8 = halves 3 + 4(j & 1)..+4, low nibbles for j < 2.
    uint k = 3u + 4u * (j & 1u);
    uint shift = 4u * (j >> 1);
    uint q0 = ((uint(b.v[k]) | (uint(b.v[k + 1u]) << 16)) >> shift) & 0x0F0F0F0Fu;
    uint q1 = ((uint(b.v[k + 2u]) | (uint(b.v[k + 3u]) << 16)) >> shift) & 0x0F0F0F0Fu;
    lo = (vec4((uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) | h0) - 16.0) * d;
    hi = (vec4((uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) | h1) - 16.0) * d;
}

// Integer form for the decode mat-vec over Q8_0 activations (matvec_int.comp):
// the 32 five-bit quants minus 16 as signed bytes, word i = elements 4i..4i+3.
#define QUANT_Q8_BLOCK 1
void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    dm = vec2(unpackHalf2x16(uint(b.v[0])).x, 0.0);
    uint qh = uint(b.v[1]) | (uint(b.v[2]) << 16);
    for (uint i = 0u; i < 4u; i++) {
        uint w = uint(b.v[3u + 2u * i]) | (uint(b.v[4u + 2u * i]) << 16);
        q[i] = q8_sub_bytes((w & 0x0F0F0F0Fu) | q8_fifth_bits(qh >> (4u * i)), 0x10101010u);
        q[i + 4u] = q8_sub_bytes(((w >> 4) & 0x0F0F0F0Fu) | q8_fifth_bits(qh >> (16u + 4u * i)),
                                 0x10101010u);
    }
}
