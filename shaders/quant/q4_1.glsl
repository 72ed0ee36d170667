// Q4_1: 20-byte blocks of 32: d: f16, m: f16, qs[16]; byte i of qs holds
// element i (low nibble) and i + 16 (high nibble); value = d * q + m.
// 20 bytes keeps blocks 4-byte aligned: word 0 = (d, m), words 1..4 = qs.
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 20

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    vec2 dm = unpackHalf2x16(b.v[0]);
    // Elements 8j..8j+7: qs bytes 8(j & 1)..+8, low nibbles for j < 2.
    uint w = 1u + 2u * (j & 1u);
    uint shift = 4u * (j >> 1);
    uint q0 = (b.v[w] >> shift) & 0x0F0F0F0Fu;
    uint q1 = (b.v[w + 1u] >> shift) & 0x0F0F0F0Fu;
    lo = vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) * dm.x + dm.y;
    hi = vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) * dm.x + dm.y;
}

// Integer form for the decode mat-vec over Q8_1 activations (matvec_int.comp):
// the 32 quants as bytes (0..15), word i = elements 4i..4i+3, with the
// block minimum as dm.y.
#define QUANT_Q8_BLOCK 1
#define QUANT_Q8_MIN 1
void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    dm = unpackHalf2x16(b.v[0]);
    for (uint i = 0u; i < 4u; i++) {
        uint w = b.v[1u + i];
        q[i] = w & 0x0F0F0F0Fu;
        q[i + 4u] = (w >> 4) & 0x0F0F0F0Fu;
    }
}
