// Attention over the f16 KV cache for the HIP backend, the kernels the
// lowering names on waves of 32 (rocmforge_core::gpu, `subgroup_decode`);
// the same computations as the GLSL kernels of the same names. Scores,
// weights and sums are f32 (the CPU reference keeps ggml's f16
// accumulator; tests/long_context.rs holds these to its tolerance).
//
// Kernels (argument block AttentionPush):
//   attention_decode      decode, one run of a (token, head) row's positions
//   attention_decode_wide per workgroup (grid n_tokens * n_head * n_split;
//                         rocmforge_core::gpu::split): waves stream cache
//                         rows, the run's maximum, sum and unnormalised
//                         output go to the partials; _wide past head size
//                         128;
//                         With p.counters set, the row's last run to
//                         finish merges the row as the combine does;
//   attention_combine     one workgroup per (token, head): merges the row's
//   attention_combine_q8  runs in f32, folds in the sink, normalises (and
//                         writes Q8-packed for the integer mat-vec), where
//                         the decode kernels do not (p.counters = 0);
//   attention_rows        prefill, 4 tokens of a head per workgroup sharing
//   attention_rows_wide   every cache row a wave loads; writes the output.
//
// The decode and rows kernels also read a quantized cache (K and V of one
// type, rocmforge_core::plan::KvType): attention_decode_q8_0,
// attention_decode_wide_q8_0, attention_rows_q8_0, attention_rows_wide_q8_0
// and the same four with _q4_0. Only the loads differ (KvF16, KvQ8_0,
// KvQ4_0 below); every sum is the f16 kernels'.

#include "ops_common.h"
#include "kv_cache.h"

namespace ops {

// An attention sink joins the denominator after the positions, as ggml
// folds it in: the accumulator is rescaled.
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

// attention_decode (shaders/attention_decode.comp): one run of positions
// per workgroup of WG threads; each wave takes its own groups of GROUP
// consecutive positions and reads their K and V rows straight from the
// cache, lane l holding head-dim pairs l + 32 k (k < KP), every word of the
// group loaded before the first is used. A position's score is the wave's
// sum of the lanes' partial dot products (a reduce-scatter leaves each
// lane one position's sum); the group's weights follow in f32, each
// computed by the lanes holding its score and shuffled to the others, then
// one multiply-add per pair and position. The waves' (maximum, sum,
// output) merge through shared memory into the run's partial.
// attention_decode holds up to 2 pairs a lane (head_dim <= 128),
// attention_decode_wide up to 4 (head_dim <= 256). Weights use dev_expf,
// not libm_expf: this kernel's sums are its own (f32), not the CPU's.
#define ATT_DECODE_GROUP 8u

template <uint32_t WG, uint32_t KP> struct DecodeShared {
    float m[WG / WAVE_SIZE];
    float l[WG / WAVE_SIZE];
    float acc[WG / WAVE_SIZE][2u * WAVE_SIZE * KP];
};

// A wave's walk over positions begin..end of a run, into its running
// maximum m, sum l and output (ax, ay). FK: the head's words per lane when
// every lane's FK words are in the head (head_dim == 64 FK), so nothing is
// masked; 0 for any other head size (kp words, some lanes idle). Groups
// that are whole and do not wrap the ring (all but at most two of a run)
// load without per-position checks, row after row from one address.
template <uint32_t WG, uint32_t KP, uint32_t FK, typename KV>
DEV void decode_walk(const AttentionPush& p, uint32_t begin, uint32_t end,
                     const typename KV::Unit* kc, const typename KV::Unit* vc,
                     const float (&qx)[KP], const float (&qy)[KP], float (&ax)[KP],
                     float (&ay)[KP], float& m, float& l) {
    constexpr uint32_t GROUP = ATT_DECODE_GROUP;
    constexpr uint32_t STEP = WG / WAVE_SIZE * GROUP;
    static_assert(GROUP == 8u, "wave_sum8_scattered");
    const uint32_t lane = lane_id();
    const uint32_t pairs = p.head_dim / 2u;
    const uint32_t kp = FK != 0u ? FK : (pairs + WAVE_SIZE - 1u) / WAVE_SIZE;
    const uint32_t row_units = KV::row_units(p.kv_dim);
    const uint32_t ring = p.ring;
    const uint32_t mine = wave_sum8_index(lane); // the position this lane scores
    // Word k of this lane in the head, and whether it is there.
    auto used = [&](uint32_t k) { return FK != 0u ? k < FK : k < kp; };
    auto in_head = [&](uint32_t k) { return FK != 0u || lane + WAVE_SIZE * k < pairs; };
    uint32_t p0 = begin + wave_id() * GROUP;
    uint32_t r = p0 % ring; // p0's ring row, carried from group to group
    for (; p0 < end; p0 += STEP) {
        uint32_t kw[GROUP][KP];
        uint32_t vw[GROUP][KP];
        if (p0 + GROUP <= end && r + GROUP <= ring) {
            uint64_t row = (uint64_t)r * row_units;
            // The lane's first word of row r, then one row further each time.
            const typename KV::Unit* kr = kc + row + lane;
            const typename KV::Unit* vr = vc + row + lane;
#pragma unroll
            for (uint32_t j = 0u; j < GROUP; j++) {
#pragma unroll
                for (uint32_t k = 0u; k < KP; k++) {
                    kw[j][k] = 0u;
                    vw[j][k] = 0u;
                    uint32_t w = lane + WAVE_SIZE * k;
                    if (used(k) && in_head(k)) {
                        if constexpr (KV::WORDS) {
                            kw[j][k] = kr[WAVE_SIZE * k];
                            vw[j][k] = vr[WAVE_SIZE * k];
                        } else {
                            kw[j][k] = KV::load(kc, row, w);
                            vw[j][k] = KV::load(vc, row, w);
                        }
                    }
                }
                row += row_units;
                kr += row_units;
                vr += row_units;
            }
        } else {
            // A run's last group, or one wrapping the ring.
            uint32_t rr = r;
#pragma unroll
            for (uint32_t j = 0u; j < GROUP; j++) {
                uint64_t row = (uint64_t)rr * row_units;
                bool live_row = p0 + j < end;
#pragma unroll
                for (uint32_t k = 0u; k < KP; k++) {
                    kw[j][k] = 0u;
                    vw[j][k] = 0u;
                    uint32_t w = lane + WAVE_SIZE * k;
                    if (used(k) && live_row && in_head(k)) {
                        if constexpr (KV::WORDS) {
                            kw[j][k] = kc[row + w];
                            vw[j][k] = vc[row + w];
                        } else {
                            kw[j][k] = KV::load(kc, row, w);
                            vw[j][k] = KV::load(vc, row, w);
                        }
                    }
                }
                rr = rr + 1u == ring ? 0u : rr + 1u;
            }
        }
        // Each lane's part of every position's dot; the wave's sums leave
        // lane l with position `mine`'s.
        float part[GROUP];
#pragma unroll
        for (uint32_t j = 0u; j < GROUP; j++) {
            part[j] = 0.0f;
#pragma unroll
            for (uint32_t k = 0u; k < KP; k++) {
                if (used(k)) {
                    part[j] = dev_fmaf(KV::lo(kw[j][k]), qx[k], part[j]);
                    part[j] = dev_fmaf(KV::hi(kw[j][k]), qy[k], part[j]);
                }
            }
        }
        float s = wave_sum8_scattered(part);
        s = p0 + mine < end ? s * p.scale : -__builtin_inff();
        // The group's maximum: lanes differing in bits 4..2 hold the eight.
        float mx = s;
#pragma unroll
        for (uint32_t b = 16u; b >= 4u; b >>= 1) {
            mx = dev_fmaxf(mx, wave_shfl_xor_f32(mx, b));
        }
        mx = dev_fmaxf(m, mx);
        float alpha = dev_expf(m - mx); // 0 while m = -inf
        float e_mine = dev_expf(s - mx); // 0 past the run
        l *= alpha;
#pragma unroll
        for (uint32_t k = 0u; k < KP; k++) {
            ax[k] *= alpha;
            ay[k] *= alpha;
        }
#pragma unroll
        for (uint32_t j = 0u; j < GROUP; j++) {
            float e = wave_shfl_idx_f32(e_mine, wave_sum8_lane(j));
            l += e;
#pragma unroll
            for (uint32_t k = 0u; k < KP; k++) {
                if (used(k)) {
                    ax[k] = dev_fmaf(e, KV::lo(vw[j][k]), ax[k]);
                    ay[k] = dev_fmaf(e, KV::hi(vw[j][k]), ay[k]);
                }
            }
        }
        m = mx;
        r += STEP;
        while (r >= ring) {
            r -= ring;
        }
    }
}

// Merges row g's runs (the decode kernels' partials): with M the largest
// maximum of a non-empty run, out = sum o_c e^(m_c - M) / sum l_c e^(m_c -
// M) in f32, the sink folded in as the unsplit kernel does. Empty runs (l_c
// = 0, past a short span) weigh nothing. `weight`: WG floats and `red`: WG
// / WAVE_SIZE floats of shared memory.
template <uint32_t WG, uint32_t DIMS, bool OUT_Q8>
DEV void attention_merge_row(const AttentionPush& p, uint32_t g, float* weight, float* red) {
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
    // Unrolled so that a few runs' loads are in flight at once (the sums
    // stay in run order).
#pragma unroll 8
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

template <uint32_t WG, uint32_t DIMS, bool OUT_Q8>
DEV void attention_combine_run(const AttentionPush& p, float* weight, float* red) {
    uint32_t g = wg_linear();
    if (g >= p.n_tokens * p.n_head) {
        return; // the whole workgroup
    }
    attention_merge_row<WG, DIMS, OUT_Q8>(p, g, weight, red);
}

// Called by every thread of a decode workgroup once its run's partial is
// written: the last of row g's n_split runs to finish (last_to_finish, in
// the row's counter: zero at the start of every step) merges the row
// (heads of up to 2 WG dimensions). `scratch`:
// WG + WG / WAVE_SIZE floats of shared memory no thread reads any more.
template <uint32_t WG> DEV void merge_if_last(const AttentionPush& p, uint32_t g, float* scratch) {
    if (!last_to_finish(dev_ptr<uint32_t>(p.counters) + g, p.n_split)) {
        return; // the whole workgroup
    }
    if (p.q8 != 0u) {
        attention_merge_row<WG, 2u, true>(p, g, scratch, scratch + WG);
    } else {
        attention_merge_row<WG, 2u, false>(p, g, scratch, scratch + WG);
    }
}

// KP: pairs a lane may hold (head_dim <= 64 KP); the kp = ceil(pairs / 32)
// in use is uniform. KV: the cache's reader (KvF16, KvQ8_0, KvQ4_0).
template <uint32_t WG, uint32_t KP, typename KV>
DEV void attention_decode_run(const AttentionPush& p, DecodeShared<WG, KP>& sh) {
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
    const typename KV::Unit* kc = KV::head(p.k_cache, kvh, hd);
    const typename KV::Unit* vc = KV::head(p.v_cache, kvh, hd);
    if (pairs == WAVE_SIZE * KP) {
        decode_walk<WG, KP, KP, KV>(p, begin, end, kc, vc, qx, qy, ax, ay, m, l);
    } else if (pairs == WAVE_SIZE * (KP / 2u)) {
        decode_walk<WG, KP, KP / 2u, KV>(p, begin, end, kc, vc, qx, qy, ax, ay, m, l);
    } else {
        decode_walk<WG, KP, 0u, KV>(p, begin, end, kc, vc, qx, qy, ax, ay, m, l);
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
    if (p.counters != 0u) {
        // The waves' accumulators are spent once the count's barrier has
        // passed: the merge's shared floats go there.
        static_assert(sizeof(sh.acc) >= (WG + WG / WAVE_SIZE) * sizeof(float), "merge scratch");
        merge_if_last<WG>(p, g, &sh.acc[0][0]);
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

template <uint32_t WG, uint32_t KP, typename KV>
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
    const typename KV::Unit* kc = KV::head(p.k_cache, kvh, hd);
    const typename KV::Unit* vc = KV::head(p.v_cache, kvh, hd);
    uint32_t row_units = KV::row_units(p.kv_dim);
    for (uint32_t p0 = begin + wv * GROUP; p0 < end; p0 += NW * GROUP) {
        uint32_t kw[GROUP][KP];
        uint32_t vw[GROUP][KP];
        uint32_t r = p0 % p.ring;
#pragma unroll
        for (uint32_t j = 0u; j < GROUP; j++) {
            uint64_t row = (uint64_t)r * row_units;
            bool live_row = p0 + j < end;
#pragma unroll
            for (uint32_t k = 0u; k < KP; k++) {
                kw[j][k] = 0u;
                vw[j][k] = 0u;
                if (k < kp) {
                    uint32_t w = lane + WAVE_SIZE * k;
                    if (live_row && w < pairs) {
                        if constexpr (KV::WORDS) {
                            kw[j][k] = kc[row + w];
                            vw[j][k] = vc[row + w];
                        } else {
                            kw[j][k] = KV::load(kc, row, w);
                            vw[j][k] = KV::load(vc, row, w);
                        }
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
                        part = dev_fmaf(KV::lo(kw[j][k]), qx[i][k], part);
                        part = dev_fmaf(KV::hi(kw[j][k]), qy[i][k], part);
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
                            ax[i][k] = dev_fmaf(e, KV::lo(vw[j][k]), ax[i][k]);
                            ay[i][k] = dev_fmaf(e, KV::hi(vw[j][k]), ay[i][k]);
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

} // namespace ops

// A cache type's kernels: decode and prefill, each with up to 2 pairs a
// lane (head_dim <= 128) and up to 4 (_wide); KV is the type's reader.
#define ATTENTION_KERNELS(DECODE, DECODE_WIDE, ROWS, ROWS_WIDE, KV)                              \
    KERNEL LAUNCH_BOUNDS(128u) void DECODE(AttentionPush p) {                                    \
        __shared__ ops::DecodeShared<128u, 2u> sh;                                               \
        ops::attention_decode_run<128u, 2u, ops::KV>(p, sh);                                     \
    }                                                                                            \
    KERNEL LAUNCH_BOUNDS(128u) void DECODE_WIDE(AttentionPush p) {                               \
        __shared__ ops::DecodeShared<128u, 4u> sh;                                               \
        ops::attention_decode_run<128u, 4u, ops::KV>(p, sh);                                     \
    }                                                                                            \
    KERNEL LAUNCH_BOUNDS(128u) void ROWS(AttentionPush p) {                                      \
        __shared__ ops::RowsShared<128u, 2u> sh;                                                 \
        ops::attention_rows_run<128u, 2u, ops::KV>(p, sh);                                       \
    }                                                                                            \
    KERNEL LAUNCH_BOUNDS(128u) void ROWS_WIDE(AttentionPush p) {                                 \
        __shared__ ops::RowsShared<128u, 4u> sh;                                                 \
        ops::attention_rows_run<128u, 4u, ops::KV>(p, sh);                                       \
    }

ATTENTION_KERNELS(attention_decode, attention_decode_wide, attention_rows, attention_rows_wide,
                  KvF16)
ATTENTION_KERNELS(attention_decode_q8_0, attention_decode_wide_q8_0, attention_rows_q8_0,
                  attention_rows_wide_q8_0, KvQ8_0)
ATTENTION_KERNELS(attention_decode_q4_0, attention_decode_wide_q4_0, attention_rows_q4_0,
                  attention_rows_wide_q4_0, KvQ4_0)
#undef ATTENTION_KERNELS

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
