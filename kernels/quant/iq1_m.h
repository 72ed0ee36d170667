// IQ1_M: 56-byte super-blocks of 256: qs[32] (low 8 bits of each 8-element
// group's 11-bit lattice index), qh[16] (per 16 elements: each group's top 3
// index bits in the low 3 bits of its nibble, low nibble first, its shift's
// sign at bit 3 of the nibble), scales: u16[4] (a 3-bit scale per 16
// elements, four to a half, in bits 0..11; the binary16 super-scale in the
// four top nibbles, lowest first); value = d * (2s + 1) * (grid ± 1/8)
// (shaders/quant/iq1_m.glsl). Read as bytes and halves: qh at byte 32,
// scales halves 24..27.
#pragma once
#include "iq_common.h"

namespace quant {
struct IQ1_M {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 56u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        uint32_t sc0 = half_at(b, 24u), sc1 = half_at(b, 25u), sc2 = half_at(b, 26u),
                 sc3 = half_at(b, 27u);
        uint32_t bits = (sc0 >> 12) | ((sc1 >> 8) & 0x00F0u) | ((sc2 >> 4) & 0x0F00u) | (sc3 & 0xF000u);
        float d = f16_lo(bits);
        uint32_t h = j >> 1; // 16-element scale group
        uint32_t sc = half_at(b, 24u + (h >> 2));
        float dl = d * (float)(2u * ((sc >> (3u * (h & 3u))) & 7u) + 1u);
        uint32_t nibble = (iq_byte(b, 32u + h) >> (4u * (j & 1u))) & 0x0Fu;
        float delta = (nibble & 8u) != 0u ? -0.125f : 0.125f;
        uint32_t index = iq_byte(b, j) | ((nibble & 7u) << 8);
        return iq1_group8(index, dl, delta);
    }
};
} // namespace quant
