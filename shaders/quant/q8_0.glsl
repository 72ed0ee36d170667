// Q8_0: 34-byte blocks of 32: d: f16, qs[32] (int8); value = d * q.
// 34 bytes keeps blocks 2-byte aligned only: read 16-bit halves.
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 34

vec2 i8x2(uint h) {
    // Two little-endian int8 in the low 16 bits, sign-extended.
    return vec2(float(int(h << 24) >> 24), float(int(h << 16) >> 24));
}

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    uint h = 1u + 4u * j;
    lo = vec4(i8x2(uint(b.v[h])), i8x2(uint(b.v[h + 1u]))) * d;
    hi = vec4(i8x2(uint(b.v[h + 2u])), i8x2(uint(b.v[h + 3u]))) * d;
}

// Integer form for the decode mat-vec over Q8_0 activations (matvec_int.comp):
// the 32 signed quants, word i = elements 4i..4i+3.
#define QUANT_Q8_BLOCK 1
// Its words by d_and_quant_words (quant.glsl): 10 loads, not 17.
void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    uint d = d_and_quant_words(row + uint64_t(ib) * QUANT_BLOCK_BYTES, 8u, q);
    dm = vec2(unpackHalf2x16(d).x, 0.0);
}
