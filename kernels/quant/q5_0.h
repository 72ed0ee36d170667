// Q5_0: 22-byte blocks of 32: d: f16, qh: u32, qs[16]; element i has its low
// nibble in qs (byte i low for i < 16, byte i - 16 high otherwise) and its
// fifth bit at bit i of qh; value = d * (q - 16) (shaders/quant/q5_0.glsl).
// 2-byte aligned: half 0 = d, halves 1..2 = qh, halves 3..10 = qs.
#pragma once
#include "common.h"

namespace quant {
struct Q5_0 {
    static constexpr uint32_t K = 32u;
    static constexpr uint32_t BLOCK_BYTES = 22u;
    static constexpr bool Q8_MIN = false;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_bits_to_f32((uint16_t)half_at(b, 0u));
        // qh byte j holds the fifth bits of elements 8j..8j+7.
        uint32_t h = (half_at(b, 1u + (j >> 1)) >> (8u * (j & 1u))) & 0xFFu;
        // qs bytes 8(j & 1)..+8 = halves 3 + 4(j & 1)..+4, low nibbles for
        // j < 2.
        uint32_t k = 3u + 4u * (j & 1u);
        uint32_t shift = 4u * (j >> 1);
        uint32_t q0 = ((halves_at(b, k) >> shift) & 0x0F0F0F0Fu) | fifth_bits(h);
        uint32_t q1 = ((halves_at(b, k + 2u) >> shift) & 0x0F0F0F0Fu) | fifth_bits(h >> 4);
        return cat8((ubytes_f4(q0) - 16.0f) * d, (ubytes_f4(q1) - 16.0f) * d);
    }
    // The five-bit quants minus 16 as signed bytes; (d, 0).
    DEV float2 block_q8(const uint8_t* row, uint32_t ib, uint32_t q[8]) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        uint32_t qh = halves_at(b, 1u);
#pragma unroll
        for (uint32_t i = 0u; i < 4u; i++) {
            uint32_t w = halves_at(b, 3u + 2u * i);
            q[i] = sub_bytes((w & 0x0F0F0F0Fu) | fifth_bits(qh >> (4u * i)), 0x10101010u);
            q[i + 4u] = sub_bytes(((w >> 4) & 0x0F0F0F0Fu) | fifth_bits(qh >> (16u + 4u * i)),
                                  0x10101010u);
        }
        return (float2){f16_bits_to_f32((uint16_t)half_at(b, 0u)), 0.0f};
    }
};
} // namespace quant
