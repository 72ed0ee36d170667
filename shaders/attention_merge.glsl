// Merging a split decode attention row (rocmforge_core::gpu::split), for
// attention_combine.comp and for the decode kernels' last run of a row.
//
// merge_runs(g): the workgroup reads row g's n_split partials (maximum
// m_c, sum l_c, unnormalised output o_c), and with M the largest m_c of a
// non-empty run writes
//   out = sum_c o_c e^(m_c - M) / sum_c l_c e^(m_c - M)
// in f32, after folding in the row's attention sink as the unsplit kernel
// does (the accumulator rescaled when the sink is the new maximum). Empty
// runs (l_c = 0, past a short span) weigh nothing. Invocation c < n_split
// reads run c's (m_c, l_c) and weight, so the runs' outputs are then read
// with independent loads (n_split <= WG_SIZE). With pc.q8 set it also
// writes the output Q8-packed (q8_packed.glsl) for the integer mat-vec
// that reads it; the head size is then a multiple of 32.
//
// merge_if_last(g): called by a decode workgroup once its run's partial is
// written: the last of row g's n_split runs to finish (counters.glsl, row
// g's counter at pc.counters) merges the row, so one launch does the
// attention and its combine. Partials are written and read through
// `coherent` references.
//
// Needs attention_push.glsl, NEEDS_REDUCE (common.glsl's wg_sum/wg_max) and
// WG_SIZE; heads of up to MERGE_DIMS * WG_SIZE dimensions.
#ifndef ATTENTION_MERGE_GLSL
#define ATTENTION_MERGE_GLSL

#include "q8_packed.glsl"
#include "counters.glsl"

#ifndef MERGE_DIMS
#define MERGE_DIMS 2
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer PartialsC {
    float v[];
};

shared float merge_weight[WG_SIZE];
shared float merge_out[MERGE_DIMS * WG_SIZE];

// Call from uniform control flow.
void merge_runs(uint g, bool out_q8) {
    uint t = g / pc.n_head;
    uint h = g % pc.n_head;
    uint tid = gl_LocalInvocationID.x;
    uint hd = pc.head_dim;
    uint q_dim = pc.n_head * hd;
    PartialsC part = PartialsC(pc.partials);
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
    merge_weight[tid] = w;
    float l = wg_sum(lc * w);
    memoryBarrierShared();
    barrier();

    float acc[MERGE_DIMS];
    for (uint i = 0u; i < MERGE_DIMS; i++) {
        acc[i] = 0.0;
    }
    for (uint c = 0u; c < pc.n_split; c++) {
        float wc = merge_weight[c];
        for (uint i = 0u; i < MERGE_DIMS; i++) {
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
            for (uint i = 0u; i < MERGE_DIMS; i++) {
                acc[i] *= ms;
            }
            l = l * ms + 1.0;
        } else {
            l += exp(s - m);
        }
    }
    F32s o = F32s(pc.out_ + (uint64_t(t) * q_dim + h * hd) * 4u);
    float inv = l == 0.0 ? 0.0 : 1.0 / l;
    for (uint i = 0u; i < MERGE_DIMS; i++) {
        uint d = tid + i * WG_SIZE;
        if (d < hd) {
            o.v[d] = acc[i] * inv;
            merge_out[d] = acc[i] * inv;
        }
    }
    if (out_q8) {
        memoryBarrierShared();
        barrier();
        if (tid < hd / 32u) {
            vec4 v[8];
            for (uint j = 0u; j < 8u; j++) {
                uint d = tid * 32u + j * 4u;
                v[j] = vec4(merge_out[d], merge_out[d + 1u], merge_out[d + 2u], merge_out[d + 3u]);
            }
            store_q8_packed(v, pc.q8, pc.q8_scales, (t * q_dim + h * hd) / 32u + tid);
        }
    }
}

// Call from uniform control flow, after this workgroup's partial writes.
void merge_if_last(uint g) {
    if (last_to_finish(pc.counters + uint64_t(g) * 4ul, pc.n_split)) {
        merge_runs(g, pc.q8 != 0ul);
    }
}

#endif
