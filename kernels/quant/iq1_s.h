// IQ1_S: 50-byte super-blocks of 256: d: f16, qs[32] (low 8 bits of each
// 8-element group's 11-bit lattice index), qh: u16[8], one per 32 elements:
// the four groups' top 3 index bits at bits 3k, the scale s at bits 12..14,
// the shift's sign at bit 15; value = d * (2s + 1) * (grid ± 1/8)
// (shaders/quant/iq1_s.glsl). 2-byte aligned: qs at byte 2, qh halves
// 17..24.
#pragma once
#include "iq_common.h"

namespace quant {
struct IQ1_S {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 50u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_lo(half_at(b, 0u));
        uint32_t qh = half_at(b, 17u + (j >> 2));
        float dl = d * (float)(2u * ((qh >> 12) & 7u) + 1u);
        float delta = (qh & 0x8000u) != 0u ? -0.125f : 0.125f;
        uint32_t index = iq_byte(b, 2u + j) | (((qh >> (3u * (j & 3u))) & 7u) << 8);
        return iq1_group8(index, dl, delta);
    }
};
} // namespace quant
