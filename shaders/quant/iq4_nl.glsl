// IQ4_NL: 18-byte blocks of 32: d: f16, qs[16] in Q4_0's nibble order (byte
// i: element i low, i + 16 high); value = d * kvalues_iq4nl[q].
// Blocks are only 2-byte aligned: half 0 = d, halves 1..8 = qs.
#include "iq4_common.glsl"

#define QUANT_K 32
#define QUANT_BLOCK_BYTES 18

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    uint64_t a = row + uint64_t(ib) * QUANT_BLOCK_BYTES;
    U16s b = U16s(a);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    // qs bytes 8(j & 1)..+8 = halves 1 + 4(j & 1)..+4, low nibbles for j < 2.
    uint k = 1u + 4u * (j & 1u);
    uint shift = 4u * (j >> 1);
    lo = iq4nl_levels4(uint(b.v[k]) | (uint(b.v[k + 1u]) << 16), shift) * d;
    hi = iq4nl_levels4(uint(b.v[k + 2u]) | (uint(b.v[k + 3u]) << 16), shift) * d;
}

// Integer form for the decode mat-vec over Q8_0 activations (matvec_int.comp):
// the 32 levels as signed bytes, word i = elements 4i..4i+3.
#define QUANT_Q8_BLOCK 1
uint iq4nl_bytes4(uint w) {
    uint r = 0u;
    for (uint k = 0u; k < 4u; k++) {
        uint q = (w >> (8u * k)) & 0x0Fu;
        r |= ((IQ4NL_PACKED[q >> 2] >> (8u * (q & 3u))) & 0xFFu) << (8u * k);
    }
    return r;
}
void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    dm = vec2(unpackHalf2x16(uint(b.v[0])).x, 0.0);
    for (uint i = 0u; i < 4u; i++) {
        uint w = uint(b.v[1u + 2u * i]) | (uint(b.v[2u + 2u * i]) << 16);
        q[i] = iq4nl_bytes4(w & 0x0F0F0F0Fu);
        q[i + 4u] = iq4nl_bytes4((w >> 4) & 0x0F0F0F0Fu);
    }
}
