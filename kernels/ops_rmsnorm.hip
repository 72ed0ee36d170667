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

// Values of the group each thread keeps in registers from the sum of
// squares to the output (groups up to RMSNORM_OPS_WG * RMSNORM_HELD = 8192
// values; longer ones read the rest twice). The output's stores may alias
// the input for all the compiler knows, so values read again after a store
// wait for it: reading them all before the sum cut a decode step's norm
// from ~8.7 to ~3 us (ncu, 7B on the H200), where each of a wave's 8
// blocks waited on its own loads.
#define RMSNORM_HELD 16u

template <bool Q8> DEV void rmsnorm_run(const NormPush& p, double* part) {
    uint32_t g = wg_linear();
    // Workgroups past n_groups run the second norm, if any.
    const bool second = g >= p.n_groups;
    if (second) {
        g -= p.n_groups;
        if (g >= p.n_groups2) {
            return; // the whole workgroup
        }
    }
    const uint32_t tid = thread_id_x();
    const float* xg = dev_ptr<const float>(second ? p.x2 : p.x) + (uint64_t)g * p.group;
    float* og = dev_ptr<float>(second ? p.out2 : p.out) + (uint64_t)g * p.group;
    const float* w = dev_ptr<const float>(second ? p.w2 : p.w);
    // Value tid + WG j of the group, and its weight, for j < HELD.
    float xs[RMSNORM_HELD];
    float ws[RMSNORM_HELD];
#pragma unroll
    for (uint32_t j = 0u; j < RMSNORM_HELD; j++) {
        uint32_t i = tid + RMSNORM_OPS_WG * j;
        xs[j] = i < p.group ? xg[i] : 0.0f;
        ws[j] = i < p.group ? w[i] : 0.0f;
    }
    // 1 / sqrt(mean(x^2) + eps), each thread's squares in index order.
    double ss = 0.0;
#pragma unroll
    for (uint32_t j = 0u; j < RMSNORM_HELD; j++) {
        if (tid + RMSNORM_OPS_WG * j < p.group) {
            ss += (double)(xs[j] * xs[j]);
        }
    }
    for (uint32_t i = tid + RMSNORM_OPS_WG * RMSNORM_HELD; i < p.group; i += RMSNORM_OPS_WG) {
        float v = xg[i];
        ss += (double)(v * v);
    }
    double total = block_sum_f64<RMSNORM_OPS_WG>(ss, part);
    float mean = (float)(total / (double)p.group);
    float scale = 1.0f / dev_sqrtf(mean + p.eps);
    // Value i = tid + WG j: for Q8, wave v's blocks v + (WG / 32) j, lane
    // = value in the block.
    int8_t* quants = dev_ptr<int8_t>(p.q8);
    float2* scales = dev_ptr<float2>(p.q8_scales);
    uint32_t nb = p.group / 32u;
    auto put = [&](uint32_t i, float v) {
        og[i] = v;
        if (Q8) {
            wave_store_q8_packed(v, quants, scales, g * nb + i / 32u);
        }
    };
#pragma unroll
    for (uint32_t j = 0u; j < RMSNORM_HELD; j++) {
        uint32_t i = tid + RMSNORM_OPS_WG * j;
        // Q8: uniform per wave (group % 32 == 0).
        if (i < p.group) {
            put(i, xs[j] * scale * ws[j]);
        }
    }
    for (uint32_t i = tid + RMSNORM_OPS_WG * RMSNORM_HELD; i < p.group; i += RMSNORM_OPS_WG) {
        put(i, xg[i] * scale * w[i]);
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
