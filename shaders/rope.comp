// Rotary embedding in place, angle for angle as ggml: pair i of the token at
// position pos turns by freq_scale * (pos * theta_scale^i / freq_factor[i]),
// where pos * theta_scale^i is the chain of i f32 products ggml computes.
// With YaRN (ext_factor != 0) the angle mixes that interpolated one with the
// unscaled one by a linear ramp over pairs corr_lo..corr_hi (ggml's
// rope_yarn); cos and sin are multiplied by mscale.
// cos/sin use an explicit range reduction and polynomials (Cephes sinf/cosf)
// instead of the device's sin/cos, whose precision Vulkan leaves undefined
// outside [-pi, pi]. One invocation per (token, head, pair); the position
// comes from the step-input region.
//
// STORE_KV rotates Q and K of a step in one dispatch and also stores the
// step's K and V rows into the layer's f16 cache, as store_kv.comp does (f16
// rounding to nearest even): one invocation per item of four ranges, Q pairs,
// K pairs (rotated, then stored), K's unrotated dims past n_rot, V values.
//
// NORM (norm_rope_kv, NormRopeKvPush; RoPE without YaRN): Qwen3's per-head
// RMS norms of Q and K before that, as rmsnorm.comp computes them
// (x * scale * w, scale = 1 / sqrt(mean(x^2) + eps)), read from q / k and
// written normalised and rotated to q_out / k_out (K also to the cache):
// a workgroup per (token, head) of Q, then of K, then V's values 64 a
// workgroup. A head's values are all read for its sum before any is
// written, so q_out may be q.
#version 460
#extension GL_GOOGLE_include_directive : require
#ifdef NORM
#define NEEDS_REDUCE
#define WG_SIZE 64
#endif
#include "common.glsl"

layout(local_size_x = 64) in;

#ifdef NORM
layout(push_constant, std430) uniform Push {
    uint64_t q;
    uint64_t q_out;
    uint64_t k;
    uint64_t k_out;
    uint64_t v;
    uint64_t k_cache; // the layer's K block
    uint64_t v_cache;
    uint64_t step;
    uint64_t freq_factors; // 0 = none
    uint64_t q_norm;
    uint64_t k_norm;
    uint rows;
    uint n_heads; // Q heads
    uint head_dim;
    uint n_rot;
    uint neox;
    float theta_scale;
    float freq_scale;
    uint n_heads_kv;
    uint ring; // position p is row p % ring of the blocks
    float eps;
} pc;
// No YaRN terms.
#define EXT_FACTOR 0.0
#define MSCALE 1.0
#define CORR_LO 0.0
#define CORR_HI 0.0
#elif defined(STORE_KV)
layout(push_constant, std430) uniform Push {
    uint64_t x; // Q
    uint64_t step;
    uint64_t freq_factors; // 0 = none
    uint rows;
    uint n_heads; // Q heads
    uint head_dim;
    uint n_rot;
    uint neox;
    float theta_scale;
    float freq_scale;
    uint n_heads_kv;
    float ext_factor;
    float mscale;
    float corr_lo;
    float corr_hi;
    uint64_t k;
    uint64_t v;
    uint64_t k_cache; // the layer's K block
    uint64_t v_cache;
    uint ring; // position p is row p % ring of the blocks
    uint pad;
} pc;
#else
layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t step;
    uint64_t freq_factors; // 0 = none
    uint rows;
    uint n_heads;
    uint head_dim;
    uint n_rot;
    uint neox;
    float theta_scale;
    float freq_scale;
    float ext_factor;
    float mscale;
    float corr_lo;
    float corr_hi;
    uint pad;
} pc;
#endif
#ifndef NORM
#define EXT_FACTOR pc.ext_factor
#define MSCALE pc.mscale
#define CORR_LO pc.corr_lo
#define CORR_HI pc.corr_hi
#endif

// sin and cos of x, accurate to a few ulp for |x| < 8192 * pi/4 and
// degrading gracefully beyond.
vec2 sincos_(float x) {
    float ax = abs(x);
    float j = floor(ax * 1.27323954473516); // 4/pi
    uint q = uint(j);
    if ((q & 1u) != 0u) {
        q += 1u;
        j += 1.0;
    }
    q &= 7u;
    // Extended-precision pi/4 in three parts (Cody-Waite).
    precise float z = ((ax - j * 0.78515625) - j * 2.4187564849853515625e-4) - j * 3.77489497744594108e-8;
    float zz = z * z;
    float s = ((-1.9515295891e-4 * zz + 8.3321608736e-3) * zz - 1.6666654611e-1) * zz * z + z;
    float c = ((2.443315711809948e-5 * zz - 1.388731625493765e-3) * zz + 4.166664568298827e-2) * zz * zz - 0.5 * zz + 1.0;
    float sin_sign = 1.0;
    float cos_sign = 1.0;
    if (q > 3u) {
        q -= 4u;
        sin_sign = -1.0;
        cos_sign = -1.0;
    }
    if (q > 1u) {
        cos_sign = -cos_sign;
    }
    float sn = (q == 1u || q == 2u) ? c : s;
    float cs = (q == 1u || q == 2u) ? s : c;
    if (x < 0.0) {
        sin_sign = -sin_sign;
    }
    return vec2(sn * sin_sign, cs * cos_sign);
}

// Pair i's dims within a head: (a, b).
uvec2 pair_dims(uint i) {
    return pc.neox != 0u ? uvec2(i, i + pc.n_rot / 2u) : uvec2(2u * i, 2u * i + 1u);
}

// Pair i of token r's values (x0, x1) turned by its angle.
vec2 turn(uint r, uint i, float x0, float x1) {
    float theta = float(step_pos0(pc.step) + r);
    for (uint q = 0u; q < i; q++) {
        theta *= pc.theta_scale;
    }
    float ff = pc.freq_factors != 0ul ? F32s(pc.freq_factors).v[i] : 1.0;
    float extrap = theta / ff;
    float angle = pc.freq_scale * extrap;
    if (EXT_FACTOR != 0.0) {
        float y = (float(i) - CORR_LO) / max(0.001, CORR_HI - CORR_LO);
        float ramp_mix = (1.0 - clamp(y, 0.0, 1.0)) * EXT_FACTOR;
        angle = angle * (1.0 - ramp_mix) + extrap * ramp_mix;
    }
    vec2 sc = sincos_(angle) * MSCALE;
    return vec2(x0 * sc.y - x1 * sc.x, x0 * sc.x + x1 * sc.y);
}

#ifndef NORM
// Rotates pair i of the head at `head` (token r) in place and returns the
// pair's two dims and new values.
void rotate(uint64_t head, uint r, uint i, out uint a, out uint b, out vec2 ab) {
    uvec2 d = pair_dims(i);
    a = d.x;
    b = d.y;
    F32s x = F32s(head);
    ab = turn(r, i, x.v[a], x.v[b]);
    x.v[a] = ab.x;
    x.v[b] = ab.y;
}
#endif

#ifdef NORM
void main() {
    uint g = wg_linear();
    uint lane = gl_LocalInvocationID.x;
    uint q_heads = pc.rows * pc.n_heads;
    uint heads = q_heads + pc.rows * pc.n_heads_kv;
    uint kv_dim = pc.n_heads_kv * pc.head_dim;
    uint pos0 = step_pos0(pc.step);
    if (g >= heads) {
        // V values (the whole workgroup returns here or below).
        uint idx = (g - heads) * 64u + lane;
        if (idx < pc.rows * kv_dim) {
            uint r = idx / kv_dim;
            uint d = idx % kv_dim;
            U16s(pc.v_cache).v[((pos0 + r) % pc.ring) * kv_dim + d] = uint16_t(f16_bits(F32s(pc.v).v[idx]));
        }
        return;
    }
    bool is_k = g >= q_heads;
    uint gi = is_k ? g - q_heads : g;
    uint nh = is_k ? pc.n_heads_kv : pc.n_heads;
    uint r = gi / nh;
    uint head = gi % nh;
    uint64_t off = (uint64_t(r) * nh + head) * pc.head_dim * 4u;
    F32s src = F32s((is_k ? pc.k : pc.q) + off);
    F32s dst = F32s((is_k ? pc.k_out : pc.q_out) + off);
    F32s w = F32s(is_k ? pc.k_norm : pc.q_norm);
    float ss = 0.0;
    for (uint d = lane; d < pc.head_dim; d += 64u) {
        float x = src.v[d];
        ss += x * x;
    }
    float scale = 1.0 / sqrt(wg_sum(ss) / float(pc.head_dim) + pc.eps);
    U16s kc = U16s(pc.k_cache);
    uint row = ((pos0 + r) % pc.ring) * kv_dim + head * pc.head_dim;
    for (uint i = lane; i < pc.n_rot / 2u; i += 64u) {
        uvec2 d = pair_dims(i);
        vec2 ab = turn(r, i, src.v[d.x] * scale * w.v[d.x], src.v[d.y] * scale * w.v[d.y]);
        dst.v[d.x] = ab.x;
        dst.v[d.y] = ab.y;
        if (is_k) {
            kc.v[row + d.x] = uint16_t(f16_bits(ab.x));
            kc.v[row + d.y] = uint16_t(f16_bits(ab.y));
        }
    }
    // Dims past n_rot, normalised only.
    for (uint d = pc.n_rot + lane; d < pc.head_dim; d += 64u) {
        float y = src.v[d] * scale * w.v[d];
        dst.v[d] = y;
        if (is_k) {
            kc.v[row + d] = uint16_t(f16_bits(y));
        }
    }
}
#else

void main() {
    uint half_rot = pc.n_rot / 2u;
    uint idx = wg_linear() * 64u + gl_LocalInvocationID.x;
    uint per_row = pc.n_heads * half_rot;
    uint a;
    uint b;
    vec2 ab;
    if (idx < pc.rows * per_row) {
        uint r = idx / per_row;
        uint head = (idx % per_row) / half_rot;
        uint64_t at = pc.x + (uint64_t(r) * pc.n_heads + head) * pc.head_dim * 4u;
        rotate(at, r, idx % half_rot, a, b, ab);
        return;
    }
#ifdef STORE_KV
    idx -= pc.rows * per_row;
    uint kv_dim = pc.n_heads_kv * pc.head_dim;
    uint pos0 = step_pos0(pc.step);
    U16s kc = U16s(pc.k_cache);
    // K pairs: rotate, then store both halves.
    uint kv_pairs = pc.n_heads_kv * half_rot;
    if (idx < pc.rows * kv_pairs) {
        uint r = idx / kv_pairs;
        uint head = (idx % kv_pairs) / half_rot;
        uint64_t at = pc.k + (uint64_t(r) * pc.n_heads_kv + head) * pc.head_dim * 4u;
        rotate(at, r, idx % half_rot, a, b, ab);
        uint row = ((pos0 + r) % pc.ring) * kv_dim + head * pc.head_dim;
        kc.v[row + a] = uint16_t(f16_bits(ab.x));
        kc.v[row + b] = uint16_t(f16_bits(ab.y));
        return;
    }
    idx -= pc.rows * kv_pairs;
    // K dims past n_rot, stored as they are.
    uint plain = pc.head_dim - pc.n_rot;
    uint kv_plain = pc.n_heads_kv * plain;
    if (idx < pc.rows * kv_plain) {
        uint r = idx / kv_plain;
        uint head = (idx % kv_plain) / plain;
        uint d = head * pc.head_dim + pc.n_rot + idx % plain;
        kc.v[((pos0 + r) % pc.ring) * kv_dim + d] = uint16_t(f16_bits(F32s(pc.k).v[r * kv_dim + d]));
        return;
    }
    idx -= pc.rows * kv_plain;
    // V values.
    if (idx < pc.rows * kv_dim) {
        uint r = idx / kv_dim;
        uint d = idx % kv_dim;
        U16s(pc.v_cache).v[((pos0 + r) % pc.ring) * kv_dim + d] = uint16_t(f16_bits(F32s(pc.v).v[idx]));
    }
#endif
}
#endif
