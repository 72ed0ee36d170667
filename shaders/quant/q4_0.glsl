// Q4_0: 18-byte blocks of 32: d: f16, qs[16]; byte i of qs holds element i
// (low nibble) and i + 16 (high nibble); value = d * (q - 8).
// 18 bytes keeps blocks 2-byte aligned only: read 16-bit halves.
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 18

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    // Elements 8j..8j+7: qs bytes 8(j & 1)..+8, low nibbles for j < 2.
    uint h = 1u + 4u * (j & 1u);
    uint shift = 4u * (j >> 1);
    uint q0 = ((uint(b.v[h]) | (uint(b.v[h + 1u]) << 16)) >> shift) & 0x0F0F0F0Fu;
    uint q1 = ((uint(b.v[h + 2u]) | (uint(b.v[h + 3u]) << 16)) >> shift) & 0x0F0F0F0Fu;
    lo = (vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) - 8.0) * d;
    hi = (vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) - 8.0) * d;
}

// Integer form for the decode mat-vec over Q8_0 activations (matvec_int.comp):
// the 32 quants minus 8 as signed bytes, word i = elements 4i..4i+3.
// Its words by d_and_quant_words (quant.glsl): 6 loads, not 9.
#define QUANT_Q8_BLOCK 1
void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    uint w[8];
    uint d = d_and_quant_words(row + uint64_t(ib) * QUANT_BLOCK_BYTES, 4u, w);
    dm = vec2(unpackHalf2x16(d).x, 0.0);
    for (uint i = 0u; i < 4u; i++) {
        q[i] = q8_sub_bytes(w[i] & 0x0F0F0F0Fu, 0x08080808u);
        q[i + 4u] = q8_sub_bytes((w[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    }
}
