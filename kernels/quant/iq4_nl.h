// IQ4_NL: 18-byte blocks of 32: d: f16, qs[16] in Q4_0's nibble order (byte
// i: element i low, i + 16 high); value = d * kvalues_iq4nl[q]
// (shaders/quant/iq4_nl.glsl). 2-byte aligned: half 0 = d, halves 1..8 = qs.
#pragma once
#include "common.h"

namespace quant {
struct IQ4_NL {
    static constexpr uint32_t K = 32u;
    static constexpr uint32_t BLOCK_BYTES = 18u;
    static constexpr bool Q8_MIN = false;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_bits_to_f32((uint16_t)half_at(b, 0u));
        // qs bytes 8(j & 1)..+8 = halves 1 + 4(j & 1)..+4, low nibbles for
        // j < 2.
        uint32_t k = 1u + 4u * (j & 1u);
        uint32_t shift = 4u * (j >> 1);
        return cat8(iq4nl_levels4(halves_at(b, k), shift) * d,
                    iq4nl_levels4(halves_at(b, k + 2u), shift) * d);
    }
    // The 32 levels as signed bytes; (d, 0).
    DEV float2 block_q8(const uint8_t* row, uint32_t ib, uint32_t q[8]) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
#pragma unroll
        for (uint32_t i = 0u; i < 4u; i++) {
            uint32_t w = halves_at(b, 1u + 2u * i);
            q[i] = iq4nl_lut4(w & 0x0F0F0F0Fu);
            q[i + 4u] = iq4nl_lut4((w >> 4) & 0x0F0F0F0Fu);
        }
        return (float2){f16_bits_to_f32((uint16_t)half_at(b, 0u)), 0.0f};
    }
};
} // namespace quant
