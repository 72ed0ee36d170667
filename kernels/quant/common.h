// Shared by the weight-type readers in kernels/quant/<type>.h, the HIP port
// of shaders/quant/*.glsl (interface in shaders/quant/README.md). Every type
// is a struct in namespace quant with
//
//   static constexpr uint32_t K;            // elements per block (32 for
//                                           // plain floats)
//   static constexpr uint32_t BLOCK_BYTES;  // bytes per block of K
//   // Elements 8j .. 8j+7 (j < K / 8), in element order, of block ib of
//   // the row at `row`.
//   float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j);
//
// and the seven 32-element types with an integer form (q4_0 q4_1 q5_0 q5_1
// q8_0 iq4_nl mxfp4) also
//
//   static constexpr bool Q8_MIN;           // quants 0..31 plus a block
//                                           // minimum (Q4_1, Q5_1)
//   // The 32 quants of block ib as bytes, four to a word in element order
//   // (word i = elements 4i..4i+3); returns (d, m): value = d * q + m.
//   float2 block_q8(const uint8_t* row, uint32_t ib, uint32_t q[8]);
//
// Numerics: each value is computed with the same f32 operations, in the
// same order, as the CPU reference (crates/rocmforge-core/src/quant) and
// the shaders, e.g. Q4_K's d * scale (rounded) times q minus dmin * min;
// the build's -ffp-contract=off keeps every product rounded.
//
// Alignment: rows start at multiples of the row size in a tensor aligned
// to at least 32 bytes, so a block is only as aligned as its size allows.
// Types whose block size is a multiple of 4 (Q4_1 20, Q5_1 24, Q2_K 84,
// Q4_K 144, Q5_K 176, IQ4_XS 136, and the 8-value units of F16 / BF16) are
// read in 32-bit words, the others (Q5_0 22, Q3_K 110, Q6_K 210, IQ4_NL
// 18) in 16-bit halves, and MXFP4 (17) in bytes, as the shaders do; F32
// units are 16-byte aligned. Never a wider load than the block guarantees,
// except Q4_0's and Q8_0's integer forms (d_and_quant_words), which read
// aligned words from up to 2 bytes before the block.
#pragma once

#ifndef RF_QUANT_HOST_TEST
#include "../prelude.h"
#endif

typedef float float4 __attribute__((ext_vector_type(4)));

namespace quant {

// ---- Reading blocks ----------------------------------------------------

// Half i of a 2-byte-aligned block.
DEV uint32_t half_at(const uint8_t* b, uint32_t i) { return ((const uint16_t*)b)[i]; }
// Halves i and i + 1 as one little-endian word.
DEV uint32_t halves_at(const uint8_t* b, uint32_t i) {
    return half_at(b, i) | (half_at(b, i + 1u) << 16);
}
// Word i of a 4-byte-aligned block.
DEV uint32_t word_at(const uint8_t* b, uint32_t i) { return ((const uint32_t*)b)[i]; }

// The f16 bits at the start of a 2-byte-aligned block (Q4_0's, Q8_0's)
// and its first N quant words after them (shaders/quant.glsl's
// d_and_quant_words): N aligned words from the block's address rounded
// down to 4 bytes, the quants shifted out of them, and word N - 1 as
// halves 2N - 1 and 2N: N + 2 loads where halves take 2N + 1. The
// rounded-down address starts at most 2 bytes before the block, inside
// the tensor (whose start is 4-byte aligned); the loads end at word N - 1.
template <uint32_t N> DEV uint32_t d_and_quant_words(const uint8_t* b, uint32_t q[N]) {
    bool aligned = (reinterpret_cast<__UINTPTR_TYPE__>(b) & 2u) == 0u;
    const uint32_t* w = reinterpret_cast<const uint32_t*>(aligned ? b : b - 2);
    uint32_t x[N];
#pragma unroll
    for (uint32_t i = 0u; i < N; i++) {
        x[i] = w[i];
    }
    // Aligned: x[0] = d | quant bytes 0, 1 << 16, quant word i straddles
    // x[i] and x[i + 1]; else x[0]'s high half is d and x[i + 1] is quant
    // word i.
#pragma unroll
    for (uint32_t i = 0u; i + 1u < N; i++) {
        q[i] = aligned ? (x[i] >> 16) | (x[i + 1u] << 16) : x[i + 1u];
    }
    q[N - 1u] = halves_at(b, 2u * N - 1u);
    return aligned ? x[0] & 0xFFFFu : x[0] >> 16;
}

// ---- Scalars -----------------------------------------------------------

DEV float f16_lo(uint32_t w) { return f16_bits_to_f32((uint16_t)(w & 0xFFFFu)); }
DEV float f16_hi(uint32_t w) { return f16_bits_to_f32((uint16_t)(w >> 16)); }
// bf16 is the top half of an f32.
DEV float bf16_lo(uint32_t w) { return __builtin_bit_cast(float, w << 16); }
DEV float bf16_hi(uint32_t w) { return __builtin_bit_cast(float, w & 0xFFFF0000u); }

// ---- Vectors -----------------------------------------------------------

DEV float8 cat8(float4 lo, float4 hi) {
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
}
// The four bytes of w, unsigned, as floats (exact).
DEV float4 ubytes_f4(uint32_t w) {
    return (float4){(float)(w & 0xFFu), (float)((w >> 8) & 0xFFu), (float)((w >> 16) & 0xFFu),
                    (float)(w >> 24)};
}
// The four bytes of w, signed, as floats (exact).
DEV float4 sbytes_f4(uint32_t w) {
    return (float4){(float)(int8_t)w, (float)(int8_t)(w >> 8), (float)(int8_t)(w >> 16),
                    (float)(int8_t)(w >> 24)};
}

// ---- Integer forms -----------------------------------------------------

// Subtracts the per-byte offsets o (each <= 16) from bytes q (each < 128),
// giving signed bytes: bit 7 set first keeps borrows inside each byte.
DEV uint32_t sub_bytes(uint32_t q, uint32_t o) { return ((q | 0x80808080u) - o) ^ 0x80808080u; }
// Bits 0..3 of h moved to bit 4 of bytes 0..3 (the Q5 types' fifth bits).
DEV uint32_t fifth_bits(uint32_t h) {
    return ((h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21)) << 4;
}

// ---- K-quants ----------------------------------------------------------

// The 6-bit (scale, min) of sub-block s (0..7) of a Q4_K / Q5_K super-block
// from its 12-byte scales array read as three little-endian words w0..w2
// (ggml's get_scale_min_k4). Sub-blocks 0..3: scale = low six bits of byte
// s, min = low six bits of byte s + 4. Sub-blocks 4..7: low nibbles in byte
// s + 4 (scale low, min high), top two bits in bits 6..7 of bytes s - 4
// (scale) and s (min).
struct ScaleMin {
    uint32_t scale;
    uint32_t min;
};
DEV ScaleMin kquant_scale_min(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t s) {
    uint32_t k = 8u * (s & 3u);
    uint32_t a = (w0 >> k) & 0xFFu;
    uint32_t b = (w1 >> k) & 0xFFu;
    if (s < 4u) {
        return ScaleMin{a & 63u, b & 63u};
    }
    uint32_t c = (w2 >> k) & 0xFFu;
    return ScaleMin{(c & 0x0Fu) | ((a >> 6) << 4), (c >> 4) | ((b >> 6) << 4)};
}

// ---- 16-level tables (IQ4_NL, MXFP4) ------------------------------------

// A table of 16 signed bytes is held as four words W0..W3, four levels to a
// word (level q is byte q & 3 of word q >> 2): lookups are byte permutes or
// selects, never an indexed array (which could land in scratch memory).

// The levels of the four indices in bytes 0..3 of idx (each 0..15), as
// four signed bytes in the same places. Plain form: four selects.
template <uint32_t W0, uint32_t W1, uint32_t W2, uint32_t W3>
DEV uint32_t lut4_portable(uint32_t idx) {
    uint32_t r = 0u;
#pragma unroll
    for (uint32_t k = 0u; k < 32u; k += 8u) {
        uint32_t q = (idx >> k) & 0x0Fu;
        uint32_t w = q < 8u ? (q < 4u ? W0 : W1) : (q < 12u ? W2 : W3);
        r |= ((w >> (8u * (q & 3u))) & 0xFFu) << k;
    }
    return r;
}

#if defined(RF_QUANT_HOST_TEST)
// The host test checks the permute form below against the plain one with
// this model of v_perm_b32 (AMD ISA: byte i of the result is byte sel_i of
// the 64-bit {src0:src1}, src1 the low word, for selectors 0..7).
DEV uint32_t rf_perm_model(uint32_t src0, uint32_t src1, uint32_t sel) {
    uint64_t data = ((uint64_t)src0 << 32) | src1;
    uint32_t r = 0u;
    for (uint32_t i = 0u; i < 32u; i += 8u) {
        r |= (uint32_t)((data >> (8u * ((sel >> i) & 0xFFu))) & 0xFFu) << i;
    }
    return r;
}
#define RF_LUT_PERM(a, b, s) rf_perm_model(a, b, s)
#elif RF_AMDGPU
#define RF_LUT_PERM(a, b, s) __builtin_amdgcn_perm(a, b, s)
#endif

template <uint32_t W0, uint32_t W1, uint32_t W2, uint32_t W3> DEV uint32_t lut4(uint32_t idx) {
#if defined(RF_LUT_PERM)
    // Two byte permutes (levels 0..7 and 8..15) and a per-byte select on
    // bit 3 of each index.
    uint32_t sel = idx & 0x07070707u;
    uint32_t lo = RF_LUT_PERM(W1, W0, sel);
    uint32_t hi = RF_LUT_PERM(W3, W2, sel);
    uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
    return (hi & m) | (lo & ~m);
#elif RF_NVPTX
    // prmt: one selector nibble per result byte over the 8 bytes {b:a}.
    uint32_t x = idx & 0x07070707u;
    x |= x >> 4;
    uint32_t sel = (x & 0xFFu) | ((x >> 8) & 0xFF00u);
    uint32_t lo, hi;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(lo) : "r"(W0), "r"(W1), "r"(sel));
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hi) : "r"(W2), "r"(W3), "r"(sel));
    uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
    return (hi & m) | (lo & ~m);
#else
    return lut4_portable<W0, W1, W2, W3>(idx);
#endif
}

// ---- IQ4 ---------------------------------------------------------------

// ggml's kvalues_iq4nl {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25,
// 38, 53, 69, 89, 113}.
#define IQ4NL_W0 0xBFAD9881u
#define IQ4NL_W1 0xF6EADDCFu
#define IQ4NL_W2 0x26190D01u
#define IQ4NL_W3 0x71594535u

DEV uint32_t iq4nl_lut4(uint32_t idx) { return lut4<IQ4NL_W0, IQ4NL_W1, IQ4NL_W2, IQ4NL_W3>(idx); }

// The levels of the four nibbles of w at bits shift, shift + 8, shift + 16,
// shift + 24 (shift 0 or 4), as floats.
DEV float4 iq4nl_levels4(uint32_t w, uint32_t shift) {
    return sbytes_f4(iq4nl_lut4((w >> shift) & 0x0F0F0F0Fu));
}

} // namespace quant
