// Q5_1: 24-byte blocks of 32: d: f16, m: f16, qh: u32, qs[16]; element i has
// its low nibble in qs (byte i low for i < 16, byte i - 16 high otherwise) and
// its fifth bit at bit i of qh; value = d * q + m.
// 24 bytes keeps blocks 4-byte aligned: word 0 = (d, m), 1 = qh, 2..5 = qs.
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 24

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    vec2 dm = unpackHalf2x16(b.v[0]);
    // The fifth bits of elements 8j..8j+7, moved to bit 4 of each byte.
    uint h = (b.v[1] >> (8u * j)) & 0xFFu;
    uvec4 h0 = (uvec4(h, h >> 1, h >> 2, h >> 3) & 1u) << 4;
    uvec4 h1 = (uvec4(h >> 4, h >> 5, h >> 6, h >> 7) & 1u) << 4;
    uint w = 2u + 2u * (j & 1u);
    uint shift = 4u * (j >> 1);
    uint q0 = (b.v[w] >> shift) & 0x0F0F0F0Fu;
    uint q1 = (b.v[w + 1u] >> shift) & 0x0F0F0F0Fu;
    lo = vec4((uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) | h0) * dm.x + dm.y;
    hi = vec4((uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) | h1) * dm.x + dm.y;
}

// Integer form for the decode mat-vec over Q8_1 activations (matvec_int.comp):
// the 32 five-bit quants as bytes (0..31), word i = elements 4i..4i+3, with
// the block minimum as dm.y.
#define QUANT_Q8_BLOCK 1
#define QUANT_Q8_MIN 1
void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    dm = unpackHalf2x16(b.v[0]);
    uint qh = b.v[1];
    for (uint i = 0u; i < 4u; i++) {
        uint w = b.v[2u + i];
        q[i] = (w & 0x0F0F0F0Fu) | q8_fifth_bits(qh >> (4u * i));
        q[i + 4u] = ((w >> 4) & 0x0F0F0F0Fu) | q8_fifth_bits(qh >> (16u + 4u * i));
    }
}
