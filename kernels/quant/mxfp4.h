// MXFP4: 17-byte blocks of 32: e: E8M0 exponent, qs[16] in Q4_0's nibble
// order (byte i: element i low, i + 16 high); value = 2^(e - 128) *
// kvalues_mxfp4[q], ggml's E2M1 levels doubled to integers under half the
// E8M0 scale (shaders/quant/mxfp4.glsl). Byte-aligned only: read bytes.
#pragma once
#include "common.h"

namespace quant {

// ggml's kvalues_mxfp4 {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8,
// -12}, as the 16-level tables of common.h.
#define MXFP4_W0 0x03020100u
#define MXFP4_W1 0x0C080604u
#define MXFP4_W2 0xFDFEFF00u
#define MXFP4_W3 0xF4F8FAFCu

DEV uint32_t mxfp4_lut4(uint32_t idx) { return lut4<MXFP4_W0, MXFP4_W1, MXFP4_W2, MXFP4_W3>(idx); }

// Half the E8M0 scale, from its bits as ggml's GGML_E8M0_TO_FP32_HALF:
// exponents 0 and 1 are the subnormals 2^-128 and 2^-127 (0 where the
// target flushes f32 denormals; no real weights are that small).
DEV float mxfp4_scale(uint32_t e) {
    return __builtin_bit_cast(float, e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
}

// Bytes i..i+3 of a byte-aligned block as one little-endian word.
DEV uint32_t bytes_at(const uint8_t* b, uint32_t i) {
    return (uint32_t)b[i] | ((uint32_t)b[i + 1u] << 8) | ((uint32_t)b[i + 2u] << 16) |
           ((uint32_t)b[i + 3u] << 24);
}

struct MXFP4 {
    static constexpr uint32_t K = 32u;
    static constexpr uint32_t BLOCK_BYTES = 17u;
    static constexpr bool Q8_MIN = false;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
        float d = mxfp4_scale(b[0]);
        // Elements 8j..8j+7: qs bytes 8(j & 1)..+8 (block bytes 1 +
        // 8(j & 1)..), low nibbles for j < 2.
        uint32_t k = 1u + 8u * (j & 1u);
        uint32_t shift = 4u * (j >> 1);
        uint32_t q0 = (bytes_at(b, k) >> shift) & 0x0F0F0F0Fu;
        uint32_t q1 = (bytes_at(b, k + 4u) >> shift) & 0x0F0F0F0Fu;
        return cat8(sbytes_f4(mxfp4_lut4(q0)) * d, sbytes_f4(mxfp4_lut4(q1)) * d);
    }
    // The 32 doubled levels as signed bytes; (half scale, 0), so the
    // integer mat-vec's (d_w * d_x) * sum is ggml's per-block product.
    DEV float2 block_q8(const uint8_t* row, uint32_t ib, uint32_t q[8]) {
        const uint8_t* b = row + ib * BLOCK_BYTES;
#pragma unroll
        for (uint32_t i = 0u; i < 4u; i++) {
            uint32_t w = bytes_at(b, 1u + 4u * i);
            q[i] = mxfp4_lut4(w & 0x0F0F0F0Fu);
            q[i + 4u] = mxfp4_lut4((w >> 4) & 0x0F0F0F0Fu);
        }
        return (float2){mxfp4_scale(b[0]), 0.0f};
    }
};
} // namespace quant
