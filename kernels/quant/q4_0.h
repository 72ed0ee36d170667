// Q4_0: 18-byte blocks of 32: d: f16, qs[16]; byte i of qs holds element i
// (low nibble) and i + 16 (high nibble); value = d * (q - 8)
// (shaders/quant/q4_0.glsl). 2-byte aligned: half 0 = d, halves 1..8 = qs.
#pragma once
#include "common.h"

namespace quant {
struct Q4_0 {
    static constexpr uint32_t K = 32u;
    static constexpr uint32_t BLOCK_BYTES = 18u;
    static constexpr bool Q8_MIN = false;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_bits_to_f32((uint16_t)half_at(b, 0u));
        // Elements 8j..8j+7: qs bytes 8(j & 1)..+8, low nibbles for j < 2.
        uint32_t h = 1u + 4u * (j & 1u);
        uint32_t shift = 4u * (j >> 1);
        uint32_t q0 = (halves_at(b, h) >> shift) & 0x0F0F0F0Fu;
        uint32_t q1 = (halves_at(b, h + 2u) >> shift) & 0x0F0F0F0Fu;
        return cat8((ubytes_f4(q0) - 8.0f) * d, (ubytes_f4(q1) - 8.0f) * d);
    }
    // The quants minus 8 as signed bytes; (d, 0).
    DEV float2 block_q8(const uint8_t* row, uint32_t ib, uint32_t q[8]) {
        uint32_t w[4];
        uint32_t d = d_and_quant_words<4>(row + ib * BLOCK_BYTES, w);
#pragma unroll
        for (uint32_t i = 0u; i < 4u; i++) {
            q[i] = sub_bytes(w[i] & 0x0F0F0F0Fu, 0x08080808u);
            q[i + 4u] = sub_bytes((w[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
        return (float2){f16_bits_to_f32((uint16_t)d), 0.0f};
    }
};
} // namespace quant
