// Q5_K: 176-byte super-blocks of 256: d: f16, dmin: f16, scales[12] (as
// Q4_K), qh[32], qs[128] (as Q4_K). Bit s of qh[l] is the fifth bit of
// element 32s + l. value = (d * scale) * q - dmin * min
// (shaders/quant/q5_k.glsl). 4-byte aligned: word 0 = (d, dmin), words
// 1..3 = scales, words 4..11 = qh, words 12..43 = qs.
#pragma once
#include "common.h"

namespace quant {
struct Q5_K {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 176u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        uint32_t dm = word_at(b, 0u);
        uint32_t s = j >> 2; // 32-element sub-block
        ScaleMin sm = kquant_scale_min(word_at(b, 1u), word_at(b, 2u), word_at(b, 3u), s);
        float dl = f16_lo(dm) * (float)sm.scale;
        float ml = f16_hi(dm) * (float)sm.min;
        // qh and qs bytes l0..l0+7 with l0 = 8(j % 4).
        uint32_t m = 2u * (j & 3u);
        uint32_t h0 = ((word_at(b, 4u + m) >> s) & 0x01010101u) << 4;
        uint32_t h1 = ((word_at(b, 5u + m) >> s) & 0x01010101u) << 4;
        uint32_t k = 12u + 8u * (s >> 1) + m;
        uint32_t shift = 4u * (s & 1u);
        uint32_t q0 = ((word_at(b, k) >> shift) & 0x0F0F0F0Fu) | h0;
        uint32_t q1 = ((word_at(b, k + 1u) >> shift) & 0x0F0F0F0Fu) | h1;
        return cat8(dl * ubytes_f4(q0) - ml, dl * ubytes_f4(q1) - ml);
    }
};
} // namespace quant
