// IQ2_XXS: 66-byte super-blocks of 256: d: f16, then per 32 elements two
// little-endian u32: four 8-bit lattice indices (one per 8 elements), then
// four 7-bit sign fields (eighth sign implied by parity) and the scale s in
// bits 28..31; value = d * (0.5 + s) * 0.25 * grid * sign
// (shaders/quant/iq2_xxs.glsl). 2-byte aligned: half 0 = d, group g at
// halves 1 + 4g .. 4 + 4g.
#pragma once
#include "iq_common.h"

namespace quant {
struct IQ2_XXS {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 66u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_lo(half_at(b, 0u));
        uint32_t g = j >> 2, l = j & 3u;
        uint32_t aux = halves_at(b, 3u + 4u * g);
        float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        uint32_t index = iq_byte(b, 2u + 8u * g + l);
        uint32_t signs = iq_signs7((aux >> (7u * l)) & 127u);
        return iq2_group8(iq_point(IQ2XXS_POINTS, index), IQ2XXS_LEVELS[0], signs, db);
    }
};
} // namespace quant
