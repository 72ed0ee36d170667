// The routing of a token's router logits (ops_moe.hip's moe_route, and
// the router mat-vec that routes its own logits, matvec_route_f32 in
// matvec.hip): softmax (libm's e^x and an f64 normaliser, as the CPU), then
// the k most probable experts best first (lower index first among equals)
// into ids (as f32) and their probabilities into weights, divided by their
// sum (clamped as ggml does) when normalize is set. One wave of 32 a token.
#pragma once

#include "ops_common.h"

#define MOE_ROUTE_WG 32u
// Most experts moe_route takes (rocmforge_core::gpu::moe::MAX_EXPERTS).
#define MOE_ROUTE_MAX_E 512u
// Experts per lane moe_route keeps in registers (up to 128 experts).
#define MOE_ROUTE_HELD 4u

namespace ops {

// True when (p, e) ranks before (q, f): more probable, or as probable with a
// lower index.
DEV bool ranks_before(float p, uint32_t e, float q, uint32_t f) {
    return p > q || (p == q && e < f);
}

// A picked expert as the f32 id the expert kernels read. No expert ranks
// after the previous pick when the logits hold a NaN: the id is clamped so
// the expert kernels never read outside the expert stack (the values are
// garbage either way).
DEV float clamped_id(uint32_t e, uint32_t n_e) {
    return (float)(e < n_e ? e : n_e - 1u);
}

// Writes a token's k picks, best first (pick j < 32 held by lane j as
// (my_p, my_e), later ones written by lane 0 as they came), their weights
// divided by the picks' sum `chosen` when normalize is set.
DEV void moe_route_store(const MoeRoutePush& s, uint32_t t, uint32_t lane, float my_p,
                         uint32_t my_e, float chosen) {
    float* ids = dev_ptr<float>(s.ids) + (uint64_t)t * s.k;
    float* w = dev_ptr<float>(s.weights) + (uint64_t)t * s.k;
    const float d = dev_fmaxf(chosen, 6.103515625e-5f);
    if (lane < s.k) {
        ids[lane] = clamped_id(my_e, s.n_expert);
        w[lane] = s.normalize != 0u ? my_p / d : my_p;
    }
    // Picks past the wave's lanes: lane 0 wrote them, so it rereads its own
    // writes.
    if (s.normalize != 0u && lane == 0u) {
        for (uint32_t j = MOE_ROUTE_WG; j < s.k; j++) {
            w[j] = w[j] / d;
        }
    }
}

// The wave's best of each lane's candidate (p, e): a butterfly over a total
// order, so every lane ends with the same pick.
DEV void wave_best(float& p, uint32_t& e) {
    for (uint32_t m = 16u; m > 0u; m >>= 1) {
        const float op = wave_shfl_xor_f32(p, m);
        const uint32_t oe = wave_shfl_xor(e, m);
        if (ranks_before(op, oe, p, e)) {
            p = op;
            e = oe;
        }
    }
}

// moe_route for up to MOE_ROUTE_HELD * 32 experts (Qwen3-MoE's 128,
// gpt-oss's 32, Mixtral's 8, Qwen2-MoE's 60): lane l holds experts l,
// l + 32, ... in registers from the logits to the picks, e^x reads its
// table from shared memory, and a pick costs one butterfly plus a rescan
// of the lane it came from. The same arithmetic in the same order as the
// general path, so the same ids and weights.
DEV void moe_route_held(const MoeRoutePush& s, uint32_t t, uint32_t lane, uint64_t* tab) {
    const uint32_t n_e = s.n_expert;
    const float* l = dev_ptr<const float>(s.logits) + (uint64_t)t * n_e;
    float p[MOE_ROUTE_HELD];
#pragma unroll
    for (uint32_t r = 0u; r < MOE_ROUTE_HELD; r++) {
        const uint32_t e = lane + MOE_ROUTE_WG * r;
        p[r] = e < n_e ? l[e] : -__builtin_inff();
    }
    tab[lane] = libm_exp2_tab[lane];
    float mx = -__builtin_inff();
#pragma unroll
    for (uint32_t r = 0u; r < MOE_ROUTE_HELD; r++) {
        mx = dev_fmaxf(mx, p[r]);
    }
    mx = wave_max(mx);
    wave_barrier();
    double sum = 0.0;
#pragma unroll
    for (uint32_t r = 0u; r < MOE_ROUTE_HELD; r++) {
        if (lane + MOE_ROUTE_WG * r < n_e) {
            p[r] = libm_expf_tab(p[r] - mx, tab);
            sum += (double)p[r];
        }
    }
    const float inv = (float)(1.0 / wave_sum_f64(sum));
    // Probabilities; -1 past the experts, below every real one.
#pragma unroll
    for (uint32_t r = 0u; r < MOE_ROUTE_HELD; r++) {
        p[r] = lane + MOE_ROUTE_WG * r < n_e ? p[r] * inv : -1.0f;
    }
    // This lane's best not yet picked; `taken` marks its picked slots.
    uint32_t taken = 0u;
    auto lane_best = [&](float& bp, uint32_t& be) {
        bp = -2.0f;
        be = 0xFFFFFFFFu;
#pragma unroll
        for (uint32_t r = 0u; r < MOE_ROUTE_HELD; r++) {
            const uint32_t e = lane + MOE_ROUTE_WG * r;
            if ((taken >> r & 1u) == 0u && ranks_before(p[r], e, bp, be)) {
                bp = p[r];
                be = e;
            }
        }
    };
    float cand_p;
    uint32_t cand_e;
    lane_best(cand_p, cand_e);
    float* ids = dev_ptr<float>(s.ids) + (uint64_t)t * s.k;
    float* w = dev_ptr<float>(s.weights) + (uint64_t)t * s.k;
    float chosen = 0.0f;
    float my_p = 0.0f;
    uint32_t my_e = 0u;
    for (uint32_t j = 0u; j < s.k; j++) {
        float best_p = cand_p;
        uint32_t best_e = cand_e;
        wave_best(best_p, best_e);
        chosen += best_p;
        if (j == lane) {
            my_p = best_p;
            my_e = best_e;
        } else if (j >= MOE_ROUTE_WG && lane == 0u) {
            ids[j] = clamped_id(best_e, n_e);
            w[j] = best_p;
        }
        // The lane that held the pick moves on to its next best.
        if (best_e == cand_e) {
            taken |= 1u << (best_e / MOE_ROUTE_WG);
            lane_best(cand_p, cand_e);
        }
    }
    moe_route_store(s, t, lane, my_p, my_e, chosen);
}

} // namespace ops
