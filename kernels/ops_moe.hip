// Mixture-of-experts routing and combining (shaders/moe.comp), llama.cpp's
// build_moe_ffn with softmax gating:
//   moe_route  per token row of router logits, one thread: softmax (libm's
//              e^x, as the CPU), the k most probable experts best first
//              (lower index first among equals) into ids (as f32) and their
//              probabilities into weights, divided by their sum (clamped as
//              ggml does) when normalize is set. Argument block
//              MoeRoutePush, 64 threads, grid ceil(rows / 64). The k picks
//              are k passes, each taking the best expert ordered strictly
//              after the previous pick: no per-thread array.
//   moe_sum    out[t][i] = sum over j of weights[t][j] * x[t*k + j][i], in
//              order of j, each product rounded before it is added, one
//              thread per value. Argument block
//              MoeSumPush, 256 threads, grid ceil(rows * cols / 256).
#include "ops_common.h"

#define MOE_ROUTE_WG 64u
#define MOE_SUM_WG 256u

KERNEL LAUNCH_BOUNDS(MOE_ROUTE_WG) void moe_route(MoeRoutePush s) {
    const uint32_t t = wg_linear() * MOE_ROUTE_WG + thread_id_x();
    if (t >= s.n_rows) {
        return;
    }
    const float* l = dev_ptr<const float>(s.logits) + (uint64_t)t * s.n_expert;
    float mx = -__builtin_inff();
    for (uint32_t e = 0u; e < s.n_expert; e++) {
        mx = dev_fmaxf(mx, l[e]);
    }
    // The CPU sums the normaliser in f64 (ggml's soft_max).
    double sum = 0.0;
    for (uint32_t e = 0u; e < s.n_expert; e++) {
        sum += (double)ops::libm_expf(l[e] - mx);
    }
    const float inv = (float)(1.0 / sum);
    float* ids = dev_ptr<float>(s.ids) + (uint64_t)t * s.k;
    float* w = dev_ptr<float>(s.weights) + (uint64_t)t * s.k;
    float prev_p = __builtin_inff();
    uint32_t prev_e = 0xFFFFFFFFu;
    float chosen = 0.0f;
    for (uint32_t j = 0u; j < s.k; j++) {
        float best_p = -1.0f;
        uint32_t best_e = 0u;
        for (uint32_t e = 0u; e < s.n_expert; e++) {
            const float pe = ops::libm_expf(l[e] - mx) * inv;
            const bool after = pe < prev_p || (pe == prev_p && e > prev_e);
            if (after && pe > best_p) {
                best_p = pe;
                best_e = e;
            }
        }
        ids[j] = (float)best_e;
        w[j] = best_p;
        chosen += best_p;
        prev_p = best_p;
        prev_e = best_e;
    }
    if (s.normalize != 0u) {
        const float d = dev_fmaxf(chosen, 6.103515625e-5f);
        for (uint32_t j = 0u; j < s.k; j++) {
            w[j] = w[j] / d;
        }
    }
}

KERNEL LAUNCH_BOUNDS(MOE_SUM_WG) void moe_sum(MoeSumPush s) {
    const uint32_t i = wg_linear() * MOE_SUM_WG + thread_id_x();
    if (i >= s.n_rows * s.cols) {
        return;
    }
    const uint32_t t = i / s.cols;
    const uint32_t c = i % s.cols;
    const float* x = dev_ptr<const float>(s.x);
    const float* w = dev_ptr<const float>(s.weights) + (uint64_t)t * s.k;
    // Built with -ffp-contract=off: each product is rounded, as the CPU's.
    float acc = x[(uint64_t)(t * s.k) * s.cols + c] * w[0];
    for (uint32_t j = 1u; j < s.k; j++) {
        acc += x[(uint64_t)(t * s.k + j) * s.cols + c] * w[j];
    }
    dev_ptr<float>(s.out)[i] = acc;
}
