// RMSNorm (shaders/rmsnorm.comp): out = x * (1 / sqrt(mean(x^2) + eps)) * w
// over groups of `group` values (a row, or one head for Qwen3's Q/K norms),
// one workgroup per group.
//
// Kernels (argument block NormPush, grid n_groups workgroups):
//   rmsnorm      RMSNORM_OPS_WG threads;
//   rmsnorm_q8   also writes the output Q8-packed (q8_packed.h) to q8 /
//                q8_scales for an integer mat-vec that reads it next;
//                group % 32 == 0. Wave j quantizes blocks j, j + waves, ...
//                (lane i = value i of the block), so the rounding is
//                wave_store_q8_packed's, as every other producer's.
//
// Numerics: the CPU reference's (crates/rocmforge-cpu norm.rs, as ggml):
// every square rounded to f32, the squares summed in f64, the mean rounded
// to f32, 1 / sqrt in correctly rounded f32, then (x * scale) * w. The
// shader sums in f32 (its subgroup order); the f64 sum here agrees with
// the CPU's except for a rare last-bit tie of the f32 mean (summation
// order of the f64 terms only).
#include "ops_common.h"

// rocmforge_core::gpu::workgroup_size("rmsnorm"): 512 (a decode step's norm
// is one workgroup per row; more threads shorten its chain of loads).
#define RMSNORM_OPS_WG 512u

namespace ops {

// 1 / sqrt(mean(x^2) + eps) of the group at xg, to every thread.
DEV float rms_inv(const float* xg, const NormPush& p, double* part) {
    double ss = 0.0;
    for (uint32_t i = thread_id_x(); i < p.group; i += RMSNORM_OPS_WG) {
        float v = xg[i];
        ss += (double)(v * v);
    }
    double total = block_sum_f64<RMSNORM_OPS_WG>(ss, part);
    float mean = (float)(total / (double)p.group);
    return 1.0f / dev_sqrtf(mean + p.eps);
}

template <bool Q8> DEV void rmsnorm_run(const NormPush& p, double* part) {
    uint32_t g = wg_linear();
    if (g >= p.n_groups) {
        return; // the whole workgroup
    }
    const float* xg = dev_ptr<const float>(p.x) + (uint64_t)g * p.group;
    float* og = dev_ptr<float>(p.out) + (uint64_t)g * p.group;
    const float* w = dev_ptr<const float>(p.w);
    float scale = rms_inv(xg, p, part);
    if (!Q8) {
        for (uint32_t i = thread_id_x(); i < p.group; i += RMSNORM_OPS_WG) {
            og[i] = xg[i] * scale * w[i];
        }
        return;
    }
    uint32_t nb = p.group / 32u;
    int8_t* quants = dev_ptr<int8_t>(p.q8);
    float2* scales = dev_ptr<float2>(p.q8_scales);
    for (uint32_t b = wave_id(); b < nb; b += RMSNORM_OPS_WG / WAVE_SIZE) {
        uint32_t i = 32u * b + lane_id();
        float v = xg[i] * scale * w[i];
        og[i] = v;
        wave_store_q8_packed(v, quants, scales, g * nb + b);
    }
}

} // namespace ops

KERNEL LAUNCH_BOUNDS(RMSNORM_OPS_WG) void rmsnorm(NormPush p) {
    __shared__ double part[RMSNORM_OPS_WG / WAVE_SIZE];
    ops::rmsnorm_run<false>(p, part);
}

KERNEL LAUNCH_BOUNDS(RMSNORM_OPS_WG) void rmsnorm_q8(NormPush p) {
    __shared__ double part[RMSNORM_OPS_WG / WAVE_SIZE];
    ops::rmsnorm_run<true>(p, part);
}
