// IQ4_XS: 136-byte super-blocks of 256: d: f16, scales_h: u16, scales_l[4],
// qs[128]. Sub-block s (32 elements) has the 6-bit scale
// ls = (nibble s of scales_l) | (bits 2s..2s+1 of scales_h) << 4 and its 16
// qs bytes in IQ4_NL's nibble order; value = (d * (ls - 32)) *
// kvalues_iq4nl[q] (shaders/quant/iq4_xs.glsl). 4-byte aligned: word 0 =
// (d, scales_h), word 1 = scales_l, words 2..33 = qs.
#pragma once
#include "common.h"

namespace quant {
struct IQ4_XS {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 136u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        uint32_t w0 = word_at(b, 0u);
        uint32_t s = j >> 2; // sub-block
        uint32_t ls = ((word_at(b, 1u) >> (4u * s)) & 0x0Fu) | (((w0 >> (16u + 2u * s)) & 3u) << 4);
        float dl = f16_lo(w0) * (float)((int32_t)ls - 32);
        // Within the sub-block: bytes 8(j & 1)..+8, low nibbles for
        // (j & 2) == 0.
        uint32_t k = 2u + 4u * s + 2u * (j & 1u);
        uint32_t shift = 2u * (j & 2u);
        return cat8(iq4nl_levels4(word_at(b, k), shift) * dl,
                    iq4nl_levels4(word_at(b, k + 1u), shift) * dl);
    }
};
} // namespace quant
