// Device helpers shared by the non-weight op kernels (ops_*.hip), ports of
// the Vulkan shaders that do not read weights: rmsnorm.comp, rope.comp,
// store_kv.comp, attention.comp, eltwise.comp, quantize_act.comp. Each
// kernel has the Vulkan variant's name, its workgroup size
// (rocmforge_core::gpu::workgroup_size) and its push block (push.h) as the
// one by-value parameter, and computes the same numbers as the CPU
// reference, which the shaders follow (docs/vulkan.md, "Numerics"):
//
//   - divisions and square roots are correctly rounded here (HIP's and
//     NVPTX's defaults), which is what the shaders' div_rn achieves;
//   - e^x, sin and cos are libm's bit for bit (ops_libm.h, in f64), where
//     the shaders use the device's exp and a Cephes polynomial;
//   - f32 -> f16 conversions round to nearest even in hardware on both
//     targets (prelude.h), as the shaders' f16_bits does in integers.
//
// Helpers live in namespace ops: every kernel file is compiled into one
// translation unit with the weight kernels' (crates/rocmforge-hip/build.rs).
#pragma once

#include "prelude.h"
#include "push.h"
#include "q8_packed.h"
#include "ops_libm.h"

namespace ops {

// A value every lane of the wave holds the same bits of, made visible as
// such to the compiler (an SGPR on AMDGPU), so branches on it are scalar.
DEV uint32_t wave_uniform(uint32_t v) {
#if RF_AMDGPU
    return (uint32_t)__builtin_amdgcn_readfirstlane((int)v);
#else
    return v;
#endif
}

// Hides v's value from the optimizer (no instruction): keeps it from
// hoisting values derived from v out of a loop that calls this, where
// holding them all would cost more registers than recomputing them.
DEV uint32_t opaque(uint32_t v) {
#if RF_AMDGPU
    asm volatile("" : "+v"(v));
#else
    asm volatile("" : "+r"(v));
#endif
    return v;
}

// Sum of v over a workgroup of WG threads, in f64, returned to every
// thread: wave butterflies, then the wave sums in wave order (the same bits
// everywhere). `part` holds WG / 32 doubles of shared memory. Uniform
// control flow.
template <uint32_t WG> DEV double block_sum_f64(double v, double* part) {
    v = wave_sum_f64(v);
    if (lane_id() == 0u) {
        part[wave_id()] = v;
    }
    block_barrier();
    double total = 0.0;
    for (uint32_t w = 0u; w < WG / WAVE_SIZE; w++) {
        total += part[w];
    }
    return total;
}

// Maximum and sum of v over the workgroup, returned to every thread
// (`part`: WG / WAVE_SIZE floats of shared memory). Uniform control flow;
// ends with a barrier, after which earlier shared-memory writes are
// visible to all.
template <uint32_t WG> DEV float block_max_f32(float v, float* part) {
    v = wave_max(v);
    if (lane_id() == 0u) {
        part[wave_id()] = v;
    }
    block_barrier();
    float r = part[0];
#pragma unroll
    for (uint32_t w = 1u; w < WG / WAVE_SIZE; w++) {
        r = dev_fmaxf(r, part[w]);
    }
    block_barrier();
    return r;
}

template <uint32_t WG> DEV float block_sum_f32(float v, float* part) {
    v = wave_sum(v);
    if (lane_id() == 0u) {
        part[wave_id()] = v;
    }
    block_barrier();
    float r = 0.0f;
#pragma unroll
    for (uint32_t w = 0u; w < WG / WAVE_SIZE; w++) {
        r += part[w];
    }
    block_barrier();
    return r;
}

// moe_sum's value i of a token: the sum over j < k of x[j * stride + i] *
// w[j], in order of j, each product rounded (kernels build with
// -ffp-contract=off), as the CPU's.
DEV float moe_weighted(const float* x, const float* w, uint32_t k, uint64_t stride, uint32_t i) {
    float acc = x[i] * w[0];
    for (uint32_t j = 1u; j < k; j++) {
        acc += x[(uint64_t)j * stride + i] * w[j];
    }
    return acc;
}

// SwiGLU's value silu(g) * u = g / (1 + e^-g) * u, in the CPU's order
// (ggml's form: -0, not NaN, for very negative g); e^x as libm's expf.
// Shared by swiglu (ops_eltwise.hip) and swiglu_q8 (ops_quantize.hip).
DEV float swiglu_value(float g, float u) { return g / (1.0f + libm_expf(-g)) * u; }

// gpt-oss's clamped SwiGLU: x = min(g, limit), y = clamp(u, -limit, limit),
// x / (1 + e^(alpha * -x)) * (y + 1). Shared by swiglu_oai
// (ops_eltwise.hip) and swiglu_oai_q8 (ops_quantize.hip).
DEV float swiglu_oai_value(float g, float u, float alpha, float limit) {
    float x = __builtin_fminf(g, limit);
    float y = __builtin_fminf(__builtin_fmaxf(u, -limit), limit);
    return x / (1.0f + libm_expf(alpha * -x)) * (y + 1.0f);
}

} // namespace ops
