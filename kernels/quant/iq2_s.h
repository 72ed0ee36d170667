// IQ2_S: 82-byte super-blocks of 256: d: f16, qs[32] (low 8 bits of each
// 8-element group's 10-bit lattice index), signs[32], qh[8] (top 2 index
// bits of group g at bits 2(g % 4) of qh[g / 4]), scales[8] (a nibble per 16
// elements, low first); value = d * (0.5 + s) * 0.25 * grid * sign
// (shaders/quant/iq2_s.glsl). Bytes: qs at 2, signs at 34, qh at 66,
// scales at 74.
#pragma once
#include "iq_common.h"

namespace quant {
struct IQ2_S {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 82u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_lo(half_at(b, 0u));
        uint32_t hi = (iq_byte(b, 66u + (j >> 2)) >> (2u * (j & 3u))) & 3u;
        uint32_t index = iq_byte(b, 2u + j) | (hi << 8);
        uint32_t s = (iq_byte(b, 74u + (j >> 2)) >> (4u * ((j >> 1) & 1u))) & 0x0Fu;
        float db = d * (0.5f + (float)s) * 0.25f;
        return iq2_group8(iq_point(IQ2S_POINTS, index), IQ2S_LEVELS[0], iq_byte(b, 34u + j), db);
    }
};
} // namespace quant
