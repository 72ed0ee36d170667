// Causal GQA attention over the f16 KV cache, one workgroup per (token,
// head). Token t attends to cache positions 0 .. pos0 + t, with pos0 read
// from the step-input region, so the grid depends only on the graph shape.
// Positions are taken WG_SIZE at a time: each invocation scores one
// (q . k * scale, q rounded to f16 as ggml does), then an online softmax
// step rescales the running output, which each invocation keeps for its
// own head dimensions (up to ATT_DIMS per invocation).
#version 460
#extension GL_GOOGLE_include_directive : require
#define NEEDS_REDUCE
#include "common.glsl"

layout(local_size_x = WG_SIZE) in;

#define ATT_DIMS 4
#define MAX_HEAD_DIM (ATT_DIMS * WG_SIZE)

layout(push_constant, std430) uniform Push {
    uint64_t q;
    uint64_t out_;
    uint64_t k_cache; // the layer's K block
    uint64_t v_cache;
    uint64_t step;
    uint n_tokens;
    uint n_head;
    uint n_head_kv;
    uint head_dim;
    uint kv_dim;
    float scale;
} pc;

shared float qs[MAX_HEAD_DIM];
shared float weights[WG_SIZE];

void main() {
    uint g = wg_linear();
    if (g >= pc.n_tokens * pc.n_head) {
        return;
    }
    uint t = g / pc.n_head;
    uint h = g % pc.n_head;
    uint kvh = h / (pc.n_head / pc.n_head_kv);
    uint tid = gl_LocalInvocationID.x;
    uint hd = pc.head_dim;
    uint q_dim = pc.n_head * hd;
    uint n_kv = step_pos0(pc.step) + t + 1u;

    F32s q = F32s(pc.q + (uint64_t(t) * q_dim + h * hd) * 4u);
    for (uint d = tid; d < hd; d += WG_SIZE) {
        qs[d] = round_f16(q.v[d]);
    }
    memoryBarrierShared();
    barrier();

    // Cache rows as u32 pairs of halves; this head starts kvh * hd halves in.
    U32s kc = U32s(pc.k_cache);
    U32s vc = U32s(pc.v_cache);
    uint row_words = pc.kv_dim / 2u;
    uint head_word = kvh * hd / 2u;

    float m = -1.0 / 0.0;
    float l = 0.0;
    float acc[ATT_DIMS];
    for (uint i = 0u; i < ATT_DIMS; i++) {
        acc[i] = 0.0;
    }
    for (uint base = 0u; base < n_kv; base += WG_SIZE) {
        uint p = base + tid;
        float s = -1.0 / 0.0;
        if (p < n_kv) {
            uint kw = p * row_words + head_word;
            float dot_ = 0.0;
            for (uint d = 0u; d < hd / 2u; d++) {
                vec2 kk = unpackHalf2x16(kc.v[kw + d]);
                dot_ += kk.x * qs[2u * d] + kk.y * qs[2u * d + 1u];
            }
            s = dot_ * pc.scale;
        }
        float m_new = max(m, wg_max(s));
        float alpha = exp(m - m_new);
        float w = p < n_kv ? exp(s - m_new) : 0.0;
        weights[tid] = w;
        l = l * alpha + wg_sum(w);
        uint cnt = min(uint(WG_SIZE), n_kv - base);
        for (uint i = 0u; i < ATT_DIMS; i++) {
            uint d = tid + i * WG_SIZE;
            if (d < hd) {
                float a = acc[i] * alpha;
                for (uint pp = 0u; pp < cnt; pp++) {
                    uint vw = (base + pp) * row_words + head_word + d / 2u;
                    vec2 vv = unpackHalf2x16(vc.v[vw]);
                    a += weights[pp] * ((d & 1u) != 0u ? vv.y : vv.x);
                }
                acc[i] = a;
            }
        }
        m = m_new;
        memoryBarrierShared();
        barrier();
    }
    F32s o = F32s(pc.out_ + (uint64_t(t) * q_dim + h * hd) * 4u);
    float inv = l > 0.0 ? 1.0 / l : 0.0;
    for (uint i = 0u; i < ATT_DIMS; i++) {
        uint d = tid + i * WG_SIZE;
        if (d < hd) {
            o.v[d] = acc[i] * inv;
        }
    }
}
