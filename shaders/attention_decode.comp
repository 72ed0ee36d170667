// Decode attention, one run of positions per workgroup
// (rocmforge_core::gpu::split; grid n_tokens * n_head * n_split), for
// subgroups of at least 32 invocations. It writes the run's maximum, sum
// and unnormalised output to the partials, which the row's last run to
// finish merges (folds the sink into, normalises; attention_merge.glsl),
// or attention_combine.comp where pc.counters is 0.
//
// Each subgroup takes its own groups of GROUP consecutive positions and
// reads their K and V rows straight from the cache: a lane holds pairs of
// head dimensions 2 (lane + S k) and +1 (S the subgroup's size), so a row
// is read by the subgroup in 4-byte words side by side, one 128-byte
// transaction per S words, and all GROUP rows' words are loaded before the
// first is used (bytes in flight, where the unsplit kernel waited on each
// chunk). A position's score is the subgroup's sum of the lanes' partial
// dot products; the group's weights e^(s - m) follow at once, in f32, and
// one multiply-add per pair and position accumulates V. The subgroups'
// (maximum, sum, output) are merged through shared memory at the end.
//
// A workgroup of WG_SIZE = 128 invocations has at most 4 subgroups here;
// pairs per lane are at most KP (2: attention_decode, head_dim <= 128; 4:
// attention_decode_wide, head_dim <= 256); the kp = ceil(pairs / S) in use
// is uniform, so invocations skip the rest with uniform branches.
// Shared memory: 4 KiB, registers for 2 * GROUP * KP words: the kernel is
// meant to run many workgroups per compute unit, each with loads in flight.
//
// KV_Q8_0 / KV_Q4_0: a quantized cache (kv_cache.glsl). A lane's pair of
// dimensions is then its block's scale and the 16-bit word holding both
// quants, loaded as one u32 in place of the two halves; the rest is the
// same.
#version 460
#extension GL_GOOGLE_include_directive : require
#define NEEDS_REDUCE
#include "common.glsl"
#include "kv_cache.glsl"

layout(local_size_x = WG_SIZE) in;

#ifndef KP
#define KP 2
#endif
#define GROUP 8
#define MAX_SUBGROUPS (WG_SIZE / 32)
#define MAX_PAIRS 128

#include "attention_push.glsl"
#include "attention_merge.glsl"

shared float sg_m[MAX_SUBGROUPS];
shared float sg_l[MAX_SUBGROUPS];
shared vec2 sg_acc[MAX_SUBGROUPS * MAX_PAIRS];

void main() {
    uint g = wg_linear();
    uint run = g % pc.n_split;
    g /= pc.n_split;
    if (g >= pc.n_tokens * pc.n_head) {
        return;
    }
    uint t = g / pc.n_head;
    uint h = g % pc.n_head;
    uint kvh = h / (pc.n_head / pc.n_head_kv);
    uint hd = pc.head_dim;
    uint pairs = hd / 2u;
    uint q_dim = pc.n_head * hd;
    uint n_kv = step_pos0(pc.step) + t + 1u;
    uint first = (pc.window != 0u && n_kv > pc.window) ? n_kv - pc.window : 0u;
    // This workgroup's run of first .. n_kv (runs of `per` positions, the
    // last shorter; runs past the span are empty).
    uint span = n_kv - first;
    uint per = max(pc.split_min, (span + pc.n_split - 1u) / pc.n_split);
    bool in_span = run < (span + per - 1u) / per;
    uint begin = in_span ? first + run * per : n_kv;
    uint end = in_span ? min(n_kv, begin + per) : n_kv;

    // Subgroups are whole and numbered in invocation order (what every
    // driver does with the sizes this kernel runs at); lavapipe 22.3 gave
    // wrong sums here when this read gl_SubgroupID and
    // gl_SubgroupInvocationID instead.
    uint S = gl_SubgroupSize;
    uint kp = (pairs + S - 1u) / S;
    uint lane = gl_LocalInvocationID.x % S;
    uint sg = gl_LocalInvocationID.x / S;
    uint nsg = WG_SIZE / S;

    F32s qv = F32s(pc.q + (uint64_t(t) * q_dim + h * hd) * 4u);
    vec2 q[KP];
    vec2 acc[KP];
    for (uint k = 0u; k < KP; k++) {
        uint w = lane + S * k;
        q[k] = w < pairs ? vec2(qv.v[2u * w], qv.v[2u * w + 1u]) : vec2(0.0);
        acc[k] = vec2(0.0);
    }
    float m = -1.0 / 0.0;
    float l = 0.0;
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
        // Ring rows without a division per position.
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
        float s[GROUP];
        float mx = m;
        for (uint j = 0u; j < GROUP; j++) {
            float part = 0.0;
            for (uint k = 0u; k < KP; k++) {
                vec2 kk = KV_PAIR(kw[j][k], lane + S * k);
                part = fma(kk.x, q[k].x, fma(kk.y, q[k].y, part));
            }
            float dot = subgroupAdd(part);
            s[j] = p0 + j < end ? dot * pc.scale : -1.0 / 0.0;
            mx = max(mx, s[j]);
        }
        float alpha = exp(m - mx); // 0 while m = -inf
        l *= alpha;
        for (uint k = 0u; k < KP; k++) {
            acc[k] *= alpha;
        }
        for (uint j = 0u; j < GROUP; j++) {
            float w = exp(s[j] - mx); // 0 past the run
            l += w;
            for (uint k = 0u; k < KP; k++) {
                acc[k] = fma(vec2(w), KV_PAIR(vw[j][k], lane + S * k), acc[k]);
            }
        }
        m = mx;
    }

    // The subgroups' runs merged: weights e^(m_sg - M) over non-empty ones.
    if (lane == 0u) {
        sg_m[sg] = m;
        sg_l[sg] = l;
    }
    for (uint k = 0u; k < KP; k++) {
        uint w = lane + S * k;
        if (w < pairs) {
            sg_acc[sg * MAX_PAIRS + w] = acc[k];
        }
    }
    memoryBarrierShared();
    barrier();
    float big = -1.0 / 0.0;
    for (uint i = 0u; i < nsg; i++) {
        big = sg_l[i] > 0.0 ? max(big, sg_m[i]) : big;
    }
    uint idx = g * pc.n_split + run;
    PartialsC part = PartialsC(pc.partials);
    uint tid = gl_LocalInvocationID.x;
    if (tid < pairs) {
        vec2 o = vec2(0.0);
        for (uint i = 0u; i < nsg; i++) {
            float e = sg_l[i] > 0.0 ? exp(sg_m[i] - big) : 0.0;
            o = fma(vec2(e), sg_acc[i * MAX_PAIRS + tid], o);
        }
        part.v[idx * hd + 2u * tid] = o.x;
        part.v[idx * hd + 2u * tid + 1u] = o.y;
    }
    if (tid == 0u) {
        float total = 0.0;
        for (uint i = 0u; i < nsg; i++) {
            total += sg_l[i] > 0.0 ? sg_l[i] * exp(sg_m[i] - big) : 0.0;
        }
        uint ml = pc.n_tokens * pc.n_head * pc.n_split * hd + 2u * idx;
        part.v[ml] = big;
        part.v[ml + 1u] = total;
    }
    if (pc.counters != 0ul) {
        merge_if_last(g);
    }
}
