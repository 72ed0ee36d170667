// Q4_1: 20-byte blocks of 32: d: f16, m: f16, qs[16]; byte i of qs holds
// element i (low nibble) and i + 16 (high nibble); value = d * q + m
// (shaders/quant/q4_1.glsl). 4-byte aligned: word 0 = (d, m), 1..4 = qs.
#pragma once
#include "common.h"

namespace quant {
struct Q4_1 {
    static constexpr uint32_t K = 32u;
    static constexpr uint32_t BLOCK_BYTES = 20u;
    static constexpr bool Q8_MIN = true;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        uint32_t dm = word_at(b, 0u);
        float d = f16_lo(dm), m = f16_hi(dm);
        uint32_t w = 1u + 2u * (j & 1u);
        uint32_t shift = 4u * (j >> 1);
        uint32_t q0 = (word_at(b, w) >> shift) & 0x0F0F0F0Fu;
        uint32_t q1 = (word_at(b, w + 1u) >> shift) & 0x0F0F0F0Fu;
        return cat8(ubytes_f4(q0) * d + m, ubytes_f4(q1) * d + m);
    }
    // The quants as bytes 0..15; (d, m).
    DEV float2 block_q8(const uint8_t* row, uint32_t ib, uint32_t q[8]) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
#pragma unroll
        for (uint32_t i = 0u; i < 4u; i++) {
            uint32_t w = word_at(b, 1u + i);
            q[i] = w & 0x0F0F0F0Fu;
            q[i + 4u] = (w >> 4) & 0x0F0F0F0Fu;
        }
        uint32_t dm = word_at(b, 0u);
        return (float2){f16_lo(dm), f16_hi(dm)};
    }
};
} // namespace quant
