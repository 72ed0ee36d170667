// Q6_K: 210-byte super-blocks of 256: ql[128], qh[64], scales: int8[16],
// d: f16. In half h (128 elements), element 128h + 32t + l (t in 0..3, l in
// 0..31) has its low nibble in ql[64h + 32(t & 1) + l] (low nibble for
// t < 2) and its top two bits at bits 2t..2t+1 of qh[32h + l]; sub-block
// e / 16 has scale scales[e / 16]. value = (d * scale) * (q - 32)
// (shaders/quant/q6_k.glsl). 2-byte aligned: ql = halves 0..63,
// qh = 64..95, scales = 96..103, d = 104.
#pragma once
#include "common.h"

namespace quant {
struct Q6_K {
    static constexpr uint32_t K = 256u;
    static constexpr uint32_t BLOCK_BYTES = 210u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = f16_bits_to_f32((uint16_t)half_at(b, 104u));
        // Sub-block j / 2: signed byte (j / 2) & 1 of half 96 + j / 4.
        int32_t sc = (int8_t)(half_at(b, 96u + (j >> 2)) >> (8u * ((j >> 1) & 1u)));
        float dl = d * (float)sc;
        uint32_t h = j >> 4;          // 128-element half
        uint32_t t = (j >> 2) & 3u;   // 32-element run within it
        uint32_t l0 = 4u * (j & 3u);  // first byte / 2 within the run
        uint32_t k = 32u * h + 16u * (t & 1u) + l0;
        uint32_t shift = 4u * (t >> 1);
        uint32_t m = 64u + 16u * h + l0;
        uint32_t hs = 2u * t;
        uint32_t h0 = ((halves_at(b, m) >> hs) & 0x03030303u) << 4;
        uint32_t h1 = ((halves_at(b, m + 2u) >> hs) & 0x03030303u) << 4;
        uint32_t q0 = ((halves_at(b, k) >> shift) & 0x0F0F0F0Fu) | h0;
        uint32_t q1 = ((halves_at(b, k + 2u) >> shift) & 0x0F0F0F0Fu) | h1;
        return cat8(dl * (ubytes_f4(q0) - 32.0f), dl * (ubytes_f4(q1) - 32.0f));
    }
};
} // namespace quant
