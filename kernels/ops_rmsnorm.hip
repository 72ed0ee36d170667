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
//   moe_sum_rmsnorm(_q8)  argument block MoeSumNormPush, grid n_rows: a
//                mixture-of-experts layer's end and the next block's norm
//                in one launch. Row t's values are moe_sum's (the weighted
//                expert rows plus the residual), written to sum, then
//                normalised as rmsnorm(_q8) does.
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

// Normalises one group of `group` values into og (and, for Q8, Q8-packed
// block by block from block q8_first on). load_held(xs) fills xs[j] with
// value tid + WG j for j < HELD (0 past the group), all its loads before
// any store; load(i) gives a value past the held ones. Where `kept` is not
// null the values are also written there (after the held values' loads),
// and the second pass rereads the values past the held ones from it (this
// thread's own stores) instead of calling load again.
template <bool Q8, typename LoadHeld, typename Load>
DEV void rmsnorm_group(uint32_t group, float eps, const float* w, float* og, int8_t* quants,
                       float2* scales, uint32_t q8_first, LoadHeld load_held, Load load,
                       float* kept, double* part) {
    const uint32_t tid = thread_id_x();
    // Value tid + WG j of the group, and its weight, for j < HELD.
    float xs[RMSNORM_HELD];
    float ws[RMSNORM_HELD];
    load_held(xs);
#pragma unroll
    for (uint32_t j = 0u; j < RMSNORM_HELD; j++) {
        uint32_t i = tid + RMSNORM_OPS_WG * j;
        ws[j] = i < group ? w[i] : 0.0f;
    }
#pragma unroll
    for (uint32_t j = 0u; j < RMSNORM_HELD; j++) {
        uint32_t i = tid + RMSNORM_OPS_WG * j;
        if (kept != nullptr && i < group) {
            kept[i] = xs[j];
        }
    }
    // 1 / sqrt(mean(x^2) + eps), each thread's squares in index order.
    double ss = 0.0;
#pragma unroll
    for (uint32_t j = 0u; j < RMSNORM_HELD; j++) {
        if (tid + RMSNORM_OPS_WG * j < group) {
            ss += (double)(xs[j] * xs[j]);
        }
    }
    for (uint32_t i = tid + RMSNORM_OPS_WG * RMSNORM_HELD; i < group; i += RMSNORM_OPS_WG) {
        float v = load(i);
        if (kept != nullptr) {
            kept[i] = v;
        }
        ss += (double)(v * v);
    }
    double total = block_sum_f64<RMSNORM_OPS_WG>(ss, part);
    float mean = (float)(total / (double)group);
    float scale = 1.0f / dev_sqrtf(mean + eps);
    // Value i = tid + WG j: for Q8, wave v's blocks v + (WG / 32) j, lane
    // = value in the block.
    auto put = [&](uint32_t i, float v) {
        og[i] = v;
        if (Q8) {
            wave_store_q8_packed(v, quants, scales, q8_first + i / 32u);
        }
    };
#pragma unroll
    for (uint32_t j = 0u; j < RMSNORM_HELD; j++) {
        uint32_t i = tid + RMSNORM_OPS_WG * j;
        // Q8: uniform per wave (group % 32 == 0).
        if (i < group) {
            put(i, xs[j] * scale * ws[j]);
        }
    }
    for (uint32_t i = tid + RMSNORM_OPS_WG * RMSNORM_HELD; i < group; i += RMSNORM_OPS_WG) {
        put(i, (kept != nullptr ? kept[i] : load(i)) * scale * w[i]);
    }
}

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
    const float* xg = dev_ptr<const float>(second ? p.x2 : p.x) + (uint64_t)g * p.group;
    float* og = dev_ptr<float>(second ? p.out2 : p.out) + (uint64_t)g * p.group;
    const float* w = dev_ptr<const float>(second ? p.w2 : p.w);
    const uint32_t tid = thread_id_x();
    auto load_held = [&](float* xs) {
#pragma unroll
        for (uint32_t j = 0u; j < RMSNORM_HELD; j++) {
            uint32_t i = tid + RMSNORM_OPS_WG * j;
            xs[j] = i < p.group ? xg[i] : 0.0f;
        }
    };
    auto load = [&](uint32_t i) { return xg[i]; };
    rmsnorm_group<Q8>(p.group, p.eps, w, og, dev_ptr<int8_t>(p.q8), dev_ptr<float2>(p.q8_scales),
                      g * (p.group / 32u), load_held, load, nullptr, part);
}

// Row t: the weighted sum of its k expert rows plus the residual, as
// moe_sum (each product rounded, in order of j), kept in sum, then
// normalised.
template <bool Q8> DEV void moe_sum_rmsnorm_run(const MoeSumNormPush& p, double* part) {
    const uint32_t t = wg_linear();
    if (t >= p.n_rows) {
        return;
    }
    // The lambdas capture copies, so the argument block stays in registers
    // (a captured reference to it went to local memory).
    const uint32_t cols = p.cols;
    const uint32_t k = p.k;
    const uint32_t tid = thread_id_x();
    const uint64_t row = (uint64_t)t * cols;
    const float* x = dev_ptr<const float>(p.x) + row * k;
    const float* wt = dev_ptr<const float>(p.weights) + (uint64_t)t * k;
    const float* res = dev_ptr<const float>(p.residual) + row;
    float* sum = dev_ptr<float>(p.sum) + row;
    // Expert by expert over all held values: each round's loads are
    // independent, so a thread waits k times, not k times per value.
    auto load_held = [=](float* xs) {
        const float w0 = wt[0];
#pragma unroll
        for (uint32_t h = 0u; h < RMSNORM_HELD; h++) {
            uint32_t i = tid + RMSNORM_OPS_WG * h;
            xs[h] = i < cols ? x[i] * w0 : 0.0f;
        }
        for (uint32_t j = 1u; j < k; j++) {
            const float* xj = x + (uint64_t)j * cols;
            const float wj = wt[j];
#pragma unroll
            for (uint32_t h = 0u; h < RMSNORM_HELD; h++) {
                uint32_t i = tid + RMSNORM_OPS_WG * h;
                if (i < cols) {
                    xs[h] += xj[i] * wj;
                }
            }
        }
#pragma unroll
        for (uint32_t h = 0u; h < RMSNORM_HELD; h++) {
            uint32_t i = tid + RMSNORM_OPS_WG * h;
            if (i < cols) {
                xs[h] += res[i];
            }
        }
    };
    auto load = [=](uint32_t i) { return moe_weighted(x, wt, k, cols, i) + res[i]; };
    rmsnorm_group<Q8>(cols, p.eps, dev_ptr<const float>(p.w), dev_ptr<float>(p.out) + row,
                      dev_ptr<int8_t>(p.q8), dev_ptr<float2>(p.q8_scales), t * (cols / 32u),
                      load_held, load, sum, part);
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

KERNEL LAUNCH_BOUNDS(RMSNORM_OPS_WG) void moe_sum_rmsnorm(MoeSumNormPush p) {
    __shared__ double part[RMSNORM_OPS_WG / WAVE_SIZE];
    ops::moe_sum_rmsnorm_run<false>(p, part);
}

KERNEL LAUNCH_BOUNDS(RMSNORM_OPS_WG) void moe_sum_rmsnorm_q8(MoeSumNormPush p) {
    __shared__ double part[RMSNORM_OPS_WG / WAVE_SIZE];
    ops::moe_sum_rmsnorm_run<true>(p, part);
}
