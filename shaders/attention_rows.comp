// Prefill attention, TQ consecutive tokens of one head per workgroup
// (grid ceil(n_tokens / TQ) * n_head), for subgroups of at least 32
// invocations: attention_decode.comp's reading of the cache, with each K
// and V row a subgroup loads used by TQ query rows, so a head's cache is
// read n_tokens / TQ times rather than n_tokens times, and no position
// waits on the one before it (the per-(token, head) kernel walks them in
// order).
//
// Token t of the workgroup attends to first_t .. n_kv_t (causal; the last
// `window` in a sliding-window layer); the subgroups take groups of GROUP
// positions of the union, each score past a token's range -inf. Per
// token, per subgroup: an online softmax in f32 over the groups; at the
// end the subgroups merge through shared memory, the sink is folded in as
// attention_combine.comp does, and the output is written normalised.
//
// Pairs per lane at most KP (2: attention_rows, head_dim <= 128; 4:
// attention_rows_wide, head_dim <= 256).
//
// KV_Q8_0 / KV_Q4_0: a quantized cache (kv_cache.glsl). A lane's pair of
// dimensions is then its block's scale and the 16-bit word holding both
// quants, loaded as one u32 in place of the two halves; the rest is the
// same.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "kv_cache.glsl"

layout(local_size_x = WG_SIZE) in;

#ifndef KP
#define KP 2
#endif
#define TQ 4
#define GROUP 4
#define MAX_SUBGROUPS (WG_SIZE / 32)
#define MAX_DIMS (64 * KP)

#include "attention_push.glsl"

shared float sg_m[MAX_SUBGROUPS * TQ];
shared float sg_l[MAX_SUBGROUPS * TQ];
shared vec2 sg_acc[MAX_SUBGROUPS * TQ * (MAX_DIMS / 2)];

void main() {
    uint g = wg_linear();
    uint n_blocks = (pc.n_tokens + TQ - 1u) / TQ;
    if (g >= n_blocks * pc.n_head) {
        return;
    }
    uint t0 = (g / pc.n_head) * TQ;
    uint h = g % pc.n_head;
    uint kvh = h / (pc.n_head / pc.n_head_kv);
    uint hd = pc.head_dim;
    uint pairs = hd / 2u;
    uint q_dim = pc.n_head * hd;
    uint pos0 = step_pos0(pc.step);
    // Token t0 + i attends to lo[i] .. hi[i]; rows past the graph none.
    uint lo[TQ];
    uint hi[TQ];
    for (uint i = 0u; i < TQ; i++) {
        bool real = t0 + i < pc.n_tokens;
        uint n_kv = pos0 + t0 + i + 1u;
        hi[i] = real ? n_kv : 0u;
        lo[i] = real && pc.window != 0u && n_kv > pc.window ? n_kv - pc.window : 0u;
    }
    uint begin = lo[0];
    uint end = hi[0];
    for (uint i = 1u; i < TQ; i++) {
        end = max(end, hi[i]);
    }

    // Whole subgroups numbered in invocation order (attention_decode.comp).
    uint S = gl_SubgroupSize;
    uint kp = (pairs + S - 1u) / S;
    uint lane = gl_LocalInvocationID.x % S;
    uint sg = gl_LocalInvocationID.x / S;
    uint nsg = WG_SIZE / S;

    vec2 q[TQ][KP];
    vec2 acc[TQ][KP];
    float m[TQ];
    float l[TQ];
    for (uint i = 0u; i < TQ; i++) {
        uint tt = min(t0 + i, pc.n_tokens - 1u);
        F32s qv = F32s(pc.q + (uint64_t(tt) * q_dim + h * hd) * 4u);
        for (uint k = 0u; k < KP; k++) {
            uint w = lane + S * k;
            q[i][k] = w < pairs ? vec2(qv.v[2u * w], qv.v[2u * w + 1u]) : vec2(0.0);
            acc[i][k] = vec2(0.0);
        }
        m[i] = -1.0 / 0.0;
        l[i] = 0.0;
    }
#ifdef KV_QUANTIZED
    uint row_blocks = pc.kv_dim / 32u;
    uint head_pair = kvh * pairs;
#else
    U32s kc = U32s(pc.k_cache);
    U32s vc = U32s(pc.v_cache);
    uint row_words = pc.kv_dim / 2u;
    uint head_word = kvh * pairs;
#endif

    for (uint p0 = begin + sg * GROUP; p0 < end; p0 += nsg * GROUP) {
        uint kw[GROUP][KP];
        uint vw[GROUP][KP];
        uint r = p0 % pc.ring;
        for (uint j = 0u; j < GROUP; j++) {
#ifndef KV_QUANTIZED
            uint row = r * row_words + head_word;
#endif
            for (uint k = 0u; k < KP; k++) {
                kw[j][k] = 0u;
                vw[j][k] = 0u;
                uint w = lane + S * k;
                if (k < kp && p0 + j < end && w < pairs) {
#ifdef KV_QUANTIZED
                    kw[j][k] = kv_load_pair(pc.k_cache, r, row_blocks, head_pair + w);
                    vw[j][k] = kv_load_pair(pc.v_cache, r, row_blocks, head_pair + w);
#else
                    kw[j][k] = kc.v[row + w];
                    vw[j][k] = vc.v[row + w];
#endif
                }
            }
            r = r + 1u == pc.ring ? 0u : r + 1u;
        }
        for (uint i = 0u; i < TQ; i++) {
            float s[GROUP];
            float mx = m[i];
            for (uint j = 0u; j < GROUP; j++) {
                float part = 0.0;
                for (uint k = 0u; k < KP; k++) {
                    vec2 kk = KV_PAIR(kw[j][k], lane + S * k);
                    part = fma(kk.x, q[i][k].x, fma(kk.y, q[i][k].y, part));
                }
                float dot = subgroupAdd(part);
                uint p = p0 + j;
                s[j] = p >= lo[i] && p < hi[i] ? dot * pc.scale : -1.0 / 0.0;
                mx = max(mx, s[j]);
            }
            if (!isinf(mx)) {
                float alpha = exp(m[i] - mx); // 0 while m = -inf
                l[i] *= alpha;
                for (uint k = 0u; k < KP; k++) {
                    acc[i][k] *= alpha;
                }
                for (uint j = 0u; j < GROUP; j++) {
                    float e = exp(s[j] - mx); // 0 outside the token's range
                    l[i] += e;
                    for (uint k = 0u; k < KP; k++) {
                        acc[i][k] = fma(vec2(e), KV_PAIR(vw[j][k], lane + S * k), acc[i][k]);
                    }
                }
                m[i] = mx;
            }
        }
    }

    for (uint i = 0u; i < TQ; i++) {
        if (lane == 0u) {
            sg_m[sg * TQ + i] = m[i];
            sg_l[sg * TQ + i] = l[i];
        }
        for (uint k = 0u; k < KP; k++) {
            uint w = lane + S * k;
            if (w < pairs) {
                sg_acc[(sg * TQ + i) * (MAX_DIMS / 2) + w] = acc[i][k];
            }
        }
    }
    memoryBarrierShared();
    barrier();
    uint tid = gl_LocalInvocationID.x;
    float sink = pc.sinks != 0ul ? F32s(pc.sinks).v[h] : 0.0;
    // Invocation tid writes pair tid of every token of the block.
    for (uint i = 0u; i < TQ; i++) {
        if (t0 + i >= pc.n_tokens || tid >= pairs) {
            continue;
        }
        float big = -1.0 / 0.0;
        for (uint b = 0u; b < nsg; b++) {
            big = sg_l[b * TQ + i] > 0.0 ? max(big, sg_m[b * TQ + i]) : big;
        }
        vec2 o = vec2(0.0);
        float total = 0.0;
        for (uint b = 0u; b < nsg; b++) {
            float lb = sg_l[b * TQ + i];
            float e = lb > 0.0 ? exp(sg_m[b * TQ + i] - big) : 0.0;
            total += lb * e;
            o = fma(vec2(e), sg_acc[(b * TQ + i) * (MAX_DIMS / 2) + tid], o);
        }
        if (pc.sinks != 0ul) {
            if (sink > big) {
                float ms = isinf(big) ? 0.0 : exp(big - sink);
                o *= ms;
                total = total * ms + 1.0;
            } else {
                total += exp(sink - big);
            }
        }
        float inv = total == 0.0 ? 0.0 : 1.0 / total;
        F32s out_row = F32s(pc.out_ + (uint64_t(t0 + i) * q_dim + h * hd) * 4u);
        out_row.v[2u * tid] = o.x * inv;
        out_row.v[2u * tid + 1u] = o.y * inv;
    }
}
