// TQ1_0: 54-byte super-blocks of 256: qs[48], qh[4], d: f16. Five trits per
// byte, stored as ceil(t * 256 / 243) of their base-3 number t (first trit
// most significant), so trit n is ((byte * 3^n mod 256) * 3) >> 8. Elements
// 0..159: trit n of qs[m] at 32n + m; 160..239: trit n of qs[32 + m] at
// 160 + 16n + m; 240..255: trit n of qh[m] at 240 + 4n + m;
// value = (trit - 1) * d (shaders/quant/tq1_0.glsl). 2-byte aligned: d is
// half 26.
#pragma once
#include "iq_common.h"

namespace quant {
// Trit n of each of the four bytes of w, as -1, 0, 1.
DEV float4 tq1_trits4(uint32_t w, uint32_t n) {
    uint32_t pow3 = n == 0u ? 1u : n == 1u ? 3u : n == 2u ? 9u : n == 3u ? 27u : 81u;
    float4 r;
    for (uint32_t c = 0u; c < 4u; c++) {
        uint32_t q = (((w >> (8u * c)) & 0xFFu) * pow3) & 0xFFu;
        r[c] = (float)((int32_t)((q * 3u) >> 8) - 1);
    }
    return r;
}

struct TQ1_0 {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 54u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_lo(half_at(b, 26u));
        if (j < 20u) {
            // qs[8(j % 4)..+8], trit j / 4.
            uint32_t k = 4u * (j & 3u);
            return cat8(tq1_trits4(halves_at(b, k), j >> 2) * d,
                        tq1_trits4(halves_at(b, k + 2u), j >> 2) * d);
        }
        if (j < 30u) {
            // qs[32 + 8((j - 20) % 2)..+8], trit (j - 20) / 2.
            uint32_t k = 16u + 4u * ((j - 20u) & 1u);
            return cat8(tq1_trits4(halves_at(b, k), (j - 20u) >> 1) * d,
                        tq1_trits4(halves_at(b, k + 2u), (j - 20u) >> 1) * d);
        }
        // qh[0..4], trits 2(j - 30) and 2(j - 30) + 1.
        uint32_t w = halves_at(b, 24u);
        return cat8(tq1_trits4(w, 2u * (j - 30u)) * d, tq1_trits4(w, 2u * (j - 30u) + 1u) * d);
    }
};
} // namespace quant
