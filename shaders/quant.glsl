// Selects the weight dequantizer from the WEIGHT_<TYPE> define; every file
// defines QUANT_K, QUANT_BLOCK_BYTES and
//   void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi);
// (elements 8j..8j+7 of block ib of the row at `row`; see quant/README.md).
#ifndef QUANT_GLSL
#define QUANT_GLSL

// Blocks per weight row, for the types whose device layout splits each row
// into its blocks' quants, then their scales (`QUANT_SPLIT_ROWS`, see
// quant/README.md): every kernel that reads weights sets it first.
uint quant_row_blocks = 0u;

// The 16 bytes at `a` (2-byte aligned at least) in as few loads as its
// alignment allows: one 16-byte load where rows keep blocks 16-aligned.
uvec4 load16(uint64_t a) {
    if ((a & 15ul) == 0ul) {
        return U4s(a).v[0];
    }
    if ((a & 7ul) == 0ul) {
        U2s p = U2s(a);
        return uvec4(p.v[0], p.v[1]);
    }
    U16s h = U16s(a);
    uvec4 r;
    for (uint i = 0u; i < 4u; i++) {
        r[i] = uint(h.v[2u * i]) | (uint(h.v[2u * i + 1u]) << 16);
    }
    return r;
}

// Byte-wise helpers for the integer forms (`block_q8`, see quant/README.md).
// Subtracts the per-byte offsets `o` (each <= 16) from bytes 0..31, giving
// signed bytes: setting bit 7 first keeps borrows inside each byte.
uint q8_sub_bytes(uint q, uint o) {
    return ((q | 0x80808080u) - o) ^ 0x80808080u;
}
// Bits 0..3 of `h` moved to bit 4 of bytes 0..3 (Q5's fifth bits).
uint q8_fifth_bits(uint h) {
    return ((h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21)) << 4;
}

#if defined(WEIGHT_F32)
#include "quant/f32.glsl"
#elif defined(WEIGHT_F16)
#include "quant/f16.glsl"
#elif defined(WEIGHT_BF16)
#include "quant/bf16.glsl"
#elif defined(WEIGHT_Q4_0)
#include "quant/q4_0.glsl"
#elif defined(WEIGHT_Q4_1)
#include "quant/q4_1.glsl"
#elif defined(WEIGHT_Q5_0)
#include "quant/q5_0.glsl"
#elif defined(WEIGHT_Q5_1)
#include "quant/q5_1.glsl"
#elif defined(WEIGHT_Q8_0)
#include "quant/q8_0.glsl"
#elif defined(WEIGHT_Q2_K)
#include "quant/q2_k.glsl"
#elif defined(WEIGHT_Q3_K)
#include "quant/q3_k.glsl"
#elif defined(WEIGHT_Q4_K)
#include "quant/q4_k.glsl"
#elif defined(WEIGHT_Q5_K)
#include "quant/q5_k.glsl"
#elif defined(WEIGHT_Q6_K)
#include "quant/q6_k.glsl"
#elif defined(WEIGHT_IQ4_NL)
#include "quant/iq4_nl.glsl"
#elif defined(WEIGHT_IQ4_XS)
#include "quant/iq4_xs.glsl"
#else
#error "no WEIGHT_<TYPE> defined"
#endif

// 8-element units per block.
#define QUANT_UNITS (QUANT_K / 8)

#endif
