// Mixture-of-experts routing and combining (llama.cpp's build_moe_ffn with
// softmax gating); OP picks the op at build time:
// OP_ROUTE: per token row of router logits, one workgroup of 64: softmax,
//   the k most probable experts best first (lower index first among
//   equals) into ids (as f32) and their probabilities into weights, divided
//   by their sum (clamped as ggml does) when normalize is set. Each of the k
//   picks is a workgroup argmax over the experts ranked after the previous
//   pick, so nothing per expert is stored. (One invocation per token took
//   35 us a layer in a Qwen3-30B-A3B decode on the H100.)
// OP_SUM: out[t][i] = sum over j of weights[t][j] * x[t * k + j][i], in
//   order of j, one invocation per value.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#if defined(OP_ROUTE)
// Built with WG_SIZE = 64 and NEEDS_REDUCE (common.glsl's wg_max, wg_sum).
layout(local_size_x = WG_SIZE) in;

layout(push_constant, std430) uniform Push {
    uint64_t logits;
    uint64_t ids;
    uint64_t weights;
    uint n_rows;
    uint n_expert;
    uint k;
    uint normalize;
} pc;

shared float pick_p[WG_SIZE];
shared uint pick_e[WG_SIZE];

// True when (p, e) ranks before (q, f): more probable, or as probable with a
// lower index.
bool ranks_before(float p, uint e, float q, uint f) {
    return p > q || (p == q && e < f);
}

void main() {
    uint t = wg_linear();
    if (t >= pc.n_rows) {
        return;
    }
    uint lane = gl_LocalInvocationID.x;
    F32s l = F32s(pc.logits);
    uint base = t * pc.n_expert;
    float mx = -1.0 / 0.0;
    for (uint e = lane; e < pc.n_expert; e += WG_SIZE) {
        mx = max(mx, l.v[base + e]);
    }
    mx = wg_max(mx);
    float part = 0.0;
    for (uint e = lane; e < pc.n_expert; e += WG_SIZE) {
        part += exp(l.v[base + e] - mx);
    }
    float inv = 1.0 / wg_sum(part);
    float prev_p = 1.0 / 0.0;
    uint prev_e = 0xFFFFFFFFu;
    float chosen = 0.0;
    for (uint j = 0u; j < pc.k; j++) {
        // Each lane's best expert ranked after the previous pick, then the
        // workgroup's best of those.
        float best_p = -1.0;
        uint best_e = 0xFFFFFFFFu;
        for (uint e = lane; e < pc.n_expert; e += WG_SIZE) {
            float pe = exp(l.v[base + e] - mx) * inv;
            if (ranks_before(prev_p, prev_e, pe, e) && ranks_before(pe, e, best_p, best_e)) {
                best_p = pe;
                best_e = e;
            }
        }
        pick_p[lane] = best_p;
        pick_e[lane] = best_e;
        memoryBarrierShared();
        barrier();
        for (uint half_ = WG_SIZE / 2u; half_ > 0u; half_ /= 2u) {
            if (lane < half_ && ranks_before(pick_p[lane + half_], pick_e[lane + half_],
                                             pick_p[lane], pick_e[lane])) {
                pick_p[lane] = pick_p[lane + half_];
                pick_e[lane] = pick_e[lane + half_];
            }
            memoryBarrierShared();
            barrier();
        }
        prev_p = pick_p[0];
        prev_e = pick_e[0];
        chosen += prev_p;
        if (lane == 0u) {
            // No expert ranks after the previous pick when the logits hold
            // a NaN: the id is clamped so the expert mat-vec never reads
            // outside the expert stack (the values are garbage either way).
            F32s(pc.ids).v[t * pc.k + j] = float(min(prev_e, pc.n_expert - 1u));
            F32s(pc.weights).v[t * pc.k + j] = prev_p;
        }
        memoryBarrierShared();
        barrier();
    }
    // Lane 0 wrote the weights, so it rereads its own writes.
    if (pc.normalize != 0u && lane == 0u) {
        float d = max(chosen, 6.103515625e-5);
        for (uint j = 0u; j < pc.k; j++) {
            F32s(pc.weights).v[t * pc.k + j] /= d;
        }
    }
}
#elif defined(OP_SUM)
layout(local_size_x = 256) in;

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t weights;
    uint64_t out_;
    uint n_rows;
    uint cols;
    uint k;
    uint pad;
} pc;

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= pc.n_rows * pc.cols) {
        return;
    }
    uint t = i / pc.cols;
    uint c = i % pc.cols;
    F32s x = F32s(pc.x);
    F32s w = F32s(pc.weights);
    precise float acc = x.v[(t * pc.k) * pc.cols + c] * w.v[t * pc.k];
    for (uint j = 1u; j < pc.k; j++) {
        precise float term = x.v[(t * pc.k + j) * pc.cols + c] * w.v[t * pc.k + j];
        acc += term;
    }
    F32s(pc.out_).v[i] = acc;
}
#else
#error "no OP_ defined"
#endif
