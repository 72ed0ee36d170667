// BF16 weights, read in blocks of 32 (shaders/quant/bf16.glsl): a bf16 is
// the top half of an f32.
#pragma once
#include "common.h"

namespace quant {
struct BF16 {
    static constexpr uint32_t K = 32u;
    static constexpr uint32_t BLOCK_BYTES = 64u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES + 16u * j;
        uint32_t w0 = word_at(b, 0u), w1 = word_at(b, 1u), w2 = word_at(b, 2u), w3 = word_at(b, 3u);
        return (float8){bf16_lo(w0), bf16_hi(w0), bf16_lo(w1), bf16_hi(w1),
                        bf16_lo(w2), bf16_hi(w2), bf16_lo(w3), bf16_hi(w3)};
    }
};
} // namespace quant
