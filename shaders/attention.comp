// Causal GQA attention over the f16 KV cache, one workgroup per (token,
// head), with ggml's CPU flash-attention numerics (as the CPU reference):
//   - Q rounded to f16; each q.k summed like ggml_vec_dot_f16 on AVX2: 32
//     lanes accumulated with fma over 32-element steps, reduced
//     (a0 + a2) + (a1 + a3) per 8 lanes, then halves, then pairs; score =
//     dot * scale;
//   - online softmax in position order: a new maximum rescales the output;
//   - the output accumulated in f16 (f16 values held in f32), rounded after
//     every fused multiply-add and every rescale.
// Token t attends to cache positions 0 .. pos0 + t (the last `window` of
// them in a sliding-window layer), with pos0 read from the step-input region, so the grid depends only on the graph shape. Positions
// are taken a chunk at a time; each invocation scores one position of the
// chunk, then every invocation walks the chunk in order for its own head
// dimensions (up to ATT_DIMS), repeating the max/sum recurrence so all agree
// bit for bit.
//
// STAGE_KV (the decode variant: a step has few (token, head) workgroups, so
// nothing hides a global load in the serial walk) first copies the chunk's
// K and V rows into shared memory: 16-byte loads, all of them issued before
// the first store (a fixed count of STAGE_LOADS per invocation), so the
// chunk costs one memory latency rather than one per row. It needs the head
// size to be a multiple of 8 and the cache blocks 16-byte aligned (the host
// checks). Without it (prefill: thousands of workgroups hide the latency,
// and the staging buffers would cut occupancy) rows are read in place.
//
// OUT_Q8 (decode, when the output projection is the integer mat-vec) also
// writes the head's output Q8-packed (q8_packed.glsl), so that projection
// needs no rounding pass; the head size is then a multiple of 32.
//
// SPLIT (with STAGE_KV; rocmforge_core::gpu::split) runs n_split
// workgroups per (token, head) row, each over one run of consecutive
// positions, and writes its running maximum, sum and unnormalised output
// to the partials; the row's last run to finish merges them
// (attention_merge.glsl), or attention_combine.comp where pc.counters is 0.
// Sinks, the normalisation and the Q8-packed output are the merge's. Its chunks are taken whole
// in f32 (the chunk's maximum, every weight at once, one multiply-add
// chain per dimension) rather than walked position by position with f16
// rounding: the in-order walk's serial chain, two f16 roundings and an exp
// per position, was most of a decode step at depth (docs/measurements.md),
// and f32 sums are closer to the exact result than ggml's f16 ones.
//
// F32_TILES (prefill steps of at least 64 tokens, without STAGE_KV) follows
// ggml's tiled CPU path for such steps instead, as the CPU reference does:
// Q kept in f32, each q.k one fused multiply-add per dimension in order,
// and per chunk of 64 positions aligned to position 0 (ggml's KV tiles) the
// online softmax moves once, with the chunk's weights accumulated in f32.
//
// KV_Q8_0 / KV_Q4_0 (a quantized cache, kv_cache.glsl; neither STAGE_KV nor
// F32_TILES) follow the CPU reference's attention over such a cache, as
// ggml's CPU flash attention does (rocmforge-cpu's kernels/attention/
// typed.rs): Q quantized to Q8_0 by ggml's x86 quantizer; each q.k ggml's
// AVX2 vec_dot of K's type with Q8_0 (integer sums of 4 values per lane, one
// fma per block and lane, the lanes summed as hsum does; Q4_0 takes its
// unsigned nibbles on two chains of alternate blocks, with 8 * d * sum(q)
// subtracted at the end); V dequantized and accumulated in f32 (one fma a
// value, a plain multiply to rescale).
#version 460
#extension GL_GOOGLE_include_directive : require
#if defined(SPLIT) || defined(F32_TILES)
#define NEEDS_REDUCE
#endif
#include "common.glsl"
#include "kv_cache.glsl"
#if defined(OUT_Q8) || defined(KV_QUANTIZED)
#include "q8_packed.glsl"
#endif
#if defined(KV_QUANTIZED) && (defined(STAGE_KV) || defined(F32_TILES) || defined(OUT_Q8))
#error "a quantized cache takes the plain variant only"
#endif

layout(local_size_x = WG_SIZE) in;

#ifndef ATT_DIMS
#define ATT_DIMS 4
#endif
#define MAX_HEAD_DIM (ATT_DIMS * WG_SIZE)

#include "attention_push.glsl"
#ifdef SPLIT
#define MERGE_DIMS ATT_DIMS
#include "attention_merge.glsl"
#endif

shared float qs[MAX_HEAD_DIM];
shared float scores[WG_SIZE];
#ifdef STAGE_KV
// A chunk's K and V rows (pairs of halves), row stride hd / 2 + 1 words so
// that invocations reading different rows hit different banks. 28 KiB in
// all, within the 32 KiB that lavapipe offers.
#define STAGE_WORDS 3584
#define STAGE_LOADS 16
shared uint k_stage[STAGE_WORDS];
shared uint v_stage[STAGE_WORDS];
// Word w of the K / V row starting at word `row` (of the stage here, of the
// layer's cache block otherwise).
#define K_WORD(row, w) k_stage[(row) + (w)]
#define V_WORD(row, w) v_stage[(row) + (w)]
#else
#define K_WORD(row, w) U32s(pc.k_cache).v[(row) + (w)]
#define V_WORD(row, w) U32s(pc.v_cache).v[(row) + (w)]
#endif

#ifdef KV_QUANTIZED
// Q's blocks: qs holds the quants (as floats), q_d the scales (f16 values);
// Q4_0 also d * sum(q) per block.
shared float q_d[MAX_HEAD_DIM / 32];
shared float q_ds[MAX_HEAD_DIM / 32];

// q . k for the K head starting at block `blk` of the layer's K block, as
// the CPU's vec_dot (see the top).
float dot_kv(uint blk, uint hd) {
    U16s c = U16s(pc.k_cache);
    float even[8];
    float odd[8];
    for (uint i = 0u; i < 8u; i++) {
        even[i] = 0.0;
        odd[i] = 0.0;
    }
    // Summed without fma, as the CPU does.
    precise float off_even = 0.0;
    precise float off_odd = 0.0;
    for (uint b = 0u; b < hd / 32u; b++) {
        uint bw = (blk + b) * KV_BLOCK_WORDS;
        float dk = kv_scale(c, bw);
        float d = dk * q_d[b];
        for (uint i = 0u; i < 8u; i++) {
            vec4 k = kv_quants4(c, bw, i);
            uint at = b * 32u + 4u * i;
            // Integers of at most 4 * 128 * 127: exact in f32.
            float s = k.x * qs[at] + k.y * qs[at + 1u] + k.z * qs[at + 2u] + k.w * qs[at + 3u];
#ifdef KV_Q4_0
            if ((b & 1u) != 0u) {
                odd[i] = fma(d, s, odd[i]);
            } else {
                even[i] = fma(d, s, even[i]);
            }
#else
            even[i] = fma(d, s, even[i]);
#endif
        }
#ifdef KV_Q4_0
        if ((b & 1u) != 0u) {
            off_odd = off_odd + dk * q_ds[b];
        } else {
            off_even = off_even + dk * q_ds[b];
        }
#endif
    }
#ifdef KV_Q4_0
    for (uint i = 0u; i < 8u; i++) {
        even[i] += odd[i];
    }
#endif
    float sum = ((even[0] + even[4]) + (even[2] + even[6])) + ((even[1] + even[5]) + (even[3] + even[7]));
#ifdef KV_Q4_0
    sum -= 8.0 * (off_even + off_odd);
#endif
    return sum;
}

// One position of the in-order walk over a quantized V: score `s`, V head
// starting at block `blk`; f32 accumulators, as the CPU.
void walk_kv(float s, uint blk, uint hd, inout float m, inout float l, inout float acc[ATT_DIMS]) {
    U16s c = U16s(pc.v_cache);
    float ms = 1.0;
    float vs = 1.0;
    bool rescale = s > m;
    if (rescale) {
        ms = isinf(m) ? 0.0 : exp(m - s);
        m = s;
    } else {
        vs = exp(s - m);
    }
    for (uint i = 0u; i < ATT_DIMS; i++) {
        uint d = gl_LocalInvocationID.x + i * WG_SIZE;
        if (d < hd) {
            float a = rescale ? acc[i] * ms : acc[i];
            float x = kv_value(c, (blk + d / 32u) * KV_BLOCK_WORDS, d % 32u);
            acc[i] = fma(x, vs, a);
        }
    }
    l = rescale ? fma(l, ms, vs) : l + vs;
}
#endif

// q . k for the K row starting at word `kw` (pairs of halves), in ggml's
// AVX2 order; a tail past a multiple of 32 is added in order.
float dot_ggml(uint kw, uint hd) {
    float acc[32];
    for (uint l = 0u; l < 32u; l++) {
        acc[l] = 0.0;
    }
    uint body = hd - hd % 32u;
    for (uint i = 0u; i < body; i += 32u) {
        for (uint l = 0u; l < 32u; l += 2u) {
            vec2 k = unpackHalf2x16(K_WORD(kw, (i + l) / 2u));
            acc[l] = fma(k.x, qs[i + l], acc[l]);
            acc[l + 1u] = fma(k.y, qs[i + l + 1u], acc[l + 1u]);
        }
    }
    float v[8];
    for (uint l = 0u; l < 8u; l++) {
        v[l] = (acc[l] + acc[16u + l]) + (acc[8u + l] + acc[24u + l]);
    }
    float s = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
    for (uint d = body; d < hd; d += 2u) {
        vec2 k = unpackHalf2x16(K_WORD(kw, d / 2u));
        s += k.x * qs[d];
        s += k.y * qs[d + 1u];
    }
    return s;
}

// q . k for the K row starting at word `kw`, one fused multiply-add per
// dimension in order (ggml's tiled path).
float dot_seq(uint kw, uint hd) {
    float s = 0.0;
    for (uint d = 0u; d < hd; d += 2u) {
        vec2 k = unpackHalf2x16(K_WORD(kw, d / 2u));
        s = fma(k.x, qs[d], s);
        s = fma(k.y, qs[d + 1u], s);
    }
    return s;
}

// One position of the in-order walk: score `s`, V row at word `vw`; updates
// the running max `m`, sum `l` and this invocation's f16 accumulators.
void walk(float s, uint vw, uint hd, inout float m, inout float l, inout float acc[ATT_DIMS]) {
    // Past a multiple of 32 dims ggml's V update is not fused.
    uint body = hd - hd % 32u;
    float ms = 1.0;
    float vs = 1.0;
    bool rescale = s > m;
    if (rescale) {
        ms = isinf(m) ? 0.0 : exp(m - s);
        m = s;
    } else {
        vs = exp(s - m);
    }
    for (uint i = 0u; i < ATT_DIMS; i++) {
        uint d = gl_LocalInvocationID.x + i * WG_SIZE;
        if (d < hd) {
            float a = rescale ? round_f16(acc[i] * ms) : acc[i];
            vec2 vv = unpackHalf2x16(V_WORD(vw, d / 2u));
            float x = (d & 1u) != 0u ? vv.y : vv.x;
            acc[i] = round_f16(d < body ? fma(x, vs, a) : a + x * vs);
        }
    }
    l = l * ms + vs;
}

void main() {
    uint g = wg_linear();
#ifdef SPLIT
    uint run = g % pc.n_split;
    g /= pc.n_split;
#endif
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
    // A sliding window skips what ggml masks: positions p with
    // pos - p >= window.
    uint first = (pc.window != 0u && n_kv > pc.window) ? n_kv - pc.window : 0u;
#ifdef SPLIT
    // This workgroup's run of the span first .. n_kv: runs of `per`
    // positions, the last one shorter; runs past the span are empty.
    uint span = n_kv - first;
    uint per = max(pc.split_min, (span + pc.n_split - 1u) / pc.n_split);
    bool in_span = run < (span + per - 1u) / per;
    first = in_span ? first + run * per : n_kv;
    n_kv = in_span ? min(n_kv, first + per) : n_kv;
#endif

    F32s q = F32s(pc.q + (uint64_t(t) * q_dim + h * hd) * 4u);
#ifdef KV_QUANTIZED
    // Q as Q8_0 blocks, one invocation each (ggml's x86 quantizer).
    if (tid < hd / 32u) {
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) {
            amax = max(amax, abs(q.v[tid * 32u + j]));
        }
        float d = div_rn(amax, 127.0);
        float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
        float sum = 0.0;
        for (uint j = 0u; j < 32u; j++) {
            float v = roundEven(q.v[tid * 32u + j] * id);
            qs[tid * 32u + j] = v;
            sum += v;
        }
        q_d[tid] = round_f16(d);
        q_ds[tid] = round_f16(d) * sum;
    }
#else
    for (uint d = tid; d < hd; d += WG_SIZE) {
#ifdef F32_TILES
        qs[d] = q.v[d];
#else
        qs[d] = round_f16(q.v[d]);
#endif
    }
#endif
    memoryBarrierShared();
    barrier();

    // Cache rows as u32 pairs of halves; this head starts kvh * hd halves in.
    uint row_words = pc.kv_dim / 2u;
    uint head_word = kvh * hd / 2u;

    float m = -1.0 / 0.0;
    float l = 0.0;
    float acc[ATT_DIMS];
    for (uint i = 0u; i < ATT_DIMS; i++) {
        acc[i] = 0.0;
    }
#ifdef STAGE_KV
    U4s kc = U4s(pc.k_cache);
    U4s vc = U4s(pc.v_cache);
    uint hw = hd / 2u;
    uint hq = hd / 8u; // 16-byte quads per row
    uint stride = hw + 1u;
    uint chunk = min(min(uint(WG_SIZE), STAGE_WORDS / stride), STAGE_LOADS * WG_SIZE / (2u * hq));
    uint row_quads = pc.kv_dim / 8u;
    uint head_quad = kvh * hq;
    for (uint base = first; base < n_kv; base += chunk) {
        uint cnt = min(chunk, n_kv - base);
        // Quads 0 .. cnt * hq - 1 are K's, the next cnt * hq V's.
        uint quads = cnt * hq;
        uvec4 r[STAGE_LOADS];
        for (uint j = 0u; j < STAGE_LOADS; j++) {
            uint i = tid + j * WG_SIZE;
            uint iv = i - quads;
            if (i < quads) {
                r[j] = kc.v[((base + i / hq) % pc.ring) * row_quads + head_quad + i % hq];
            } else if (iv < quads) {
                r[j] = vc.v[((base + iv / hq) % pc.ring) * row_quads + head_quad + iv % hq];
            }
        }
        for (uint j = 0u; j < STAGE_LOADS; j++) {
            uint i = tid + j * WG_SIZE;
            uint iv = i - quads;
            if (i < quads) {
                uint at = (i / hq) * stride + (i % hq) * 4u;
                k_stage[at] = r[j].x;
                k_stage[at + 1u] = r[j].y;
                k_stage[at + 2u] = r[j].z;
                k_stage[at + 3u] = r[j].w;
            } else if (iv < quads) {
                uint at = (iv / hq) * stride + (iv % hq) * 4u;
                v_stage[at] = r[j].x;
                v_stage[at + 1u] = r[j].y;
                v_stage[at + 2u] = r[j].z;
                v_stage[at + 3u] = r[j].w;
            }
        }
        memoryBarrierShared();
        barrier();
#ifdef SPLIT
        // The chunk at once, in f32: its maximum, each position's weight
        // e^(s - m) computed by the invocation that scored it, then one
        // multiply-add chain over the chunk per dimension.
        float s = tid < cnt ? dot_ggml(tid * stride, hd) * pc.scale : -1.0 / 0.0;
        float m_new = max(m, wg_max(s));
        float p = tid < cnt ? exp(s - m_new) : 0.0;
        scores[tid] = p;
        float alpha = exp(m - m_new); // 0 while m = -inf
        l = l * alpha + wg_sum(p);
        m = m_new;
        memoryBarrierShared();
        barrier();
        for (uint i = 0u; i < ATT_DIMS; i++) {
            uint d = tid + i * WG_SIZE;
            if (d < hd) {
                float a = acc[i] * alpha;
                for (uint pp = 0u; pp < cnt; pp++) {
                    vec2 vv = unpackHalf2x16(v_stage[pp * stride + d / 2u]);
                    a = fma(scores[pp], (d & 1u) != 0u ? vv.y : vv.x, a);
                }
                acc[i] = a;
            }
        }
#else
        if (tid < cnt) {
            scores[tid] = dot_ggml(tid * stride, hd) * pc.scale;
        }
        memoryBarrierShared();
        barrier();
        for (uint pp = 0u; pp < cnt; pp++) {
            walk(scores[pp], pp * stride, hd, m, l, acc);
        }
#endif
        memoryBarrierShared();
        barrier();
    }
#elif defined(F32_TILES)
    for (uint base = first - first % WG_SIZE; base < n_kv; base += WG_SIZE) {
        uint p = base + tid;
        bool seen = p >= first && p < n_kv;
        float s = seen ? dot_seq((p % pc.ring) * row_words + head_word, hd) * pc.scale : -1.0 / 0.0;
        float m_new = max(m, wg_max(s));
        float w = seen ? exp(s - m_new) : 0.0;
        scores[tid] = w;
        float alpha = exp(m - m_new); // 0 while m = -inf
        l = l * alpha + wg_sum(w);
        m = m_new;
        memoryBarrierShared();
        barrier();
        for (uint i = 0u; i < ATT_DIMS; i++) {
            uint d = tid + i * WG_SIZE;
            if (d < hd) {
                float a = acc[i] * alpha;
                for (uint pp = 0u; pp < WG_SIZE; pp++) {
                    uint at = ((base + pp) % pc.ring) * row_words + head_word;
                    if (scores[pp] != 0.0) {
                        vec2 vv = unpackHalf2x16(V_WORD(at, d / 2u));
                        a = fma(scores[pp], (d & 1u) != 0u ? vv.y : vv.x, a);
                    }
                }
                acc[i] = a;
            }
        }
        memoryBarrierShared();
        barrier();
    }
#elif defined(KV_QUANTIZED)
    // Rows of kv_dim / 32 blocks; this head starts kvh * hd / 32 blocks in.
    uint row_blocks = pc.kv_dim / 32u;
    uint head_block = kvh * hd / 32u;
    for (uint base = first; base < n_kv; base += WG_SIZE) {
        uint p = base + tid;
        if (p < n_kv) {
            scores[tid] = dot_kv((p % pc.ring) * row_blocks + head_block, hd) * pc.scale;
        }
        memoryBarrierShared();
        barrier();
        uint cnt = min(uint(WG_SIZE), n_kv - base);
        for (uint pp = 0u; pp < cnt; pp++) {
            walk_kv(scores[pp], ((base + pp) % pc.ring) * row_blocks + head_block, hd, m, l, acc);
        }
        memoryBarrierShared();
        barrier();
    }
#else
    for (uint base = first; base < n_kv; base += WG_SIZE) {
        uint p = base + tid;
        if (p < n_kv) {
            scores[tid] = dot_ggml((p % pc.ring) * row_words + head_word, hd) * pc.scale;
        }
        memoryBarrierShared();
        barrier();
        uint cnt = min(uint(WG_SIZE), n_kv - base);
        for (uint pp = 0u; pp < cnt; pp++) {
            walk(scores[pp], ((base + pp) % pc.ring) * row_words + head_word, hd, m, l, acc);
        }
        memoryBarrierShared();
        barrier();
    }
#endif
#ifdef SPLIT
    uint idx = g * pc.n_split + run;
    PartialsC part = PartialsC(pc.partials);
    for (uint i = 0u; i < ATT_DIMS; i++) {
        uint d = tid + i * WG_SIZE;
        if (d < hd) {
            part.v[idx * hd + d] = acc[i];
        }
    }
    if (tid == 0u) {
        uint ml = pc.n_tokens * pc.n_head * pc.n_split * hd + 2u * idx;
        part.v[ml] = m;
        part.v[ml + 1u] = l;
    }
    if (pc.counters != 0ul) {
        merge_if_last(g);
    }
    return;
#endif
    // An attention sink joins the denominator after the positions, as
    // ggml folds it in: the accumulator is rescaled unrounded.
    if (pc.sinks != 0ul) {
        float s = F32s(pc.sinks).v[h];
        float ms = 1.0;
        float vs = 1.0;
        if (s > m) {
            ms = isinf(m) ? 0.0 : exp(m - s);
            for (uint i = 0u; i < ATT_DIMS; i++) {
                acc[i] *= ms;
            }
        } else {
            vs = exp(s - m);
        }
        l = l * ms + vs;
    }
    F32s o = F32s(pc.out_ + (uint64_t(t) * q_dim + h * hd) * 4u);
    float inv = l == 0.0 ? 0.0 : 1.0 / l;
    for (uint i = 0u; i < ATT_DIMS; i++) {
        uint d = tid + i * WG_SIZE;
        if (d < hd) {
            o.v[d] = acc[i] * inv;
#ifdef OUT_Q8
            qs[d] = acc[i] * inv;
#endif
        }
    }
#ifdef OUT_Q8
    // The head's blocks of 32, one invocation each, from shared memory (the
    // last reads of qs were before the loop's final barrier).
    memoryBarrierShared();
    barrier();
    if (tid < hd / 32u) {
        vec4 v[8];
        for (uint j = 0u; j < 8u; j++) {
            uint d = tid * 32u + j * 4u;
            v[j] = vec4(qs[d], qs[d + 1u], qs[d + 2u], qs[d + 3u]);
        }
        store_q8_packed(v, pc.q8, pc.q8_scales, (t * q_dim + h * hd) / 32u + tid);
    }
#endif
}
