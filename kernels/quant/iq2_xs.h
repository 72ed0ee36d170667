// IQ2_XS: 74-byte super-blocks of 256: d: f16, qs: u16[32] (one per 8
// elements: 9-bit lattice index | 7-bit sign field << 9), scales[8] (a
// nibble per 16 elements, low first); value = d * (0.5 + s) * 0.25 * grid *
// sign (shaders/quant/iq2_xs.glsl). 2-byte aligned: half 0 = d, halves
// 1..32 = qs, scales at byte 66.
#pragma once
#include "iq_common.h"

namespace quant {
struct IQ2_XS {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 74u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_lo(half_at(b, 0u));
        uint32_t q = half_at(b, 1u + j);
        // Elements 8j..8j+7 are in 16-element scale group j / 2.
        uint32_t s = (iq_byte(b, 66u + (j >> 2)) >> (4u * ((j >> 1) & 1u))) & 0x0Fu;
        float db = d * (0.5f + (float)s) * 0.25f;
        return iq2_group8(iq_point(IQ2XS_POINTS, q & 511u), IQ2XS_LEVELS[0], iq_signs7(q >> 9), db);
    }
};
} // namespace quant
