// IQ3_S: 110-byte super-blocks of 256: d: f16, qs[64] (low 8 bits of 9-bit
// lattice indices, one per 4 elements), qh[8] (bit k of qh[g]: top bit of
// index k of 32-element group g), signs[32], scales[4] (a nibble per 32
// elements, low first); value = d * (1 + 2s) * grid * sign
// (shaders/quant/iq3_s.glsl). 2-byte aligned: the two indices of elements
// 8j..8j+7 are half 1 + j; qh at byte 66, signs at 74, scales at 106.
#pragma once
#include "iq_common.h"

namespace quant {
struct IQ3_S {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 110u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_lo(half_at(b, 0u));
        uint32_t g = j >> 2, l = j & 3u;
        uint32_t s = (iq_byte(b, 106u + (g >> 1)) >> (4u * (g & 1u))) & 0x0Fu;
        float db = d * (float)(1u + 2u * s);
        uint32_t pair = half_at(b, 1u + j);
        uint32_t qh = iq_byte(b, 66u + g);
        uint32_t i1 = (pair & 0xFFu) | (((qh >> (2u * l)) & 1u) << 8);
        uint32_t i2 = (pair >> 8) | (((qh >> (2u * l + 1u)) & 1u) << 8);
        return iq3_group8(iq_point(IQ3S_POINTS, i1), iq_point(IQ3S_POINTS, i2), IQ3S_LEVELS[0],
                          IQ3S_LEVELS[1], iq_byte(b, 74u + j), db);
    }
};
} // namespace quant
