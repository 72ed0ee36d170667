// Q4_K: 144-byte super-blocks of 256: d: f16, dmin: f16, scales[12] (eight
// 6-bit scale/min pairs, see kquant_scale_min), qs[128]. qs is four 32-byte
// groups; byte l of group g holds element 64g + l (low nibble) and
// 64g + 32 + l (high nibble). value = (d * scale) * q - dmin * min
// (shaders/quant/q4_k.glsl). 4-byte aligned: word 0 = (d, dmin), words
// 1..3 = scales, words 4..35 = qs.
#pragma once
#include "common.h"

namespace quant {
struct Q4_K {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 144u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        uint32_t dm = word_at(b, 0u);
        uint32_t s = j >> 2; // 32-element sub-block
        ScaleMin sm = kquant_scale_min(word_at(b, 1u), word_at(b, 2u), word_at(b, 3u), s);
        float dl = f16_lo(dm) * (float)sm.scale;
        float ml = f16_hi(dm) * (float)sm.min;
        // Group s / 2, bytes 8(j % 4)..+8, high nibbles for odd s.
        uint32_t k = 4u + 8u * (s >> 1) + 2u * (j & 3u);
        uint32_t shift = 4u * (s & 1u);
        uint32_t q0 = (word_at(b, k) >> shift) & 0x0F0F0F0Fu;
        uint32_t q1 = (word_at(b, k + 1u) >> shift) & 0x0F0F0F0Fu;
        return cat8(dl * ubytes_f4(q0) - ml, dl * ubytes_f4(q1) - ml);
    }
};
} // namespace quant
