// Selects the weight dequantizer from the WEIGHT_<TYPE> define; every file
// defines QUANT_K, QUANT_BLOCK_BYTES and
//   void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi);
// (elements 8j..8j+7 of block ib of the row at `row`; see quant/README.md).
#ifndef QUANT_GLSL
#define QUANT_GLSL

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

// The f16 bits at the start of a 2-byte-aligned block (Q4_0's, Q8_0's) and
// the first n (<= 8, a constant) quant words after them: n aligned words
// from the block's address rounded down to 4 bytes, the quants shifted out
// of them, and quant word n - 1 as halves 2n - 1 and 2n. That is n + 2
// loads where 16-bit halves take 2n + 1 (Q8_0's 10 for 17 measured +2.5%
// on gpt-oss-20b's Vulkan decode on the H200). The rounded-down address
// starts at most 2 bytes before the block, inside the buffer (whose start
// is 4-byte aligned); the loads end at the last quant word's end.
uint d_and_quant_words(uint64_t a, uint n, out uint q[8]) {
    bool aligned = (uint(a) & 2u) == 0u;
    U32s w = U32s(aligned ? a : a - 2ul);
    uint x[8];
    for (uint i = 0u; i < n; i++) {
        x[i] = w.v[i];
    }
    U16s h = U16s(a);
    // Aligned: x[0] = d | quant bytes 0, 1 << 16, quant word i straddles
    // x[i] and x[i + 1]; else x[0]'s high half is d and x[i + 1] is quant
    // word i.
    for (uint i = 0u; i + 1u < n; i++) {
        q[i] = aligned ? (x[i] >> 16) | (x[i + 1u] << 16) : x[i + 1u];
    }
    q[n - 1u] = uint(h.v[2u * n - 1u]) | (uint(h.v[2u * n]) << 16);
    return aligned ? x[0] & 0xFFFFu : x[0] >> 16;
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
#elif defined(WEIGHT_MXFP4)
#include "quant/mxfp4.glsl"
#elif defined(WEIGHT_IQ2_XXS)
#include "quant/iq2_xxs.glsl"
#elif defined(WEIGHT_IQ2_XS)
#include "quant/iq2_xs.glsl"
#elif defined(WEIGHT_IQ2_S)
#include "quant/iq2_s.glsl"
#elif defined(WEIGHT_IQ3_XXS)
#include "quant/iq3_xxs.glsl"
#elif defined(WEIGHT_IQ3_S)
#include "quant/iq3_s.glsl"
#elif defined(WEIGHT_IQ1_S)
#include "quant/iq1_s.glsl"
#elif defined(WEIGHT_IQ1_M)
#include "quant/iq1_m.glsl"
#elif defined(WEIGHT_TQ1_0)
#include "quant/tq1_0.glsl"
#elif defined(WEIGHT_TQ2_0)
#include "quant/tq2_0.glsl"
#else
#error "no WEIGHT_<TYPE> defined"
#endif

// 8-element units per block.
#define QUANT_UNITS (QUANT_K / 8)

#endif
