// F32 weights, read in "blocks" of 32 (the interface's unit for plain
// floats; shaders/quant/f32.glsl). Rows of 8-multiple f32 from a 32-aligned
// tensor: each 8-value unit is 16-byte aligned (two 16-byte loads).
#pragma once
#include "common.h"

namespace quant {
struct F32 {
    static constexpr uint32_t K = 32u;
    static constexpr uint32_t BLOCK_BYTES = 128u;
    DEV float8 dequant8(const uint8_t* row, uint32_t ib, uint32_t j) {
        const float4* b = (const float4*)(row + ib * BLOCK_BYTES + 32u * j);
        return cat8(b[0], b[1]);
    }
};
} // namespace quant
