// Causal GQA attention over the f16 KV cache (shaders/attention.comp), one
// workgroup per (token, head), with ggml's CPU flash-attention numerics as
// the CPU reference (crates/rocmforge-cpu attention.rs) has them:
//   - Q rounded to f16; each q.k summed like ggml_vec_dot_f16 on AVX2: 32
//     lanes accumulated with fma over 32-element steps, reduced
//     (a0 + a2) + (a1 + a3) per 8 lanes, then halves, then pairs; a tail
//     past a multiple of 32 added in f64 (the CPU's tail_f64; the shader
//     adds it in f32); score = dot * scale;
//   - online softmax in position order: a new maximum m rescales the output
//     by e^(m_old - s), otherwise the position weighs e^(s - m);
//   - the output accumulated in f16 (f16 values held in f32), rounded after
//     every multiply-add (fused below a multiple of 32 dims, as ggml's
//     vector body) and every rescale; the sum l = l * ms + vs in f32.
// Token t attends to cache positions 0 .. pos0 + t (the last `window` of
// them in a sliding-window layer; pos0 from the
// step-input region), so the grid depends only on the graph's shape.
//
// Positions are taken a chunk at a time: each thread scores one position of
// the chunk, then every thread walks the chunk in order for its own head
// dims (up to DIMS). Unlike the shader, which repeats the max / exp
// recurrence in every thread of the walk, the running maximum before each
// position is a prefix max over the chunk's scores (a wave scan, exact in
// any order), so each scoring thread computes its position's factors
// (ms, vs) once, with libm's expf bit for bit (ops_libm.h; the CPU calls
// libm, the shader the device's exp), and the walk only multiplies: the
// same values in the same order, one exp per position instead of one per
// thread and position, and no exp in the walk's serial chain.
//
// Kernels (argument block AttentionPush, grid n_tokens * n_head):
//   attention            64 threads, DIMS 4: head_dim <= 256; K rows read
//                        in place (16-byte loads where rows are 16-byte
//                        aligned, else 4-byte; head_dim and kv_dim even);
//   attention_staged     128 threads, DIMS 2, the decode variant: the
//                        chunk's K and V rows first copied to shared memory
//                        with 16-byte loads, all issued before the first
//                        store (STAGE_LOADS per thread), so a chunk costs one
//                        memory latency; head_dim and kv_dim multiples of 8,
//                        cache blocks 16-byte aligned (the host checks);
//   attention_staged_q8  also writes the head's output Q8-packed
//                        (wave_store_q8_packed) for the integer mat-vec that
//                        reads it; head_dim a multiple of 32;
//   attention_split      attention_staged over one run of consecutive
//                        positions per workgroup (grid n_tokens * n_head *
//                        n_split; rocmforge_core::gpu::split), each chunk
//                        taken whole in f32 (split_chunk), writing the
//                        run's maximum, sum and unnormalised output to the
//                        partials;
//   attention_combine    one workgroup per (token, head): merges the row's
//   attention_combine_q8 runs in f32, folds in the sink, normalises (and
//                        writes Q8-packed), as shaders/attention_combine.comp.
#include "ops_common.h"

// Shared words per staged K (and V) chunk: 14 KiB each, as the shader.
#define ATT_OPS_STAGE_WORDS 3584u
// 16-byte loads per thread per chunk.
#define ATT_OPS_STAGE_LOADS 16u

namespace ops {

template <uint32_t WG, uint32_t DIMS, bool STAGE> struct AttShared {
    alignas(16) float qs[DIMS * WG]; // Q rounded to f16
    float ms[WG];                    // per chunk position: rescale factor
    float vs[WG];                    // and weight
    float tot[WG / WAVE_SIZE];       // per wave: max score of its positions
    // A chunk's K and V rows (pairs of halves), row stride head_dim / 2 + 1
    // words so that threads reading different rows hit different banks.
    uint32_t k_stage[STAGE ? ATT_OPS_STAGE_WORDS : 1u];
    uint32_t v_stage[STAGE ? ATT_OPS_STAGE_WORDS : 1u];
};

// Eight halves (dims 8j .. 8j + 7) of the K row whose words start at kw:
// one 16-byte load (VEC16: kw 16-byte aligned) or four 4-byte ones.
template <bool VEC16> DEV uint4 k_quad(const uint32_t* kw, uint32_t j) {
    if (VEC16) {
        return ((const uint4*)kw)[j];
    }
    const uint32_t* w = kw + 4u * j;
    return (uint4){w[0], w[1], w[2], w[3]};
}

// q . k for the K row at kw (words of two halves), in ggml's AVX2 order.
template <bool VEC16> DEV float dot_ggml(const uint32_t* kw, const float* qs, uint32_t hd) {
    float acc[32];
#pragma unroll
    for (uint32_t l = 0u; l < 32u; l++) {
        acc[l] = 0.0f;
    }
    uint32_t body = hd - hd % 32u;
    for (uint32_t i = 0u; i < body; i += 32u) {
#pragma unroll
        for (uint32_t j = 0u; j < 4u; j++) {
            uint4 k = k_quad<VEC16>(kw + i / 2u, j);
            vf4 q0 = *(const vf4*)(qs + i + 8u * j);
            vf4 q1 = *(const vf4*)(qs + i + 8u * j + 4u);
            float q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
            for (uint32_t e = 0u; e < 4u; e++) {
                uint32_t l = 8u * j + 2u * e;
                acc[l] = dev_fmaf(f16_bits_to_f32((uint16_t)k[e]), q[2u * e], acc[l]);
                acc[l + 1u] =
                    dev_fmaf(f16_bits_to_f32((uint16_t)(k[e] >> 16)), q[2u * e + 1u], acc[l + 1u]);
            }
        }
    }
    float v[8];
#pragma unroll
    for (uint32_t l = 0u; l < 8u; l++) {
        v[l] = (acc[l] + acc[16u + l]) + (acc[8u + l] + acc[24u + l]);
    }
    float s = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
    if (body == hd) {
        return s;
    }
    double sum = (double)s;
    for (uint32_t d = body; d < hd; d += 2u) {
        uint32_t w = kw[d / 2u];
        sum += (double)(f16_bits_to_f32((uint16_t)w) * qs[d]);
        sum += (double)(f16_bits_to_f32((uint16_t)(w >> 16)) * qs[d + 1u]);
    }
    return (float)sum;
}

// The softmax factors of a chunk. Thread tid holds the score s of chunk
// position tid (active), -inf otherwise; m is the maximum of all earlier
// chunks' scores. Writes ms / vs of every active position, returns the
// maximum after the chunk. Uniform control flow; ends with a barrier, after
// which ms / vs are visible to all.
template <uint32_t WG, uint32_t DIMS, bool STAGE>
DEV float softmax_factors(float s, bool active, float m, AttShared<WG, DIMS, STAGE>& sh) {
    uint32_t lane = lane_id();
    uint32_t w = wave_id();
    float incl = wave_scan_max(s);
    float excl = lane_read_f32(incl, lane == 0u ? 0u : lane - 1u);
    if (lane == WAVE_SIZE - 1u) {
        sh.tot[w] = incl;
    }
    block_barrier();
    float before = m; // max over every earlier position of earlier waves
    float after = m;
#pragma unroll
    for (uint32_t k = 0u; k < WG / WAVE_SIZE; k++) {
        float t = sh.tot[k];
        before = k < w ? dev_fmaxf(before, t) : before;
        after = dev_fmaxf(after, t);
    }
    // The running maximum when this position is reached.
    float mp = lane == 0u ? before : dev_fmaxf(before, excl);
    if (active) {
        // As the CPU: s > m rescales by e^(m - s) (0 when m = -inf) and the
        // position weighs 1; otherwise it weighs e^(s - m).
        bool rescale = s > mp;
        float e = libm_expf(rescale ? mp - s : s - mp);
        sh.ms[thread_id_x()] = rescale ? e : 1.0f;
        sh.vs[thread_id_x()] = rescale ? 1.0f : e;
    }
    block_barrier();
    return after;
}

// One position of the walk for this thread's dims d = tid + i * WG < hd:
// the rescale where the maximum moved (ms != 1; a factor of exactly 1
// would leave an f16 value as it is, so those positions skip it: a scalar
// branch, ms is the same in every thread), then acc += x * vs, each step
// rounded to f16, the add fused below body (head_dim rounded down to a
// multiple of 32) as ggml's vector body.
template <uint32_t WG, uint32_t DIMS>
DEV void walk_pos(float (&acc)[DIMS], const float (&x)[DIMS], float ms, float vs, uint32_t hd,
                  uint32_t body) {
    uint32_t tid = thread_id_x();
    if (wave_uniform(__builtin_bit_cast(uint32_t, ms)) != 0x3f800000u) {
#pragma unroll
        for (uint32_t i = 0u; i < DIMS; i++) {
            if (tid + i * WG < hd) {
                acc[i] = round_f16(acc[i] * ms);
            }
        }
    }
#pragma unroll
    for (uint32_t i = 0u; i < DIMS; i++) {
        uint32_t d = tid + i * WG;
        if (d < hd) {
            acc[i] = round_f16(d < body ? dev_fmaf(x[i], vs, acc[i]) : acc[i] + x[i] * vs);
        }
    }
}

// The walk over a chunk's cnt positions in order: V values and factors of
// position j + 1 are loaded while position j is added (a scalar branch
// guards the loads), so neither the cache nor shared memory latency sits
// in the serial chain. v_row(j) points at the head's V values of chunk
// position j (global memory or the stage).
template <uint32_t WG, uint32_t DIMS, bool STAGE, typename VRow>
DEV void walk_chunk(float (&acc)[DIMS], float& l, uint32_t cnt,
                    const AttShared<WG, DIMS, STAGE>& sh, uint32_t hd, uint32_t body, VRow v_row) {
    uint32_t tid = thread_id_x();
    float x[DIMS];
    float ms = 1.0f;
    float vs = 0.0f;
    auto load = [&](uint32_t j, float (&xo)[DIMS], float& mso, float& vso) {
        const uint16_t* v = v_row(j);
#pragma unroll
        for (uint32_t i = 0u; i < DIMS; i++) {
            uint32_t d = tid + i * WG;
            xo[i] = d < hd ? f16_bits_to_f32(v[d]) : 0.0f;
        }
        mso = sh.ms[j];
        vso = sh.vs[j];
    };
    load(0u, x, ms, vs); // cnt >= 1
    for (uint32_t j = 0u; j < cnt; j++) {
        float xn[DIMS];
        float msn = 1.0f;
        float vsn = 0.0f;
        if (j + 1u < cnt) {
            load(j + 1u, xn, msn, vsn);
        }
        walk_pos<WG, DIMS>(acc, x, ms, vs, hd, body);
        l = l * ms + vs;
#pragma unroll
        for (uint32_t i = 0u; i < DIMS; i++) {
            x[i] = xn[i];
        }
        ms = msn;
        vs = vsn;
    }
}

// An attention sink joins the denominator after the positions, as ggml
// folds it in: the accumulator is rescaled unrounded.
template <uint32_t DIMS>
DEV void fold_sink(const AttentionPush& p, uint32_t h, float m, float& l, float (&acc)[DIMS]) {
    if (p.sinks != 0u) {
        float s = dev_ptr<const float>(p.sinks)[h];
        float ms = 1.0f;
        float vs = 1.0f;
        if (s > m) {
            ms = libm_expf(m - s); // 0 when m = -inf
#pragma unroll
            for (uint32_t i = 0u; i < DIMS; i++) {
                acc[i] *= ms;
            }
        } else {
            vs = libm_expf(s - m);
        }
        l = l * ms + vs;
    }
}

// The row's output acc / l (0 for l = 0), and its Q8-packed form.
template <uint32_t WG, uint32_t DIMS, bool OUT_Q8>
DEV void write_output(const AttentionPush& p, uint32_t t, uint32_t h, float l,
                      const float (&acc)[DIMS]) {
    uint32_t tid = thread_id_x();
    uint32_t hd = p.head_dim;
    uint64_t at = (uint64_t)t * p.n_head * hd + h * hd;
    float* o = dev_ptr<float>(p.out) + at;
    float inv = l == 0.0f ? 0.0f : 1.0f / l;
#pragma unroll
    for (uint32_t i = 0u; i < DIMS; i++) {
        uint32_t d = tid + i * WG;
        if (d < hd) {
            o[d] = acc[i] * inv;
        }
    }
    if (OUT_Q8) {
        // head_dim % 32 == 0: a wave's 32 dims tid + i * WG are one block,
        // all inside the head or all past it.
#pragma unroll
        for (uint32_t i = 0u; i < DIMS; i++) {
            uint32_t first = i * WG + wave_id() * WAVE_SIZE;
            if (first < hd) {
                wave_store_q8_packed(acc[i] * inv, dev_ptr<int8_t>(p.q8),
                                     dev_ptr<float2>(p.q8_scales), (uint32_t)((at + first) / 32u));
            }
        }
    }
}

// Maximum and sum of v over the workgroup, returned to every thread
// (`part`: WG / WAVE_SIZE floats of shared memory). Uniform control flow;
// ends with a barrier, after which earlier shared-memory writes are
// visible to all.
template <uint32_t WG> DEV float block_max_f32(float v, float* part) {
    v = wave_max(v);
    if (lane_id() == 0u) {
        part[wave_id()] = v;
    }
    block_barrier();
    float r = part[0];
#pragma unroll
    for (uint32_t w = 1u; w < WG / WAVE_SIZE; w++) {
        r = dev_fmaxf(r, part[w]);
    }
    block_barrier();
    return r;
}

template <uint32_t WG> DEV float block_sum_f32(float v, float* part) {
    v = wave_sum(v);
    if (lane_id() == 0u) {
        part[wave_id()] = v;
    }
    block_barrier();
    float r = 0.0f;
#pragma unroll
    for (uint32_t w = 0u; w < WG / WAVE_SIZE; w++) {
        r += part[w];
    }
    block_barrier();
    return r;
}

// One staged chunk of a split run (attention_split), taken whole in f32:
// the chunk's maximum, every position's weight e^(s - m) computed by the
// thread that scored it (s: this thread's score, -inf past cnt), then one
// multiply-add chain over the chunk per dimension. The in-order walk's f16
// roundings and per-position rescale stay with the unsplit kernels; f32
// sums are closer to the exact result. vh: the stage's V rows (halves,
// row stride 2 * stride).
template <uint32_t WG, uint32_t DIMS, bool STAGE>
DEV void split_chunk(float (&acc)[DIMS], float& m, float& l, float s, uint32_t cnt,
                     AttShared<WG, DIMS, STAGE>& sh, uint32_t hd, const uint16_t* vh,
                     uint32_t stride) {
    uint32_t tid = thread_id_x();
    float m_new = dev_fmaxf(m, block_max_f32<WG>(s, sh.tot));
    float w = tid < cnt ? libm_expf(s - m_new) : 0.0f;
    sh.vs[tid] = w;
    float alpha = libm_expf(m - m_new); // 0 while m = -inf
    l = l * alpha + block_sum_f32<WG>(w, sh.tot);
    m = m_new;
#pragma unroll
    for (uint32_t i = 0u; i < DIMS; i++) {
        uint32_t d = tid + i * WG;
        if (d < hd) {
            float a = acc[i] * alpha;
            for (uint32_t j = 0u; j < cnt; j++) {
                a = dev_fmaf(sh.vs[j], f16_bits_to_f32(vh[2u * j * stride + d]), a);
            }
            acc[i] = a;
        }
    }
}

template <uint32_t WG, uint32_t DIMS, bool STAGE, bool OUT_Q8, bool SPLIT>
DEV void attention_run(const AttentionPush& p, AttShared<WG, DIMS, STAGE>& sh) {
    uint32_t g = wg_linear();
    uint32_t run = 0u;
    if (SPLIT) {
        run = g % p.n_split;
        g /= p.n_split;
    }
    if (g >= p.n_tokens * p.n_head) {
        return; // the whole workgroup
    }
    uint32_t t = g / p.n_head;
    uint32_t h = g % p.n_head;
    uint32_t kvh = h / (p.n_head / p.n_head_kv);
    uint32_t tid = thread_id_x();
    uint32_t hd = p.head_dim;
    uint32_t body = hd - hd % 32u;
    uint32_t q_dim = p.n_head * hd;
    uint32_t n_kv = step_pos0(p.step) + t + 1u;
    // A sliding window skips what ggml masks: positions with pos - p >= window.
    uint32_t first = (p.window != 0u && n_kv > p.window) ? n_kv - p.window : 0u;
    if (SPLIT) {
        // This workgroup's run of the span first .. n_kv: runs of `per`
        // positions, the last one shorter; runs past the span are empty.
        uint32_t span = n_kv - first;
        uint32_t per = __builtin_elementwise_max(p.split_min, (span + p.n_split - 1u) / p.n_split);
        bool in_span = run < (span + per - 1u) / per;
        first = in_span ? first + run * per : n_kv;
        n_kv = in_span ? __builtin_elementwise_min(n_kv, first + per) : n_kv;
    }
    const float* q = dev_ptr<const float>(p.q) + (uint64_t)t * q_dim + h * hd;
    for (uint32_t d = tid; d < hd; d += WG) {
        sh.qs[d] = round_f16(q[d]);
    }
    block_barrier();

    float m = -__builtin_inff();
    float l = 0.0f;
    float acc[DIMS];
#pragma unroll
    for (uint32_t i = 0u; i < DIMS; i++) {
        acc[i] = 0.0f;
    }
    // Cache rows as u32 pairs of halves; this head starts kvh * hd halves in.
    uint32_t row_words = p.kv_dim / 2u;
    uint32_t head_word = kvh * hd / 2u;

    if (STAGE) {
        const uint4* kc = dev_ptr<const uint4>(p.k_cache);
        const uint4* vc = dev_ptr<const uint4>(p.v_cache);
        uint32_t hw = hd / 2u;
        uint32_t hq = hd / 8u; // 16-byte quads per row
        uint32_t stride = hw + 1u;
        uint32_t chunk = __builtin_elementwise_min(
            __builtin_elementwise_min(WG, ATT_OPS_STAGE_WORDS / stride),
            ATT_OPS_STAGE_LOADS * WG / (2u * hq));
        uint32_t row_quads = p.kv_dim / 8u;
        uint32_t head_quad = kvh * hq;
        // Quad i = tid + j * WG of a chunk is quad i % hq of row i / hq: K
        // rows first, then V rows (cnt * hq quads each). Row and column by
        // steps, without a division per load.
        uint32_t row0 = tid / hq;
        uint32_t col0 = tid % hq;
        uint32_t row_step = WG / hq;
        uint32_t col_step = WG % hq;
        for (uint32_t base = first; base < n_kv; base += chunk) {
            uint32_t cnt = __builtin_elementwise_min(chunk, n_kv - base);
            uint4 r[ATT_OPS_STAGE_LOADS];
            // Recomputed per chunk, not held for all 16 loads across the loop.
            uint32_t row = opaque(row0);
            uint32_t col = opaque(col0);
#pragma unroll
            for (uint32_t j = 0u; j < ATT_OPS_STAGE_LOADS; j++) {
                // Defined on every path: an undefined r[j] would keep its
                // register live around the whole chunk loop.
                r[j] = (uint4){0u, 0u, 0u, 0u};
                if (row < cnt) {
                    r[j] = kc[(uint64_t)((base + row) % p.ring) * row_quads + head_quad + col];
                } else if (row < 2u * cnt) {
                    r[j] = vc[(uint64_t)((base + row - cnt) % p.ring) * row_quads + head_quad + col];
                }
                row += row_step;
                col += col_step;
                if (col >= hq) {
                    col -= hq;
                    row += 1u;
                }
            }
            row = opaque(row0);
            col = opaque(col0);
#pragma unroll
            for (uint32_t j = 0u; j < ATT_OPS_STAGE_LOADS; j++) {
                if (row < 2u * cnt) {
                    uint32_t* dst = row < cnt ? sh.k_stage + row * stride + col * 4u
                                              : sh.v_stage + (row - cnt) * stride + col * 4u;
                    dst[0] = r[j].x;
                    dst[1] = r[j].y;
                    dst[2] = r[j].z;
                    dst[3] = r[j].w;
                }
                row += row_step;
                col += col_step;
                if (col >= hq) {
                    col -= hq;
                    row += 1u;
                }
            }
            block_barrier();
            bool active = tid < cnt;
            float s = -__builtin_inff();
            if (active) {
                s = dot_ggml<false>(sh.k_stage + tid * stride, sh.qs, hd) * p.scale;
            }
            const uint16_t* vh = (const uint16_t*)sh.v_stage;
            if (SPLIT) {
                split_chunk<WG, DIMS, STAGE>(acc, m, l, s, cnt, sh, hd, vh, stride);
            } else {
                m = softmax_factors(s, active, m, sh);
                walk_chunk<WG, DIMS, STAGE>(acc, l, cnt, sh, hd, body,
                                            [&](uint32_t j) { return vh + 2u * j * stride; });
            }
            block_barrier(); // the stage and the factors are rewritten next
        }
    } else {
        const uint32_t* kc = dev_ptr<const uint32_t>(p.k_cache);
        const uint16_t* vc = dev_ptr<const uint16_t>(p.v_cache);
        bool vec16 = p.k_cache % 16u == 0u && p.kv_dim % 8u == 0u && hd % 8u == 0u;
        for (uint32_t base = first; base < n_kv; base += WG) {
            uint32_t cnt = __builtin_elementwise_min(WG, n_kv - base);
            bool active = tid < cnt;
            float s = -__builtin_inff();
            if (active) {
                const uint32_t* kw = kc + (uint64_t)((base + tid) % p.ring) * row_words + head_word;
                s = (vec16 ? dot_ggml<true>(kw, sh.qs, hd) : dot_ggml<false>(kw, sh.qs, hd)) *
                    p.scale;
            }
            // The factors are rewritten only after the next chunk's first
            // barrier, which every thread reaches after this walk.
            m = softmax_factors(s, active, m, sh);
            // Rows wrap at the ring's end (a sliding-window layer).
            const uint16_t* vhead = vc + kvh * hd;
            walk_chunk<WG, DIMS, STAGE>(acc, l, cnt, sh, hd, body, [&](uint32_t j) {
                return vhead + (uint64_t)((base + j) % p.ring) * p.kv_dim;
            });
        }
    }

    if (SPLIT) {
        uint32_t idx = g * p.n_split + run;
        float* part = dev_ptr<float>(p.partials);
#pragma unroll
        for (uint32_t i = 0u; i < DIMS; i++) {
            uint32_t d = tid + i * WG;
            if (d < hd) {
                part[(uint64_t)idx * hd + d] = acc[i];
            }
        }
        if (tid == 0u) {
            uint64_t ml = (uint64_t)p.n_tokens * p.n_head * p.n_split * hd + 2u * idx;
            part[ml] = m;
            part[ml + 1u] = l;
        }
        return;
    }
    fold_sink(p, h, m, l, acc);
    write_output<WG, DIMS, OUT_Q8>(p, t, h, l, acc);
}

// attention_decode (shaders/attention_decode.comp): one run of positions
// per workgroup of WG threads; each wave takes its own groups of GROUP
// consecutive positions and reads their K and V rows straight from the
// cache, lane l holding head-dim pairs l + 32 k (k < KP), every word of the
// group loaded before the first is used. A position's score is the wave's
// sum of the lanes' partial dot products; the group's weights follow in
// f32, then one multiply-add per pair and position. The waves' (maximum,
// sum, output) merge through shared memory into the run's partial.
// attention_decode holds up to 2 pairs a lane (head_dim <= 128),
// attention_decode_wide up to 4 (head_dim <= 256). Weights use dev_expf,
// not libm_expf: this kernel's sums are its own (f32), not the CPU's.
#define ATT_DECODE_GROUP 8u

template <uint32_t WG, uint32_t KP> struct DecodeShared {
    float m[WG / WAVE_SIZE];
    float l[WG / WAVE_SIZE];
    float acc[WG / WAVE_SIZE][2u * WAVE_SIZE * KP];
};

// KP: pairs a lane may hold (head_dim <= 64 KP); the kp = ceil(pairs / 32)
// in use is uniform, so the lanes skip the rest with scalar branches.
template <uint32_t WG, uint32_t KP>
DEV void attention_decode_run(const AttentionPush& p, DecodeShared<WG, KP>& sh) {
    constexpr uint32_t GROUP = ATT_DECODE_GROUP;
    constexpr uint32_t NW = WG / WAVE_SIZE;
    uint32_t g = wg_linear();
    uint32_t run = g % p.n_split;
    g /= p.n_split;
    if (g >= p.n_tokens * p.n_head) {
        return; // the whole workgroup
    }
    uint32_t t = g / p.n_head;
    uint32_t h = g % p.n_head;
    uint32_t kvh = h / (p.n_head / p.n_head_kv);
    uint32_t hd = p.head_dim;
    uint32_t pairs = hd / 2u;
    uint32_t kp = (pairs + WAVE_SIZE - 1u) / WAVE_SIZE;
    uint32_t n_kv = step_pos0(p.step) + t + 1u;
    uint32_t first = (p.window != 0u && n_kv > p.window) ? n_kv - p.window : 0u;
    uint32_t span = n_kv - first;
    uint32_t per = __builtin_elementwise_max(p.split_min, (span + p.n_split - 1u) / p.n_split);
    bool in_span = run < (span + per - 1u) / per;
    uint32_t begin = in_span ? first + run * per : n_kv;
    uint32_t end = in_span ? __builtin_elementwise_min(n_kv, begin + per) : n_kv;

    uint32_t lane = lane_id();
    uint32_t wv = wave_id();
    const float* q = dev_ptr<const float>(p.q) + (uint64_t)t * p.n_head * hd + h * hd;
    float qx[KP], qy[KP], ax[KP], ay[KP];
#pragma unroll
    for (uint32_t k = 0u; k < KP; k++) {
        uint32_t w = lane + WAVE_SIZE * k;
        qx[k] = w < pairs ? q[2u * w] : 0.0f;
        qy[k] = w < pairs ? q[2u * w + 1u] : 0.0f;
        ax[k] = 0.0f;
        ay[k] = 0.0f;
    }
    float m = -__builtin_inff();
    float l = 0.0f;
    const uint32_t* kc = dev_ptr<const uint32_t>(p.k_cache) + kvh * pairs;
    const uint32_t* vc = dev_ptr<const uint32_t>(p.v_cache) + kvh * pairs;
    uint32_t row_words = p.kv_dim / 2u;
    for (uint32_t p0 = begin + wv * GROUP; p0 < end; p0 += NW * GROUP) {
        uint32_t kw[GROUP][KP];
        uint32_t vw[GROUP][KP];
        // Ring rows without a division per position.
        uint32_t r = p0 % p.ring;
#pragma unroll
        for (uint32_t j = 0u; j < GROUP; j++) {
            uint64_t row = (uint64_t)r * row_words;
            bool live_row = p0 + j < end;
#pragma unroll
            for (uint32_t k = 0u; k < KP; k++) {
                kw[j][k] = 0u;
                vw[j][k] = 0u;
                if (k < kp) {
                    uint32_t w = lane + WAVE_SIZE * k;
                    if (live_row && w < pairs) {
                        kw[j][k] = kc[row + w];
                        vw[j][k] = vc[row + w];
                    }
                }
            }
            r = r + 1u == p.ring ? 0u : r + 1u;
        }
        float s[GROUP];
        float mx = m;
#pragma unroll
        for (uint32_t j = 0u; j < GROUP; j++) {
            float part = 0.0f;
#pragma unroll
            for (uint32_t k = 0u; k < KP; k++) {
                if (k < kp) {
                    part = dev_fmaf(f16_bits_to_f32((uint16_t)kw[j][k]), qx[k], part);
                    part = dev_fmaf(f16_bits_to_f32((uint16_t)(kw[j][k] >> 16)), qy[k], part);
                }
            }
            float dot = wave_sum(part);
            s[j] = p0 + j < end ? dot * p.scale : -__builtin_inff();
            mx = dev_fmaxf(mx, s[j]);
        }
        float alpha = dev_expf(m - mx); // 0 while m = -inf
        l *= alpha;
#pragma unroll
        for (uint32_t k = 0u; k < KP; k++) {
            ax[k] *= alpha;
            ay[k] *= alpha;
        }
#pragma unroll
        for (uint32_t j = 0u; j < GROUP; j++) {
            float e = dev_expf(s[j] - mx); // 0 past the run
            l += e;
#pragma unroll
            for (uint32_t k = 0u; k < KP; k++) {
                if (k < kp) {
                    ax[k] = dev_fmaf(e, f16_bits_to_f32((uint16_t)vw[j][k]), ax[k]);
                    ay[k] = dev_fmaf(e, f16_bits_to_f32((uint16_t)(vw[j][k] >> 16)), ay[k]);
                }
            }
        }
        m = mx;
    }

    if (lane == 0u) {
        sh.m[wv] = m;
        sh.l[wv] = l;
    }
#pragma unroll
    for (uint32_t k = 0u; k < KP; k++) {
        uint32_t w = lane + WAVE_SIZE * k;
        if (w < pairs) {
            sh.acc[wv][2u * w] = ax[k];
            sh.acc[wv][2u * w + 1u] = ay[k];
        }
    }
    block_barrier();
    float big = -__builtin_inff();
#pragma unroll
    for (uint32_t i = 0u; i < NW; i++) {
        big = sh.l[i] > 0.0f ? dev_fmaxf(big, sh.m[i]) : big;
    }
    uint32_t idx = g * p.n_split + run;
    float* part = dev_ptr<float>(p.partials);
    uint32_t tid = thread_id_x();
    for (uint32_t d = tid; d < hd; d += WG) {
        float o = 0.0f;
#pragma unroll
        for (uint32_t i = 0u; i < NW; i++) {
            float e = sh.l[i] > 0.0f ? dev_expf(sh.m[i] - big) : 0.0f;
            o = dev_fmaf(e, sh.acc[i][d], o);
        }
        part[(uint64_t)idx * hd + d] = o;
    }
    if (tid == 0u) {
        float total = 0.0f;
#pragma unroll
        for (uint32_t i = 0u; i < NW; i++) {
            total += sh.l[i] > 0.0f ? sh.l[i] * dev_expf(sh.m[i] - big) : 0.0f;
        }
        uint64_t ml = (uint64_t)p.n_tokens * p.n_head * p.n_split * hd + 2u * idx;
        part[ml] = big;
        part[ml + 1u] = total;
    }
}

// attention_rows (shaders/attention_rows.comp): prefill, TQ tokens of one
// head per workgroup, each K and V row a wave loads used by all TQ query
// rows; waves take groups of GROUP positions of the tokens' union range,
// each score outside a token's range -inf; an online softmax in f32 per
// token and wave, merged through shared memory, the sink folded in, the
// output written normalised.
#define ATT_ROWS_TQ 4u
#define ATT_ROWS_GROUP 4u

template <uint32_t WG, uint32_t KP> struct RowsShared {
    float m[WG / WAVE_SIZE][ATT_ROWS_TQ];
    float l[WG / WAVE_SIZE][ATT_ROWS_TQ];
    float acc[WG / WAVE_SIZE][ATT_ROWS_TQ][2u * WAVE_SIZE * KP];
};

template <uint32_t WG, uint32_t KP>
DEV void attention_rows_run(const AttentionPush& p, RowsShared<WG, KP>& sh) {
    constexpr uint32_t TQ = ATT_ROWS_TQ;
    constexpr uint32_t GROUP = ATT_ROWS_GROUP;
    constexpr uint32_t NW = WG / WAVE_SIZE;
    uint32_t g = wg_linear();
    uint32_t n_blocks = (p.n_tokens + TQ - 1u) / TQ;
    if (g >= n_blocks * p.n_head) {
        return; // the whole workgroup
    }
    uint32_t t0 = (g / p.n_head) * TQ;
    uint32_t h = g % p.n_head;
    uint32_t kvh = h / (p.n_head / p.n_head_kv);
    uint32_t hd = p.head_dim;
    uint32_t pairs = hd / 2u;
    uint32_t kp = (pairs + WAVE_SIZE - 1u) / WAVE_SIZE;
    uint32_t q_dim = p.n_head * hd;
    uint32_t pos0 = step_pos0(p.step);
    uint32_t lo[TQ], hi[TQ];
#pragma unroll
    for (uint32_t i = 0u; i < TQ; i++) {
        bool real = t0 + i < p.n_tokens;
        uint32_t n_kv = pos0 + t0 + i + 1u;
        hi[i] = real ? n_kv : 0u;
        lo[i] = real && p.window != 0u && n_kv > p.window ? n_kv - p.window : 0u;
    }
    uint32_t begin = lo[0];
    uint32_t end = hi[0];
#pragma unroll
    for (uint32_t i = 1u; i < TQ; i++) {
        end = __builtin_elementwise_max(end, hi[i]);
    }
    uint32_t lane = lane_id();
    uint32_t wv = wave_id();
    float qx[TQ][KP], qy[TQ][KP], ax[TQ][KP], ay[TQ][KP], m[TQ], l[TQ];
#pragma unroll
    for (uint32_t i = 0u; i < TQ; i++) {
        uint32_t tt = __builtin_elementwise_min(t0 + i, p.n_tokens - 1u);
        const float* q = dev_ptr<const float>(p.q) + (uint64_t)tt * q_dim + h * hd;
#pragma unroll
        for (uint32_t k = 0u; k < KP; k++) {
            uint32_t w = lane + WAVE_SIZE * k;
            qx[i][k] = w < pairs ? q[2u * w] : 0.0f;
            qy[i][k] = w < pairs ? q[2u * w + 1u] : 0.0f;
            ax[i][k] = 0.0f;
            ay[i][k] = 0.0f;
        }
        m[i] = -__builtin_inff();
        l[i] = 0.0f;
    }
    const uint32_t* kc = dev_ptr<const uint32_t>(p.k_cache) + kvh * pairs;
    const uint32_t* vc = dev_ptr<const uint32_t>(p.v_cache) + kvh * pairs;
    uint32_t row_words = p.kv_dim / 2u;
    for (uint32_t p0 = begin + wv * GROUP; p0 < end; p0 += NW * GROUP) {
        uint32_t kw[GROUP][KP];
        uint32_t vw[GROUP][KP];
        uint32_t r = p0 % p.ring;
#pragma unroll
        for (uint32_t j = 0u; j < GROUP; j++) {
            uint64_t row = (uint64_t)r * row_words;
            bool live_row = p0 + j < end;
#pragma unroll
            for (uint32_t k = 0u; k < KP; k++) {
                kw[j][k] = 0u;
                vw[j][k] = 0u;
                if (k < kp) {
                    uint32_t w = lane + WAVE_SIZE * k;
                    if (live_row && w < pairs) {
                        kw[j][k] = kc[row + w];
                        vw[j][k] = vc[row + w];
                    }
                }
            }
            r = r + 1u == p.ring ? 0u : r + 1u;
        }
#pragma unroll
        for (uint32_t i = 0u; i < TQ; i++) {
            float s[GROUP];
            float mx = m[i];
#pragma unroll
            for (uint32_t j = 0u; j < GROUP; j++) {
                float part = 0.0f;
#pragma unroll
                for (uint32_t k = 0u; k < KP; k++) {
                    if (k < kp) {
                        part = dev_fmaf(f16_bits_to_f32((uint16_t)kw[j][k]), qx[i][k], part);
                        part = dev_fmaf(f16_bits_to_f32((uint16_t)(kw[j][k] >> 16)), qy[i][k],
                                        part);
                    }
                }
                float dot = wave_sum(part);
                uint32_t pp = p0 + j;
                s[j] = pp >= lo[i] && pp < hi[i] ? dot * p.scale : -__builtin_inff();
                mx = dev_fmaxf(mx, s[j]);
            }
            if (wave_uniform(__builtin_bit_cast(uint32_t, mx)) != 0xff800000u) {
                float alpha = dev_expf(m[i] - mx); // 0 while m = -inf
                l[i] *= alpha;
#pragma unroll
                for (uint32_t k = 0u; k < KP; k++) {
                    ax[i][k] *= alpha;
                    ay[i][k] *= alpha;
                }
#pragma unroll
                for (uint32_t j = 0u; j < GROUP; j++) {
                    float e = dev_expf(s[j] - mx); // 0 outside the token's range
                    l[i] += e;
#pragma unroll
                    for (uint32_t k = 0u; k < KP; k++) {
                        if (k < kp) {
                            ax[i][k] = dev_fmaf(e, f16_bits_to_f32((uint16_t)vw[j][k]), ax[i][k]);
                            ay[i][k] =
                                dev_fmaf(e, f16_bits_to_f32((uint16_t)(vw[j][k] >> 16)), ay[i][k]);
                        }
                    }
                }
                m[i] = mx;
            }
        }
    }
#pragma unroll
    for (uint32_t i = 0u; i < TQ; i++) {
        if (lane == 0u) {
            sh.m[wv][i] = m[i];
            sh.l[wv][i] = l[i];
        }
#pragma unroll
        for (uint32_t k = 0u; k < KP; k++) {
            uint32_t w = lane + WAVE_SIZE * k;
            if (w < pairs) {
                sh.acc[wv][i][2u * w] = ax[i][k];
                sh.acc[wv][i][2u * w + 1u] = ay[i][k];
            }
        }
    }
    block_barrier();
    uint32_t tid = thread_id_x();
    float sink = p.sinks != 0u ? dev_ptr<const float>(p.sinks)[h] : 0.0f;
    for (uint32_t i = 0u; i < TQ; i++) {
        if (t0 + i >= p.n_tokens) {
            break;
        }
        float big = -__builtin_inff();
#pragma unroll
        for (uint32_t b = 0u; b < NW; b++) {
            big = sh.l[b][i] > 0.0f ? dev_fmaxf(big, sh.m[b][i]) : big;
        }
        float e[NW];
        float total = 0.0f;
#pragma unroll
        for (uint32_t b = 0u; b < NW; b++) {
            e[b] = sh.l[b][i] > 0.0f ? dev_expf(sh.m[b][i] - big) : 0.0f;
            total += sh.l[b][i] * e[b];
        }
        float ms = 1.0f;
        if (p.sinks != 0u) {
            if (sink > big) {
                ms = big == -__builtin_inff() ? 0.0f : dev_expf(big - sink);
                total = total * ms + 1.0f;
            } else {
                total += dev_expf(sink - big);
            }
        }
        float inv = total == 0.0f ? 0.0f : ms / total;
        float* o = dev_ptr<float>(p.out) + (uint64_t)(t0 + i) * q_dim + h * hd;
        for (uint32_t d = tid; d < hd; d += WG) {
            float v = 0.0f;
#pragma unroll
            for (uint32_t b = 0u; b < NW; b++) {
                v = dev_fmaf(e[b], sh.acc[b][i][d], v);
            }
            o[d] = v * inv;
        }
    }
}

// Merges a row's runs (attention_split's partials): with M the largest
// maximum of a non-empty run, out = sum o_c e^(m_c - M) / sum l_c e^(m_c - M)
// in f32, the sink folded in as the unsplit kernel does. Empty runs (l_c
// = 0, past a short span) weigh nothing.
template <uint32_t WG, uint32_t DIMS, bool OUT_Q8>
DEV void attention_combine_run(const AttentionPush& p, float* weight, float* red) {
    uint32_t g = wg_linear();
    if (g >= p.n_tokens * p.n_head) {
        return; // the whole workgroup
    }
    uint32_t tid = thread_id_x();
    uint32_t hd = p.head_dim;
    const float* part = dev_ptr<const float>(p.partials);
    uint64_t ml = (uint64_t)p.n_tokens * p.n_head * p.n_split * hd;
    uint32_t first = g * p.n_split;
    // Thread c < n_split (<= WG) takes run c's maximum, sum and weight, so
    // the outputs are then read with independent loads.
    float mc = -__builtin_inff();
    float lc = 0.0f;
    if (tid < p.n_split) {
        lc = part[ml + 2u * (first + tid) + 1u];
        mc = lc > 0.0f ? part[ml + 2u * (first + tid)] : mc;
    }
    float m = block_max_f32<WG>(mc, red);
    float w = lc > 0.0f ? libm_expf(mc - m) : 0.0f;
    weight[tid] = w;
    float l = block_sum_f32<WG>(lc * w, red); // its barrier publishes weight[]
    float acc[DIMS];
#pragma unroll
    for (uint32_t i = 0u; i < DIMS; i++) {
        acc[i] = 0.0f;
    }
    for (uint32_t c = 0u; c < p.n_split; c++) {
        float wc = weight[c];
#pragma unroll
        for (uint32_t i = 0u; i < DIMS; i++) {
            uint32_t d = tid + i * WG;
            if (d < hd) {
                acc[i] = dev_fmaf(part[(uint64_t)(first + c) * hd + d], wc, acc[i]);
            }
        }
    }
    fold_sink(p, g % p.n_head, m, l, acc);
    write_output<WG, DIMS, OUT_Q8>(p, g / p.n_head, g % p.n_head, l, acc);
}

} // namespace ops

// The prefill kernel's occupancy target: left alone, the scheduler issues
// all eight shared-memory reads of a 32-dim step of the dot ahead and needs
// 111-113 VGPRs (12 waves per SIMD with 1536 VGPRs per lane, 8 with 1024);
// asked for more waves it takes 74 with otherwise the same instructions:
// 16 waves (the hardware maximum) where the SIMD has 1536 VGPRs per lane
// (gfx1100, gfx1101, gfx1151, gfx12), 12 where it has 1024 (gfx1102,
// gfx1150, RDNA1/2: 16 would need 64 and spill). The staged decode kernels
// are held to 2 workgroups per WGP by their shared memory anyway.
#if RF_AMDGPU && (defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1151__) ||          \
                  defined(__GFX12__))
#define ATT_OPS_PREFILL_OCCUPANCY __attribute__((amdgpu_waves_per_eu(16)))
#elif RF_AMDGPU
#define ATT_OPS_PREFILL_OCCUPANCY __attribute__((amdgpu_waves_per_eu(12)))
#else
#define ATT_OPS_PREFILL_OCCUPANCY
#endif

#define ATT_OPS_KERNEL(name, wg, dims, stage, q8, split, occupancy)                                \
    KERNEL LAUNCH_BOUNDS(wg) occupancy void name(AttentionPush p) {                                \
        __shared__ ops::AttShared<wg, dims, stage> sh;                                             \
        ops::attention_run<wg, dims, stage, q8, split>(p, sh);                                     \
    }
ATT_OPS_KERNEL(attention, 64u, 4u, false, false, false, ATT_OPS_PREFILL_OCCUPANCY)
ATT_OPS_KERNEL(attention_staged, 128u, 2u, true, false, false, )
ATT_OPS_KERNEL(attention_staged_q8, 128u, 2u, true, true, false, )
ATT_OPS_KERNEL(attention_split, 128u, 2u, true, false, true, )
#undef ATT_OPS_KERNEL

KERNEL LAUNCH_BOUNDS(128u) void attention_decode(AttentionPush p) {
    __shared__ ops::DecodeShared<128u, 2u> sh;
    ops::attention_decode_run<128u, 2u>(p, sh);
}
KERNEL LAUNCH_BOUNDS(128u) void attention_decode_wide(AttentionPush p) {
    __shared__ ops::DecodeShared<128u, 4u> sh;
    ops::attention_decode_run<128u, 4u>(p, sh);
}
KERNEL LAUNCH_BOUNDS(128u) void attention_rows(AttentionPush p) {
    __shared__ ops::RowsShared<128u, 2u> sh;
    ops::attention_rows_run<128u, 2u>(p, sh);
}
KERNEL LAUNCH_BOUNDS(128u) void attention_rows_wide(AttentionPush p) {
    __shared__ ops::RowsShared<128u, 4u> sh;
    ops::attention_rows_run<128u, 4u>(p, sh);
}
KERNEL LAUNCH_BOUNDS(128u) void attention_combine(AttentionPush p) {
    __shared__ float weight[128u];
    __shared__ float red[128u / WAVE_SIZE];
    ops::attention_combine_run<128u, 2u, false>(p, weight, red);
}
KERNEL LAUNCH_BOUNDS(128u) void attention_combine_q8(AttentionPush p) {
    __shared__ float weight[128u];
    __shared__ float red[128u / WAVE_SIZE];
    ops::attention_combine_run<128u, 2u, true>(p, weight, red);
}
