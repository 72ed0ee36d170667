// RMSNorm over groups of `group` values (a row, or one head for Qwen3's
// Q/K norms): out = x * (1 / sqrt(mean(x^2) + eps)) * w, one workgroup per
// group. Numerics of the CPU reference (crates/rocmforge-cpu norm.rs, as
// ggml): each square rounded to f32, the squares summed in f64, the mean
// rounded to f32, then f32 in ggml's order (x * scale) * w. Only the order
// of the f64 sum differs, which cannot move the f32 mean by more than a
// rare last-bit tie.
//
// rmsnorm_f32_q8 also writes the output Q8-packed (q8_packed.h), for a row
// that only the integer mat-vec reads next: no separate quantize pass.
#include "shapes.h"
#include "q8_packed.h"

#define RMSNORM_WG 256u
#define RMSNORM_WAVES (RMSNORM_WG / WAVE_SIZE)

// 1 / sqrt(mean(x^2) + eps) of group xg, returned to every thread.
// `part` holds one f64 per wave. Call from uniform control flow.
DEV float rms_scale(const float* xg, RmsNormShape s, double* part) {
    double ss = 0.0;
    for (uint32_t i = thread_id_x(); i < s.group; i += RMSNORM_WG) {
        float v = xg[i];
        ss += (double)(v * v);
    }
    ss = wave_sum_f64(ss);
    if (lane_id() == 0u) {
        part[wave_id()] = ss;
    }
    block_barrier();
    // Every thread adds the wave sums in the same order: same bits.
    double total = 0.0;
    for (uint32_t w = 0u; w < RMSNORM_WAVES; w++) {
        total += part[w];
    }
    float mean = (float)(total / (double)s.group);
    return 1.0f / dev_sqrtf(mean + s.eps);
}

KERNEL LAUNCH_BOUNDS(RMSNORM_WG) void rmsnorm_f32(const float* x, const float* w, float* out,
                                                  RmsNormShape s) {
    __shared__ double part[RMSNORM_WAVES];
    uint32_t g = block_id_x();
    if (g >= s.n_groups) {
        return;
    }
    const float* xg = x + (uint64_t)g * s.group;
    float* og = out + (uint64_t)g * s.group;
    float scale = rms_scale(xg, s, part);
    for (uint32_t i = thread_id_x(); i < s.group; i += RMSNORM_WG) {
        og[i] = xg[i] * scale * w[i];
    }
}

// As rmsnorm_f32, plus the output as Q8 blocks: wave j quantizes blocks
// j, j + 8, ... of the group, lane i holding value i of the block.
// group % 32 == 0; block b of group g is block g * group / 32 + b.
KERNEL LAUNCH_BOUNDS(RMSNORM_WG) void rmsnorm_f32_q8(const float* x, const float* w, float* out,
                                                     int8_t* q8, float2* q8_scales,
                                                     RmsNormShape s) {
    __shared__ double part[RMSNORM_WAVES];
    uint32_t g = block_id_x();
    if (g >= s.n_groups) {
        return;
    }
    const float* xg = x + (uint64_t)g * s.group;
    float* og = out + (uint64_t)g * s.group;
    float scale = rms_scale(xg, s, part);
    uint32_t nb = s.group / 32u;
    for (uint32_t b = wave_id(); b < nb; b += RMSNORM_WAVES) {
        uint32_t i = 32u * b + lane_id();
        float v = xg[i] * scale * w[i];
        og[i] = v;
        wave_store_q8_packed(v, q8, q8_scales, g * nb + b);
    }
}
