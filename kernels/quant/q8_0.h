// Q8_0: 34-byte blocks of 32: d: f16, qs[32] (int8); value = d * q
// (shaders/quant/q8_0.glsl). 2-byte aligned: half 0 = d, halves 1..16 = qs.
#pragma once
#include "common.h"

namespace quant {
struct Q8_0 {
    static constexpr uint32_t K = 32u;
    static constexpr uint32_t BLOCK_BYTES = 34u;
    static constexpr bool Q8_MIN = false;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_bits_to_f32((uint16_t)half_at(b, 0u));
        uint32_t h = 1u + 4u * j;
        return cat8(sbytes_f4(halves_at(b, h)) * d, sbytes_f4(halves_at(b, h + 2u)) * d);
    }
    // The signed quants; (d, 0).
    DEV float2 block_q8(const uint8_t* row, uint32_t ib, uint32_t q[8]) {
        uint32_t d = d_and_quant_words<8>(row + ib * BLOCK_BYTES, q);
        return (float2){f16_bits_to_f32((uint16_t)d), 0.0f};
    }
};
} // namespace quant
