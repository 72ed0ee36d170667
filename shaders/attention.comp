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
// subtracted at the end); V dequantized (d * q, as ggml's to_float) and
// accumulated in f32. Where the CPU walks positions in order (a new maximum
// rescales the output), a chunk of WG_SIZE positions is taken at once, as
// SPLIT does: the chunk's maximum, each position's weight e^(s - m)
// computed once by the invocation that scored it, the output rescaled once
// per chunk and one fma chain over the chunk per dimension. Both sum in
// f32, so they differ by f32 rounding only; the in-order walk's exp and
// branch per position and invocation were nearly all of lavapipe's prefill
// over a quantized cache (about 3 s a 512-token step at 4k positions).
//
// Only narrow subgroups (below 32 lanes: lavapipe) run this shader; wide
// ones take attention_decode, attention_rows or attention_cm (gpu::lower).
// lavapipe loads memory lane by lane, a loop per load whatever its width,
// so the whole-chunk paths (F32_TILES, the quantized cache's) read Q, the
// weights and the reductions' slots as vec4s and cache rows in the widest
// units their alignment allows; loads, not arithmetic, set their cost.
#version 460
#extension GL_GOOGLE_include_directive : require
#ifdef SPLIT
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
#if defined(F32_TILES) || defined(KV_QUANTIZED)
// Whole-chunk paths (F32_TILES, the quantized cache's): Q (f32, or the
// Q8_0 quants) and the chunk's weights as vec4s, and the workgroup
// reductions' slots. lavapipe reads shared memory lane by lane, a loop
// per load whatever its width, so these paths read 4 values a load.
shared vec4 qv[MAX_HEAD_DIM / 4];
shared vec4 wv[WG_SIZE / 4];
shared vec4 red4[WG_SIZE / 4];

// The workgroup's maximum of `v`, returned to every invocation (as
// common.glsl's wg_max). Call from uniform control flow.
float chunk_max(float v) {
    v = subgroupMax(v);
    if (gl_NumSubgroups == 1u) {
        return v;
    }
    if (subgroupElect()) {
        red4[gl_SubgroupID / 4u][gl_SubgroupID % 4u] = v;
    }
    memoryBarrierShared();
    barrier();
    float s = -1.0 / 0.0;
    for (uint j = 0u; 4u * j < gl_NumSubgroups; j++) {
        vec4 r = red4[j];
        for (uint c = 0u; c < 4u; c++) {
            if (4u * j + c < gl_NumSubgroups) {
                s = max(s, r[c]);
            }
        }
    }
    memoryBarrierShared();
    barrier();
    return s;
}

// The workgroup's sum of `v`, returned to every invocation: the subgroups'
// sums added in order, as common.glsl's wg_sum.
float chunk_sum(float v) {
    v = subgroupAdd(v);
    if (gl_NumSubgroups == 1u) {
        return v;
    }
    if (subgroupElect()) {
        red4[gl_SubgroupID / 4u][gl_SubgroupID % 4u] = v;
    }
    memoryBarrierShared();
    barrier();
    float s = 0.0;
    for (uint j = 0u; 4u * j < gl_NumSubgroups; j++) {
        vec4 r = red4[j];
        for (uint c = 0u; c < 4u; c++) {
            if (4u * j + c < gl_NumSubgroups) {
                s += r[c];
            }
        }
    }
    memoryBarrierShared();
    barrier();
    return s;
}
#endif
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
#ifdef KV_Q4_0
        // Quads i and i + 4 are the low and high nibbles of the same two
        // words: each word read once (lavapipe loads lane by lane).
        vec4 kq[8];
        for (uint i = 0u; i < 4u; i++) {
            uint w = uint(c.v[bw + 1u + 2u * i]) | (uint(c.v[bw + 2u + 2u * i]) << 16);
            kq[i] = vec4(float(w & 15u), float((w >> 8u) & 15u), float((w >> 16u) & 15u), float((w >> 24u) & 15u));
            kq[i + 4u] = vec4(float((w >> 4u) & 15u), float((w >> 12u) & 15u), float((w >> 20u) & 15u),
                              float(w >> 28u));
        }
#endif
        for (uint i = 0u; i < 8u; i++) {
#ifdef KV_Q4_0
            vec4 k = kq[i];
#else
            vec4 k = kv_quants4(c, bw, i);
#endif
            vec4 qq = qv[b * 8u + i];
            // Integers of at most 4 * 128 * 127: exact in f32.
            float s = k.x * qq.x + k.y * qq.y + k.z * qq.z + k.w * qq.w;
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

#ifdef F32_TILES
// q . k for the K row starting at word `kw`, one fused multiply-add per
// dimension in order (ggml's tiled path); Q from qv, 4 values a read (its
// last vec4 half padding where hd is 2 past a multiple of 4).
float dot_seq(uint kw, uint hd) {
    float s = 0.0;
    uint nq = hd / 4u;
    for (uint j = 0u; j < nq; j++) {
        vec4 qq = qv[j];
        vec2 k0 = unpackHalf2x16(K_WORD(kw, 2u * j));
        vec2 k1 = unpackHalf2x16(K_WORD(kw, 2u * j + 1u));
        s = fma(k0.x, qq.x, s);
        s = fma(k0.y, qq.y, s);
        s = fma(k1.x, qq.z, s);
        s = fma(k1.y, qq.w, s);
    }
    if (hd % 4u != 0u) {
        vec2 k = unpackHalf2x16(K_WORD(kw, 2u * nq));
        vec2 qq = qv[nq].xy;
        s = fma(k.x, qq.x, s);
        s = fma(k.y, qq.y, s);
    }
    return s;
}

// dot_seq for a K row starting at 16-byte unit `kq` (hd a multiple of 8):
// 8 values a load, the same chain.
float dot_seq8(uint kq, uint hd) {
    U4s kc = U4s(pc.k_cache);
    float s = 0.0;
    for (uint j = 0u; j < hd / 8u; j++) {
        uvec4 kk = kc.v[kq + j];
        vec4 q0 = qv[2u * j];
        vec4 q1 = qv[2u * j + 1u];
        vec2 k = unpackHalf2x16(kk.x);
        s = fma(k.x, q0.x, s);
        s = fma(k.y, q0.y, s);
        k = unpackHalf2x16(kk.y);
        s = fma(k.x, q0.z, s);
        s = fma(k.y, q0.w, s);
        k = unpackHalf2x16(kk.z);
        s = fma(k.x, q1.x, s);
        s = fma(k.y, q1.y, s);
        k = unpackHalf2x16(kk.w);
        s = fma(k.x, q1.z, s);
        s = fma(k.y, q1.w, s);
    }
    return s;
}
#endif

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
        for (uint j = 0u; j < 32u; j += 4u) {
            vec4 v = vec4(roundEven(q.v[tid * 32u + j] * id), roundEven(q.v[tid * 32u + j + 1u] * id),
                          roundEven(q.v[tid * 32u + j + 2u] * id), roundEven(q.v[tid * 32u + j + 3u] * id));
            qv[tid * 8u + j / 4u] = v;
            sum += v.x;
            sum += v.y;
            sum += v.z;
            sum += v.w;
        }
        q_d[tid] = round_f16(d);
        q_ds[tid] = round_f16(d) * sum;
    }
#else
#ifdef F32_TILES
    for (uint j = tid; 4u * j < hd; j += WG_SIZE) {
        uint d = 4u * j;
        // hd is even: a vec4 holds 4 values or 2 and padding.
        vec4 v = vec4(q.v[d], q.v[d + 1u], 0.0, 0.0);
        if (d + 2u < hd) {
            v.z = q.v[d + 2u];
            v.w = q.v[d + 3u];
        }
        qv[j] = v;
    }
#else
    for (uint d = tid; d < hd; d += WG_SIZE) {
        qs[d] = round_f16(q.v[d]);
    }
#endif
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
    // lavapipe loads lane by lane, a loop per load whatever its width, so
    // loads rather than arithmetic set this path's cost: where rows are
    // 16-byte units (`wide`: hd and kv_dim multiples of 8, the cache
    // 16-byte aligned) K and V are read 8 values a load, invocation
    // tid < hd / 8 owning dimensions 8 tid .. 8 tid + 7; else 2 a load,
    // invocation tid owning the pairs tid + j * WG_SIZE. Each dimension is
    // its own chain either way.
    bool wide = hd % 8u == 0u && pc.kv_dim % 8u == 0u && ((pc.k_cache | pc.v_cache) & 15ul) == 0ul;
    uint row_quads = pc.kv_dim / 8u;
    uint head_quad = kvh * hd / 8u;
    vec4 acc8[2];
    acc8[0] = vec4(0.0);
    acc8[1] = vec4(0.0);
    vec2 acc2[ATT_DIMS / 2];
    for (uint j = 0u; j < ATT_DIMS / 2u; j++) {
        acc2[j] = vec2(0.0);
    }
    for (uint base = first - first % WG_SIZE; base < n_kv; base += WG_SIZE) {
        uint p = base + tid;
        bool seen = p >= first && p < n_kv;
        float s = -1.0 / 0.0;
        if (seen) {
            uint r = p % pc.ring;
            s = (wide ? dot_seq8(r * row_quads + head_quad, hd) : dot_seq(r * row_words + head_word, hd)) * pc.scale;
        }
        float m_new = max(m, chunk_max(s));
        float w = seen ? exp(s - m_new) : 0.0;
        wv[tid / 4u][tid % 4u] = w;
        float alpha = exp(m - m_new); // 0 while m = -inf
        l = l * alpha + chunk_sum(w);
        m = m_new;
        memoryBarrierShared();
        barrier();
        // The ring's row of base + pp is stepped rather than taken modulo
        // per position: lavapipe divides lane by lane.
        if (wide) {
            if (tid < hd / 8u) {
                U4s vc = U4s(pc.v_cache);
                vec4 a0 = acc8[0] * alpha;
                vec4 a1 = acc8[1] * alpha;
                uint row = base % pc.ring;
                for (uint p4 = 0u; p4 < WG_SIZE / 4u; p4++) {
                    vec4 w4 = wv[p4];
                    for (uint c = 0u; c < 4u; c++) {
                        if (w4[c] != 0.0) {
                            uvec4 vv = vc.v[row * row_quads + head_quad + tid];
                            a0 = fma(vec4(w4[c]), vec4(unpackHalf2x16(vv.x), unpackHalf2x16(vv.y)), a0);
                            a1 = fma(vec4(w4[c]), vec4(unpackHalf2x16(vv.z), unpackHalf2x16(vv.w)), a1);
                        }
                        row = row + 1u == pc.ring ? 0u : row + 1u;
                    }
                }
                acc8[0] = a0;
                acc8[1] = a1;
            }
        } else {
            for (uint j = 0u; j < ATT_DIMS / 2u; j++) {
                uint pr = tid + j * WG_SIZE;
                if (2u * pr < hd) {
                    vec2 a = acc2[j] * alpha;
                    uint row = base % pc.ring;
                    for (uint p4 = 0u; p4 < WG_SIZE / 4u; p4++) {
                        vec4 w4 = wv[p4];
                        for (uint c = 0u; c < 4u; c++) {
                            if (w4[c] != 0.0) {
                                vec2 vv = unpackHalf2x16(V_WORD(row * row_words + head_word, pr));
                                a = fma(vec2(w4[c]), vv, a);
                            }
                            row = row + 1u == pc.ring ? 0u : row + 1u;
                        }
                    }
                    acc2[j] = a;
                }
            }
        }
        memoryBarrierShared();
        barrier();
    }
    // Back to the layout of the other paths (dimension tid + i * WG_SIZE
    // in acc[i]) through qs, which this path does not otherwise use.
    if (wide) {
        if (tid < hd / 8u) {
            for (uint e = 0u; e < 4u; e++) {
                qs[8u * tid + e] = acc8[0][e];
                qs[8u * tid + 4u + e] = acc8[1][e];
            }
        }
    } else {
        for (uint j = 0u; j < ATT_DIMS / 2u; j++) {
            uint pr = tid + j * WG_SIZE;
            if (2u * pr < hd) {
                qs[2u * pr] = acc2[j].x;
                qs[2u * pr + 1u] = acc2[j].y;
            }
        }
    }
    memoryBarrierShared();
    barrier();
    for (uint i = 0u; i < ATT_DIMS; i++) {
        uint d = tid + i * WG_SIZE;
        if (d < hd) {
            acc[i] = qs[d];
        }
    }
#elif defined(KV_QUANTIZED)
    // Rows of kv_dim / 32 blocks; this head starts kvh * hd / 32 blocks in.
    uint row_blocks = pc.kv_dim / 32u;
    uint head_block = kvh * hd / 32u;
    // Invocation `tid` < hd / 4 owns head dimensions 4 tid .. 4 tid + 3:
    // values 4i .. 4i + 3 of one block, read with the block's scale in
    // three 16-bit loads (lavapipe loads lane by lane, so loads rather
    // than arithmetic set this loop's cost).
    U16s vcache = U16s(pc.v_cache);
    bool owner = tid < hd / 4u;
    uint vblk = head_block + tid / 8u;
    uint vquad = tid % 8u;
    vec4 acc4 = vec4(0.0);
    for (uint base = first; base < n_kv; base += WG_SIZE) {
        // The chunk at once (see the top): every position of it is scored
        // (a chunk is never empty, so m_new is finite).
        uint p = base + tid;
        bool seen = p < n_kv;
        float s = seen ? dot_kv((p % pc.ring) * row_blocks + head_block, hd) * pc.scale : -1.0 / 0.0;
        float m_new = max(m, chunk_max(s));
        float w = seen ? exp(s - m_new) : 0.0;
        wv[tid / 4u][tid % 4u] = w;
        float alpha = exp(m - m_new); // 0 while m = -inf
        l = l * alpha + chunk_sum(w);
        m = m_new;
        memoryBarrierShared();
        barrier();
        if (owner) {
            uint cnt = min(uint(WG_SIZE), n_kv - base);
            vec4 a = acc4 * alpha;
            // The ring's row of base + pp, stepped rather than taken
            // modulo per position: lavapipe divides lane by lane.
            uint row = base % pc.ring;
            for (uint p4 = 0u; 4u * p4 < cnt; p4++) {
                vec4 w4 = wv[p4];
                for (uint c = 0u; c < 4u; c++) {
                    // Positions past n_kv are never read (their rows may
                    // hold anything).
                    if (4u * p4 + c < cnt) {
                        uint bw = (row * row_blocks + vblk) * KV_BLOCK_WORDS;
                        vec4 k = kv_quants4(vcache, bw, vquad);
#ifdef KV_Q4_0
                        k -= 8.0;
#endif
                        // d * q, as ggml's to_float (and kv_value) round it.
                        a = fma(k * kv_scale(vcache, bw), vec4(w4[c]), a);
                    }
                    row = row + 1u == pc.ring ? 0u : row + 1u;
                }
            }
            acc4 = a;
        }
        memoryBarrierShared();
        barrier();
    }
    // Back to the layout of the other paths (dimension tid + i * WG_SIZE
    // in acc[i]) through qs, which this path does not otherwise use.
    if (owner) {
        qs[4u * tid] = acc4.x;
        qs[4u * tid + 1u] = acc4.y;
        qs[4u * tid + 2u] = acc4.z;
        qs[4u * tid + 3u] = acc4.w;
    }
    memoryBarrierShared();
    barrier();
    for (uint i = 0u; i < ATT_DIMS; i++) {
        uint d = tid + i * WG_SIZE;
        if (d < hd) {
            acc[i] = qs[d];
        }
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
