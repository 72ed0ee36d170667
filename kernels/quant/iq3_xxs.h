// IQ3_XXS: 98-byte super-blocks of 256: d: f16, qs[64] (8-bit lattice
// indices, one per 4 elements), then per 32 elements a little-endian u32 of
// four 7-bit sign fields (eighth sign implied by parity) and the scale s in
// bits 28..31; value = d * (0.5 + s) * 0.5 * grid * sign
// (shaders/quant/iq3_xxs.glsl). 2-byte aligned: the two indices of elements
// 8j..8j+7 are half 1 + j, the word of group g halves 33 + 2g and 34 + 2g.
#pragma once
#include "iq_common.h"

namespace quant {
struct IQ3_XXS {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 98u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_lo(half_at(b, 0u));
        uint32_t aux = halves_at(b, 33u + 2u * (j >> 2));
        float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        uint32_t signs = iq_signs7((aux >> (7u * (j & 3u))) & 127u);
        uint32_t pair = half_at(b, 1u + j);
        return iq3_group8(iq_point(IQ3XXS_POINTS, pair & 0xFFu), iq_point(IQ3XXS_POINTS, pair >> 8),
                          IQ3XXS_LEVELS[0], IQ3XXS_LEVELS[1], signs, db);
    }
};
} // namespace quant
