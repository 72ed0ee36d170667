// Merges split decode attention (attention_decode.comp, or attention.comp
// with SPLIT; rocmforge_core::gpu::split): one workgroup per (token, head)
// row reads the row's n_split partials (maximum m_c, sum l_c,
// unnormalised output o_c), and with M the largest m_c of a non-empty run
// writes
//   out = sum_c o_c e^(m_c - M) / sum_c l_c e^(m_c - M)
// in f32, after folding in the row's attention sink as the unsplit kernel
// does (the accumulator rescaled when the sink is the new maximum). Empty
// runs (l_c = 0, past a short span) weigh nothing. Invocation c < n_split
// reads run c's (m_c, l_c) and weight, so the runs' outputs are then read
// with independent loads (n_split <= WG_SIZE).
//
// OUT_Q8 also writes the output Q8-packed (q8_packed.glsl) for the integer
// mat-vec that reads it; the head size is then a multiple of 32.
#version 460
#extension GL_GOOGLE_include_directive : require
#define NEEDS_REDUCE
#include "common.glsl"
#ifdef OUT_Q8
#include "q8_packed.glsl"
#endif

layout(local_size_x = WG_SIZE) in;

#ifndef ATT_DIMS
#define ATT_DIMS 2
#endif
#define MAX_HEAD_DIM (ATT_DIMS * WG_SIZE)

#include "attention_push.glsl"

shared float weight[WG_SIZE];
#ifdef OUT_Q8
shared float os[MAX_HEAD_DIM];
#endif

void main() {
    uint g = wg_linear();
    if (g >= pc.n_tokens * pc.n_head) {
        return;
    }
    uint t = g / pc.n_head;
    uint h = g % pc.n_head;
    uint tid = gl_LocalInvocationID.x;
    uint hd = pc.head_dim;
    uint q_dim = pc.n_head * hd;
    F32s part = F32s(pc.partials);
    uint ml = pc.n_tokens * pc.n_head * pc.n_split * hd;
    uint first = g * pc.n_split;

    float mc = -1.0 / 0.0;
    float lc = 0.0;
    if (tid < pc.n_split) {
        lc = part.v[ml + 2u * (first + tid) + 1u];
        mc = lc > 0.0 ? part.v[ml + 2u * (first + tid)] : mc;
    }
    float m = wg_max(mc);
    float w = lc > 0.0 ? exp(mc - m) : 0.0;
    weight[tid] = w;
    float l = wg_sum(lc * w);
    memoryBarrierShared();
    barrier();

    float acc[ATT_DIMS];
    for (uint i = 0u; i < ATT_DIMS; i++) {
        acc[i] = 0.0;
    }
    for (uint c = 0u; c < pc.n_split; c++) {
        float wc = weight[c];
        for (uint i = 0u; i < ATT_DIMS; i++) {
            uint d = tid + i * WG_SIZE;
            if (d < hd) {
                acc[i] = fma(part.v[(first + c) * hd + d], wc, acc[i]);
            }
        }
    }
    if (pc.sinks != 0ul) {
        float s = F32s(pc.sinks).v[h];
        if (s > m) {
            float ms = isinf(m) ? 0.0 : exp(m - s);
            for (uint i = 0u; i < ATT_DIMS; i++) {
                acc[i] *= ms;
            }
            l = l * ms + 1.0;
        } else {
            l += exp(s - m);
        }
    }
    F32s o = F32s(pc.out_ + (uint64_t(t) * q_dim + h * hd) * 4u);
    float inv = l == 0.0 ? 0.0 : 1.0 / l;
    for (uint i = 0u; i < ATT_DIMS; i++) {
        uint d = tid + i * WG_SIZE;
        if (d < hd) {
            o.v[d] = acc[i] * inv;
#ifdef OUT_Q8
            os[d] = acc[i] * inv;
#endif
        }
    }
#ifdef OUT_Q8
    memoryBarrierShared();
    barrier();
    if (tid < hd / 32u) {
        vec4 v[8];
        for (uint j = 0u; j < 8u; j++) {
            uint d = tid * 32u + j * 4u;
            v[j] = vec4(os[d], os[d + 1u], os[d + 2u], os[d + 3u]);
        }
        store_q8_packed(v, pc.q8, pc.q8_scales, (t * q_dim + h * hd) / 32u + tid);
    }
#endif
}
