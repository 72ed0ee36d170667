// The Q8-packed activation layout read by the integer mat-vec
// (matvec_q.hip), the same as the Vulkan backend's (shaders/q8_packed.glsl):
// per block of 32 values, 32 int8 quants at quants + 32 * b and a float2
// (d, s) at scales[b], both f32 values rounded to f16, with
//   d = amax / 127,  q = rne(x * (127 / amax)),  s = f16(d * sum(q))
// (d unrounded in s). That is ggml's x86 Q8_0 quantizer (inverse 127 / amax,
// half-to-even), and s is Q8_1's block sum, so one buffer serves Q8_0 and
// Q8_1 weights. Every writer calls wave_store_q8_packed, so a fused
// producer (rmsnorm_f32_q8) rounds exactly as the separate quantize_q8.
#pragma once

#include "prelude.h"

// One wave quantizes one block: lane i holds value i of the block.
// Division and the products are correctly rounded f32 as on the CPU; the
// max and the integer sum do not depend on the order.
DEV void wave_store_q8_packed(float v, int8_t* quants, float2* scales, uint32_t b) {
    float amax = wave_max(dev_fabsf(v));
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    float q = dev_rintf(v * id);
    int32_t sum = wave_sum_i32((int32_t)q);
    quants[32u * b + lane_id()] = (int8_t)q;
    if (lane_id() == 0u) {
        scales[b] = (float2){round_f16(d), round_f16(d * (float)sum)};
    }
}
