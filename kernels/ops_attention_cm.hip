// Prefill attention on the matrix cores (shaders/attention_coopmat.comp,
// FlashAttention-2 tiles) through the prelude's fragment operation (WMMA on
// RDNA3/RDNA4, mma.sync on NVIDIA, f32 FMAs from shared memory elsewhere).
//
// A workgroup of two waves takes 32 consecutive tokens of one head (grid
// ceil(n_tokens / 32) * n_head); wave w owns query rows 16w.. and walks
// the cache in tiles of 32 positions. Per tile the workgroup stages K (rows
// of positions) and V transposed (rows of dimensions: the fragment's B is
// stored N x K) as f16 in shared memory, positions outside the tile's
// range zero. Each wave then
//   1. multiplies its Q rows (f16, staged once) by K^T: 16 x 32 scores in
//      f32 accumulators, written to shared memory;
//   2. runs the online softmax, two lanes per query row: scale, mask
//      (causal, a sliding window, tokens past the graph), the new maximum,
//      the factor that rescales the row's output, and the weights
//      e^(s - max) as f16;
//   3. rescales its output accumulators (16 x HD, f32, in fragments: each
//      element knows its row, frag_c_row) and adds weights x V.
// At the end each row folds in the sink (gpt-oss) and is written
// normalised, in f32.
//
// Kernels (argument block AttentionPush): attention_cm (head size 128),
// attention_cm64 (64), for f16 rows of whole 16-byte units; with _q8_0 /
// _q4_0 after the name, over a quantized cache (kv_cache.h), whose blocks
// are dequantized to f16 as the tile is staged.

#include "ops_common.h"
#include "kv_cache.h"

namespace ops {

#define CM_BQ 32u
#define CM_BK 32u
#define CM_WG 64u

template <uint32_t HD> struct CmShared {
    // Row strides in halves (multiples of 8) and floats.
    static constexpr uint32_t LDQ = HD + 8u;
    static constexpr uint32_t LDV = CM_BK + 8u;
    static constexpr uint32_t LDS = CM_BK + 4u;
    static constexpr uint32_t LDP = CM_BK + 8u;
    alignas(16) half q[CM_BQ * LDQ];
    alignas(16) half k[CM_BK * LDQ];
    alignas(16) half vt[HD * LDV];
    alignas(16) half p[2u][16u * LDP];
    float s[2u][16u * LDS];
    float alpha[2u][16u];
};

template <uint32_t HD, typename KV>
DEV void attention_cm_run(const AttentionPush& p, CmShared<HD>& sh) {
    static_assert(WAVE_SIZE == 32u, "two lanes per row of a wave's 16");
    using S = CmShared<HD>;
    constexpr uint32_t HF = HD / 16u;
    constexpr uint32_t HALF = CM_BK / 2u;
    uint32_t g = wg_linear();
    uint32_t n_blocks = (p.n_tokens + CM_BQ - 1u) / CM_BQ;
    if (g >= n_blocks * p.n_head) {
        return; // the whole workgroup
    }
    uint32_t t0 = (g / p.n_head) * CM_BQ;
    uint32_t h = g % p.n_head;
    uint32_t kvh = h / (p.n_head / p.n_head_kv);
    uint32_t q_dim = p.n_head * HD;
    uint32_t pos0 = step_pos0(p.step);
    uint32_t tid = thread_id_x();
    uint32_t wv = wave_id();
    uint32_t lane = lane_id();
    // The lane's softmax row (of the wave's 16) and half of the tile.
    uint32_t r = lane / 2u;
    uint32_t half_ = lane % 2u;
    uint32_t tok = t0 + wv * 16u + r;
    bool real = tok < p.n_tokens;
    uint32_t hi = real ? pos0 + tok + 1u : 0u;
    uint32_t lo = real && p.window != 0u && hi > p.window ? hi - p.window : 0u;
    uint32_t last = __builtin_elementwise_min(t0 + CM_BQ, p.n_tokens) - 1u;
    uint32_t end = pos0 + last + 1u;
    uint32_t first = pos0 + t0 + 1u;
    uint32_t begin = p.window != 0u && first > p.window ? first - p.window : 0u;

    // Q rows (past the graph: the last token's) as f16.
    const float* qg = dev_ptr<const float>(p.q);
    for (uint32_t e = tid; e < CM_BQ * HD; e += CM_WG) {
        uint32_t row = e / HD;
        uint32_t d = e % HD;
        uint32_t t = __builtin_elementwise_min(t0 + row, p.n_tokens - 1u);
        sh.q[row * S::LDQ + d] = (half)qg[(uint64_t)t * q_dim + h * HD + d];
    }
    FragC o[HF];
#pragma unroll
    for (uint32_t c = 0u; c < HF; c++) {
        o[c] = frag_c_zero();
    }
    float m = -__builtin_inff();
    float l = 0.0f;
    const uint4* kc = dev_ptr<const uint4>(p.k_cache);
    const uint4* vc = dev_ptr<const uint4>(p.v_cache);
    uint32_t row_units = p.kv_dim / 8u;
    uint32_t head_unit = kvh * (HD / 8u);

    for (uint32_t p0 = begin; p0 < end; p0 += CM_BK) {
        block_barrier(); // the previous tile's fragments are done
        for (uint32_t e = tid; e < CM_BK * (HD / 8u); e += CM_WG) {
            uint32_t j = e / (HD / 8u);
            uint32_t u = e % (HD / 8u);
            uint32_t pp = p0 + j;
            if constexpr (!KV::WORDS) {
                // A quantized cache: the unit's 8 values of K and of V.
                float kf[8] = {};
                float vf[8] = {};
                if (pp < end) {
                    constexpr uint32_t UNITS = KV::BLOCK_UNITS;
                    const auto* kq = dev_ptr<const typename KV::Unit>(p.k_cache);
                    const auto* vq = dev_ptr<const typename KV::Unit>(p.v_cache);
                    uint64_t bw = ((uint64_t)(pp % p.ring) * (p.kv_dim / 32u) +
                                   (kvh * HD + 8u * u) / 32u) *
                                  UNITS;
                    KV{}.dequant8(kq + bw, (8u * u) % 32u, kf);
                    KV{}.dequant8(vq + bw, (8u * u) % 32u, vf);
                }
#pragma unroll
                for (uint32_t i = 0u; i < 8u; i++) {
                    sh.k[j * S::LDQ + 8u * u + i] = (half)kf[i];
                    sh.vt[(8u * u + i) * S::LDV + j] = (half)vf[i];
                }
                continue;
            }
            uint4 kw = (uint4){0u, 0u, 0u, 0u};
            uint4 vw = (uint4){0u, 0u, 0u, 0u};
            if (pp < end) {
                uint64_t at = (uint64_t)(pp % p.ring) * row_units + head_unit + u;
                kw = kc[at];
                vw = vc[at];
            }
            *(uint4*)(sh.k + j * S::LDQ + 8u * u) = kw;
            uint32_t vv[4] = {vw.x, vw.y, vw.z, vw.w};
#pragma unroll
            for (uint32_t i = 0u; i < 4u; i++) {
                uint32_t d = 8u * u + 2u * i;
                sh.vt[d * S::LDV + j] = __builtin_bit_cast(half, (uint16_t)vv[i]);
                sh.vt[(d + 1u) * S::LDV + j] = __builtin_bit_cast(half, (uint16_t)(vv[i] >> 16));
            }
        }
        block_barrier();

        // 1. Scores of the wave's 16 rows: Q x K^T.
        float* ss = sh.s[wv];
#pragma unroll
        for (uint32_t j = 0u; j < CM_BK / 16u; j++) {
            FragC acc = frag_c_zero();
#pragma unroll
            for (uint32_t c = 0u; c < HF; c++) {
                FragA a = frag_a_load(sh.q + (wv * 16u) * S::LDQ + 16u * c, S::LDQ);
                FragB b = frag_b_load(sh.k + (16u * j) * S::LDQ + 16u * c, S::LDQ);
                acc = mma_16x16x16(a, b, acc);
            }
#pragma unroll
            for (uint32_t e = 0u; e < 8u; e++) {
                ss[frag_c_row(e) * S::LDS + 16u * j + frag_c_col(e)] = acc.v[e];
            }
        }
        wave_barrier();

        // 2. Online softmax, two lanes per row.
        float w[HALF];
        float mx = -__builtin_inff();
#pragma unroll
        for (uint32_t i = 0u; i < HALF; i++) {
            uint32_t col = half_ * HALF + i;
            uint32_t pp = p0 + col;
            w[i] = pp >= lo && pp < hi ? ss[r * S::LDS + col] * p.scale : -__builtin_inff();
            mx = dev_fmaxf(mx, w[i]);
        }
        mx = dev_fmaxf(mx, wave_shfl_xor_f32(mx, 1u));
        float m_new = dev_fmaxf(m, mx);
        float alpha = 1.0f;
        float sum = 0.0f;
        bool any = __builtin_bit_cast(uint32_t, m_new) != 0xff800000u;
#pragma unroll
        for (uint32_t i = 0u; i < HALF; i++) {
            w[i] = any ? dev_expf(w[i] - m_new) : 0.0f; // 0 where unseen
            sum += w[i];
        }
        if (any) {
            alpha = dev_expf(m - m_new); // 0 while m = -inf
        }
        sum += wave_shfl_xor_f32(sum, 1u);
        l = l * alpha + sum;
        m = m_new;
        half* pw = sh.p[wv];
#pragma unroll
        for (uint32_t i = 0u; i < HALF; i++) {
            pw[r * S::LDP + half_ * HALF + i] = (half)w[i];
        }
        if (half_ == 0u) {
            sh.alpha[wv][r] = alpha;
        }
        wave_barrier();

        // 3. Rescale the outputs, then add weights x V.
#pragma unroll
        for (uint32_t c = 0u; c < HF; c++) {
#pragma unroll
            for (uint32_t e = 0u; e < 8u; e++) {
                o[c].v[e] *= sh.alpha[wv][frag_c_row(e)];
            }
        }
#pragma unroll
        for (uint32_t kk = 0u; kk < CM_BK / 16u; kk++) {
            FragA a = frag_a_load(pw + 16u * kk, S::LDP);
#pragma unroll
            for (uint32_t c = 0u; c < HF; c++) {
                FragB b = frag_b_load(sh.vt + (16u * c) * S::LDV + 16u * kk, S::LDV);
                o[c] = mma_16x16x16(a, b, o[c]);
            }
        }
        wave_barrier();
    }

    // Each row's sum and maximum to the lanes holding its outputs.
    if (half_ == 0u) {
        sh.s[wv][r * 2u] = m;
        sh.s[wv][r * 2u + 1u] = l;
    }
    wave_barrier();
    float sink = p.sinks != 0u ? dev_ptr<const float>(p.sinks)[h] : 0.0f;
    float* out = dev_ptr<float>(p.out);
#pragma unroll
    for (uint32_t e = 0u; e < 8u; e++) {
        uint32_t row = frag_c_row(e);
        uint32_t t = t0 + wv * 16u + row;
        if (t >= p.n_tokens) {
            continue;
        }
        float rm = sh.s[wv][row * 2u];
        float rl = sh.s[wv][row * 2u + 1u];
        float ms = 1.0f;
        if (p.sinks != 0u) {
            if (sink > rm) {
                ms = __builtin_bit_cast(uint32_t, rm) == 0xff800000u ? 0.0f : dev_expf(rm - sink);
                rl = rl * ms + 1.0f;
            } else {
                rl += dev_expf(sink - rm);
            }
        }
        float inv = rl == 0.0f ? 0.0f : ms / rl;
#pragma unroll
        for (uint32_t c = 0u; c < HF; c++) {
            out[(uint64_t)t * q_dim + h * HD + 16u * c + frag_c_col(e)] = o[c].v[e] * inv;
        }
    }
}

} // namespace ops

#define ATTENTION_CM(name, hd, kv)                                                         \
    KERNEL LAUNCH_BOUNDS(64u) void name(AttentionPush p) {                                 \
        __shared__ ops::CmShared<hd> sh;                                                   \
        ops::attention_cm_run<hd, kv>(p, sh);                                              \
    }
ATTENTION_CM(attention_cm, 128u, ops::KvF16)
ATTENTION_CM(attention_cm64, 64u, ops::KvF16)
ATTENTION_CM(attention_cm_q8_0, 128u, ops::KvQ8_0)
ATTENTION_CM(attention_cm64_q8_0, 64u, ops::KvQ8_0)
ATTENTION_CM(attention_cm_q4_0, 128u, ops::KvQ4_0)
ATTENTION_CM(attention_cm64_q4_0, 64u, ops::KvQ4_0)
#undef ATTENTION_CM
