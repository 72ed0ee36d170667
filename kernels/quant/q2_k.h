// Q2_K: 84-byte super-blocks of 256: scales[16], qs[64], d: f16, dmin: f16.
// Sub-block s (16 elements) has scale = low nibble, min = high nibble of
// scales[s]. qs is two 32-byte groups, one per 128 elements: byte l of group
// g holds element 128g + 32t + l at bits 2t..2t+1 (t in 0..3).
// value = (d * scale) * q - dmin * min (shaders/quant/q2_k.glsl).
// 4-byte aligned: words 0..3 = scales, 4..19 = qs, word 20 = (d, dmin).
#pragma once
#include "common.h"

namespace quant {
struct Q2_K {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 84u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        uint32_t dm = word_at(b, 20u);
        // Elements 8j..8j+7 lie in sub-block j / 2.
        uint32_t sc = (word_at(b, j >> 3) >> (8u * ((j >> 1) & 3u))) & 0xFFu;
        float dl = f16_lo(dm) * (float)(sc & 0x0Fu);
        float ml = f16_hi(dm) * (float)(sc >> 4);
        // Group j / 16, bytes 8(j % 4)..+8, bits 2((j / 4) % 4).
        uint32_t k = 4u + 8u * (j >> 4) + 2u * (j & 3u);
        uint32_t shift = 2u * ((j >> 2) & 3u);
        uint32_t q0 = (word_at(b, k) >> shift) & 0x03030303u;
        uint32_t q1 = (word_at(b, k + 1u) >> shift) & 0x03030303u;
        return cat8(dl * ubytes_f4(q0) - ml, dl * ubytes_f4(q1) - ml);
    }
};
} // namespace quant
