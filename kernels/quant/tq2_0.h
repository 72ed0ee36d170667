// TQ2_0: 66-byte super-blocks of 256: qs[64], d: f16. Element
// 128h + 32n + m is bits 2n..2n+1 of qs[32h + m], stored + 1;
// value = (q - 1) * d (shaders/quant/tq2_0.glsl). 2-byte aligned: d is
// half 32.
#pragma once
#include "common.h"

namespace quant {
struct TQ2_0 {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 66u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_lo(half_at(b, 32u));
        // Bytes 32(j / 16) + 8(j % 4)..+8, bits 2((j / 4) % 4).
        uint32_t k = 16u * (j >> 4) + 4u * (j & 3u);
        uint32_t shift = 2u * ((j >> 2) & 3u);
        uint32_t q0 = (halves_at(b, k) >> shift) & 0x03030303u;
        uint32_t q1 = (halves_at(b, k + 2u) >> shift) & 0x03030303u;
        return cat8((ubytes_f4(q0) - 1.0f) * d, (ubytes_f4(q1) - 1.0f) * d);
    }
};
} // namespace quant
