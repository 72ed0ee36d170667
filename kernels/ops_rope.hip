// Rotary embedding in place (shaders/rope.comp), angle for angle as ggml
// and the CPU reference (crates/rocmforge-cpu rope.rs): pair i of the token
// at position pos = pos0 + r turns by
//   freq_scale * (theta_i / freq_factor[i]),  theta_i = pos * ts * ... * ts
// (i successive f32 products, theta_scale = ts from the host), then
// x0 * cos - x1 * sin, x0 * sin + x1 * cos; with YaRN (yarn.ext_factor !=
// 0) the angle mixes in the unscaled one by a linear ramp over pairs
// corr_lo..corr_hi (ggml's rope_yarn), and cos and sin are multiplied by
// yarn.mscale. pos0 comes from the step-input
// region. One thread per (token, head, pair); 64 threads per workgroup.
//
// Kernels:
//   rope      RopePush: Q (or any rows of n_heads heads) at x;
//             grid ceil(rows * n_heads * n_rot/2 / 64);
//   rope_kv   RopeKvPush: Q at x and K rotated in one launch, and the step's
//             K and V rows stored into the layer's f16 cache as store_kv
//             does: one thread per item of four ranges, Q pairs, K pairs
//             (rotated, then both values stored), K's dims past n_rot, V
//             values.
//   norm_rope_kv  NormRopeKvPush (RoPE without YaRN): Qwen3's per-head RMS
//             norms of Q and K first, as rmsnorm computes them (f64 sum of
//             f32 squares, (x * scale) * w), read from q / k and written
//             normalised and rotated to q_out / k_out (K also to the
//             cache): a workgroup per (token, head) of Q, then of K, then
//             V's values 64 a workgroup. A head's values are all read for
//             its sum before any is written, so q_out may be q.
//
// cos / sin: libm's sinf / cosf bit for bit (ops_libm.h), as the CPU calls
// them; the shader uses a Cephes polynomial instead (within a few ulp).
#include "ops_common.h"

#define ROPE_OPS_WG 64u

namespace ops {

// The rotation shared by Q and K heads. P is RopePush or RopeKvPush.
struct Rotated {
    uint32_t a; // the pair's two dims within the head
    uint32_t b;
    float xa; // their new values
    float xb;
};

// YaRN's terms of a launch: none for norm_rope_kv.
DEV YarnPush yarn_of(const RopePush& p) { return p.yarn; }
DEV YarnPush yarn_of(const RopeKvPush& p) { return p.yarn; }
DEV YarnPush yarn_of(const NormRopeKvPush&) {
    YarnPush y;
    y.ext_factor = 0.0f;
    y.mscale = 1.0f;
    y.corr_lo = 0.0f;
    y.corr_hi = 0.0f;
    return y;
}

// Pair i's two dims within a head, its new values not yet set.
template <typename P> DEV Rotated pair_dims(const P& p, uint32_t i) {
    Rotated o;
    o.a = p.neox != 0u ? i : 2u * i;
    o.b = p.neox != 0u ? i + p.n_rot / 2u : 2u * i + 1u;
    o.xa = 0.0f;
    o.xb = 0.0f;
    return o;
}

// Pair i of token r's values (x0, x1) turned by its angle, into o.xa, o.xb
// (o.a, o.b: the pair's dims).
template <typename P>
DEV Rotated rope_turn(const P& p, uint32_t r, uint32_t i, float x0, float x1) {
    const YarnPush yarn = yarn_of(p);
    float theta = (float)(step_pos0(p.step) + r);
    for (uint32_t q = 0u; q < i; q++) {
        theta *= p.theta_scale;
    }
    float ff = p.freq_factors != 0u ? dev_ptr<const float>(p.freq_factors)[i] : 1.0f;
    const float extrap = theta / ff;
    float angle = p.freq_scale * extrap;
    if (yarn.ext_factor != 0.0f) {
        float y = ((float)i - yarn.corr_lo) / __builtin_fmaxf(0.001f, yarn.corr_hi - yarn.corr_lo);
        float ramp_mix = (1.0f - __builtin_fminf(1.0f, __builtin_fmaxf(0.0f, y))) * yarn.ext_factor;
        angle = angle * (1.0f - ramp_mix) + extrap * ramp_mix;
    }
    float sn, cs;
    libm_sincosf(angle, &sn, &cs);
    sn *= yarn.mscale;
    cs *= yarn.mscale;
    Rotated o = pair_dims(p, i);
    o.xa = x0 * cs - x1 * sn;
    o.xb = x0 * sn + x1 * cs;
    return o;
}

// Pair i of the head at `head` (token r) rotated in place.
template <typename P> DEV Rotated rope_rotate(const P& p, float* head, uint32_t r, uint32_t i) {
    const Rotated d = pair_dims(p, i);
    Rotated o = rope_turn(p, r, i, head[d.a], head[d.b]);
    head[o.a] = o.xa;
    head[o.b] = o.xb;
    return o;
}

// The Q range of either kernel: returns true when idx was in it.
template <typename P> DEV bool rope_q(const P& p, uint32_t idx) {
    uint32_t half_rot = p.n_rot / 2u;
    uint32_t per_row = p.n_heads * half_rot;
    if (idx >= p.rows * per_row) {
        return false;
    }
    uint32_t r = idx / per_row;
    uint32_t head = (idx % per_row) / half_rot;
    float* at = dev_ptr<float>(p.x) + ((uint64_t)r * p.n_heads + head) * p.head_dim;
    rope_rotate(p, at, r, idx % half_rot);
    return true;
}

DEV void rope_kv_run(const RopeKvPush& p, uint32_t idx) {
    if (rope_q(p, idx)) {
        return;
    }
    uint32_t half_rot = p.n_rot / 2u;
    idx -= p.rows * p.n_heads * half_rot;
    uint32_t kv_dim = p.n_heads_kv * p.head_dim;
    uint32_t pos0 = step_pos0(p.step);
    uint16_t* kc = dev_ptr<uint16_t>(p.k_cache);
    // K pairs: rotate, then store both values.
    uint32_t kv_pairs = p.n_heads_kv * half_rot;
    if (idx < p.rows * kv_pairs) {
        uint32_t r = idx / kv_pairs;
        uint32_t head = (idx % kv_pairs) / half_rot;
        float* at = dev_ptr<float>(p.k) + ((uint64_t)r * p.n_heads_kv + head) * p.head_dim;
        Rotated o = rope_rotate(p, at, r, idx % half_rot);
        uint64_t row = (uint64_t)((pos0 + r) % p.ring) * kv_dim + head * p.head_dim;
        kc[row + o.a] = f32_to_f16_bits(o.xa);
        kc[row + o.b] = f32_to_f16_bits(o.xb);
        return;
    }
    idx -= p.rows * kv_pairs;
    // K dims past n_rot, stored as they are.
    uint32_t plain = p.head_dim - p.n_rot;
    uint32_t kv_plain = p.n_heads_kv * plain;
    if (idx < p.rows * kv_plain) {
        uint32_t r = idx / kv_plain;
        uint32_t head = (idx % kv_plain) / plain;
        uint32_t d = head * p.head_dim + p.n_rot + idx % plain;
        float v = dev_ptr<const float>(p.k)[(uint64_t)r * kv_dim + d];
        kc[(uint64_t)((pos0 + r) % p.ring) * kv_dim + d] = f32_to_f16_bits(v);
        return;
    }
    idx -= p.rows * kv_plain;
    // V values.
    if (idx < p.rows * kv_dim) {
        uint32_t r = idx / kv_dim;
        uint32_t d = idx % kv_dim;
        float v = dev_ptr<const float>(p.v)[idx];
        dev_ptr<uint16_t>(p.v_cache)[(uint64_t)((pos0 + r) % p.ring) * kv_dim + d] = f32_to_f16_bits(v);
    }
}

DEV void norm_rope_kv_run(const NormRopeKvPush& p, double* part) {
    const uint32_t g = wg_linear();
    const uint32_t tid = thread_id_x();
    const uint32_t q_heads = p.rows * p.n_heads;
    const uint32_t heads = q_heads + p.rows * p.n_heads_kv;
    const uint32_t kv_dim = p.n_heads_kv * p.head_dim;
    const uint32_t pos0 = step_pos0(p.step);
    if (g >= heads) {
        // V values (the whole workgroup returns here or below).
        const uint32_t idx = (g - heads) * ROPE_OPS_WG + tid;
        if (idx < p.rows * kv_dim) {
            const uint32_t r = idx / kv_dim;
            const uint32_t d = idx % kv_dim;
            float v = dev_ptr<const float>(p.v)[idx];
            dev_ptr<uint16_t>(p.v_cache)[(uint64_t)((pos0 + r) % p.ring) * kv_dim + d] =
                f32_to_f16_bits(v);
        }
        return;
    }
    const bool is_k = g >= q_heads;
    const uint32_t gi = is_k ? g - q_heads : g;
    const uint32_t nh = is_k ? p.n_heads_kv : p.n_heads;
    const uint32_t r = gi / nh;
    const uint32_t head = gi % nh;
    const uint64_t off = ((uint64_t)r * nh + head) * p.head_dim;
    const float* src = dev_ptr<const float>(is_k ? p.k : p.q) + off;
    float* dst = dev_ptr<float>(is_k ? p.k_out : p.q_out) + off;
    const float* w = dev_ptr<const float>(is_k ? p.k_norm : p.q_norm);
    // rmsnorm's scale: f32 squares summed in f64, the mean rounded to f32.
    double ss = 0.0;
    for (uint32_t d = tid; d < p.head_dim; d += ROPE_OPS_WG) {
        const float x = src[d];
        ss += (double)(x * x);
    }
    const double total = block_sum_f64<ROPE_OPS_WG>(ss, part);
    const float mean = (float)(total / (double)p.head_dim);
    const float scale = 1.0f / dev_sqrtf(mean + p.eps);
    uint16_t* kc = dev_ptr<uint16_t>(p.k_cache);
    const uint64_t row = (uint64_t)((pos0 + r) % p.ring) * kv_dim + head * p.head_dim;
    const uint32_t half_rot = p.n_rot / 2u;
    for (uint32_t i = tid; i < half_rot; i += ROPE_OPS_WG) {
        const Rotated d = pair_dims(p, i);
        Rotated o = rope_turn(p, r, i, src[d.a] * scale * w[d.a], src[d.b] * scale * w[d.b]);
        dst[o.a] = o.xa;
        dst[o.b] = o.xb;
        if (is_k) {
            kc[row + o.a] = f32_to_f16_bits(o.xa);
            kc[row + o.b] = f32_to_f16_bits(o.xb);
        }
    }
    // Dims past n_rot, normalised only.
    for (uint32_t d = p.n_rot + tid; d < p.head_dim; d += ROPE_OPS_WG) {
        const float y = src[d] * scale * w[d];
        dst[d] = y;
        if (is_k) {
            kc[row + d] = f32_to_f16_bits(y);
        }
    }
}

} // namespace ops

KERNEL LAUNCH_BOUNDS(ROPE_OPS_WG) void rope(RopePush p) {
    ops::rope_q(p, wg_linear() * ROPE_OPS_WG + thread_id_x());
}

KERNEL LAUNCH_BOUNDS(ROPE_OPS_WG) void rope_kv(RopeKvPush p) {
    ops::rope_kv_run(p, wg_linear() * ROPE_OPS_WG + thread_id_x());
}

KERNEL LAUNCH_BOUNDS(ROPE_OPS_WG) void norm_rope_kv(NormRopeKvPush p) {
    __shared__ double part[ROPE_OPS_WG / WAVE_SIZE];
    ops::norm_rope_kv_run(p, part);
}
