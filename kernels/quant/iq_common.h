// Shared by the i-quant and ternary readers (iq2_*.h, iq3_*.h, iq1_*.h,
// tq*.h), ports of shaders/quant/iq_common.glsl. Their blocks are only
// 2-byte aligned (66, 74, 82, 98, 110, 50, 54 bytes), so they are read as
// bytes and 16-bit halves. Lattice points come from the generated
// iq_grids.h (compact form: a level index per coordinate, see that file).
#pragma once
#include "common.h"
#include "iq_grids.h"

namespace quant {

// Byte k of a block.
DEV uint32_t iq_byte(const uint8_t* b, uint32_t k) { return b[k]; }

// Point i of a *_POINTS table (16 bits).
DEV uint32_t iq_point(const uint32_t* points, uint32_t i) {
    return (points[i >> 1] >> (16u * (i & 1u))) & 0xFFFFu;
}

// A 7-bit sign field with its implied eighth bit: the number of negatives
// is even (ggml's ksigns_iq2xs).
DEV uint32_t iq_signs7(uint32_t s) { return s | (((uint32_t)__builtin_popcount(s) & 1u) << 7); }

// Byte l of packed level words: level l's magnitude (unsigned).
DEV float iq_level(uint32_t levels, uint32_t l) { return (float)((levels >> (8u * l)) & 0xFFu); }

// v with its sign flipped where bit 0 of s is set: what the CPU
// reference's multiply by -1 gives.
DEV float iq_flip(float v, uint32_t s) {
    // A scalar argument: clang 19 bit-casts a vector element operand
    // (x[1]) from the vector's first element.
    return __builtin_bit_cast(float, __builtin_bit_cast(uint32_t, v) ^ ((s & 1u) << 31));
}

// x negated where bit first + c of signs is set, for c = 0..3.
DEV float4 iq_apply_signs4(float4 x, uint32_t signs, uint32_t first) {
    uint32_t s = signs >> first;
    return (float4){iq_flip(x.x, s), iq_flip(x.y, s >> 1), iq_flip(x.z, s >> 2), iq_flip(x.w, s >> 3)};
}

// Coordinates first..first+3 of an 8-coordinate, 2-bit point p, as the
// magnitudes of levels.
DEV float4 iq2_coords4(uint32_t p, uint32_t first, uint32_t levels) {
    uint32_t q = p >> (2u * first);
    return (float4){iq_level(levels, q & 3u), iq_level(levels, (q >> 2) & 3u),
                    iq_level(levels, (q >> 4) & 3u), iq_level(levels, (q >> 6) & 3u)};
}

// Level l (0..7) of two packed level words.
DEV float iq3_level(uint32_t l, uint32_t lv0, uint32_t lv1) {
    uint64_t both = ((uint64_t)lv1 << 32) | lv0;
    return (float)((uint32_t)(both >> (8u * l)) & 0xFFu);
}

// The 4 coordinates of a 3-bit point p, as magnitudes of two level words.
DEV float4 iq3_coords4(uint32_t p, uint32_t lv0, uint32_t lv1) {
    return (float4){iq3_level(p & 7u, lv0, lv1), iq3_level((p >> 3) & 7u, lv0, lv1),
                    iq3_level((p >> 6) & 7u, lv0, lv1), iq3_level((p >> 9) & 7u, lv0, lv1)};
}

// An IQ2 group: 8 values db * magnitude, negated where signs has the bit,
// as the CPU reference computes them.
DEV float8 iq2_group8(uint32_t p, uint32_t levels, uint32_t signs, float db) {
    return cat8(iq_apply_signs4(db * iq2_coords4(p, 0u, levels), signs, 0u),
                iq_apply_signs4(db * iq2_coords4(p, 4u, levels), signs, 4u));
}

// An IQ3 pair of points: db * magnitude, negated where signs has the bit.
DEV float8 iq3_group8(uint32_t p1, uint32_t p2, uint32_t lv0, uint32_t lv1, uint32_t signs,
                      float db) {
    return cat8(iq_apply_signs4(db * iq3_coords4(p1, lv0, lv1), signs, 0u),
                iq_apply_signs4(db * iq3_coords4(p2, lv0, lv1), signs, 4u));
}

// Coordinates first..first+3 of IQ1 lattice point index as -1, 0, 1.
DEV float4 iq1_coords4(uint32_t index, uint32_t first) {
    uint32_t q = iq_point(IQ1S_POINTS, index) >> (2u * first);
    return (float4){(float)((int32_t)(q & 3u) - 1), (float)((int32_t)((q >> 2) & 3u) - 1),
                    (float)((int32_t)((q >> 4) & 3u) - 1), (float)((int32_t)((q >> 6) & 3u) - 1)};
}

// 8 IQ1 values dl * (coordinate + delta), as the CPU reference computes them.
DEV float8 iq1_group8(uint32_t index, float dl, float delta) {
    return cat8(dl * (iq1_coords4(index, 0u) + delta), dl * (iq1_coords4(index, 4u) + delta));
}

} // namespace quant
