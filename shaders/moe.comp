// Mixture-of-experts routing and combining (llama.cpp's build_moe_ffn with
// softmax gating); OP picks the op at build time:
// OP_ROUTE: per token row of router logits, one invocation: softmax, the k
//   most probable experts best first (lower index first among equals) into
//   ids (as f32) and their probabilities into weights, divided by their
//   sum (clamped as ggml does) when normalize is set. The k picks are k
//   passes, each taking the best expert ordered strictly after the previous
//   pick, so no per-invocation array is needed.
// OP_SUM: out[t][i] = sum over j of weights[t][j] * x[t * k + j][i], in
//   order of j, one invocation per value.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#if defined(OP_ROUTE)
layout(local_size_x = 64) in;

layout(push_constant, std430) uniform Push {
    uint64_t logits;
    uint64_t ids;
    uint64_t weights;
    uint n_rows;
    uint n_expert;
    uint k;
    uint normalize;
} pc;

void main() {
    uint t = wg_linear() * 64u + gl_LocalInvocationID.x;
    if (t >= pc.n_rows) {
        return;
    }
    F32s l = F32s(pc.logits);
    uint base = t * pc.n_expert;
    float mx = -1.0 / 0.0;
    for (uint e = 0u; e < pc.n_expert; e++) {
        mx = max(mx, l.v[base + e]);
    }
    float sum = 0.0;
    for (uint e = 0u; e < pc.n_expert; e++) {
        sum += exp(l.v[base + e] - mx);
    }
    float inv = 1.0 / sum;
    float prev_p = 1.0 / 0.0;
    uint prev_e = 0xFFFFFFFFu;
    float chosen_sum = 0.0;
    for (uint j = 0u; j < pc.k; j++) {
        float best_p = -1.0;
        uint best_e = 0u;
        for (uint e = 0u; e < pc.n_expert; e++) {
            float pe = exp(l.v[base + e] - mx) * inv;
            bool after = pe < prev_p || (pe == prev_p && e > prev_e);
            if (after && pe > best_p) {
                best_p = pe;
                best_e = e;
            }
        }
        F32s(pc.ids).v[t * pc.k + j] = float(best_e);
        F32s(pc.weights).v[t * pc.k + j] = best_p;
        chosen_sum += best_p;
        prev_p = best_p;
        prev_e = best_e;
    }
    if (pc.normalize != 0u) {
        float d = max(chosen_sum, 6.103515625e-5);
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
