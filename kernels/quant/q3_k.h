// Q3_K: 110-byte super-blocks of 256: hmask[32], qs[64], scales[12], d: f16.
// Element e has its low two bits in qs as Q2_K lays them out (byte
// 32(e / 128) + e % 32, bits 2((e % 128) / 32)) and its third bit at bit
// e / 32 of hmask[e % 32]; q = low | third << 2, value =
// (d * (scale - 32)) * (q - 4). The sixteen 6-bit sub-block scales: low
// nibble of byte s (s < 8) or high nibble of byte s - 8, top two bits at
// bits 2(s / 4) of byte 8 + s % 4 (shaders/quant/q3_k.glsl).
// 2-byte aligned: hmask = halves 0..15, qs = 16..47, scales = 48..53,
// d = 54.
#pragma once
#include "common.h"

namespace quant {
struct Q3_K {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 110u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_bits_to_f32((uint16_t)half_at(b, 54u));
        uint32_t s = j >> 1; // sub-block
        uint32_t sl = (half_at(b, 48u + ((s & 7u) >> 1)) >> (8u * (s & 1u) + 4u * (s >> 3))) & 0x0Fu;
        uint32_t sh = (half_at(b, 52u + ((s & 3u) >> 1)) >> (8u * (s & 1u) + 2u * (s >> 2))) & 3u;
        float dl = d * (float)((int32_t)(sl | (sh << 4)) - 32);
        // Bytes l0..l0+7 of hmask and of qs group j / 16, l0 = 8(j % 4).
        uint32_t m = 4u * (j & 3u);
        uint32_t hb = j >> 2; // hmask bit
        uint32_t h0 = (halves_at(b, m) >> hb) & 0x01010101u;
        uint32_t h1 = (halves_at(b, m + 2u) >> hb) & 0x01010101u;
        uint32_t k = 16u + 16u * (j >> 4) + m;
        uint32_t shift = 2u * ((j >> 2) & 3u);
        uint32_t q0 = ((halves_at(b, k) >> shift) & 0x03030303u) | (h0 << 2);
        uint32_t q1 = ((halves_at(b, k + 2u) >> shift) & 0x03030303u) | (h1 << 2);
        return cat8(dl * (ubytes_f4(q0) - 4.0f), dl * (ubytes_f4(q1) - 4.0f));
    }
};
} // namespace quant
