// StoreKv: K and V rows of the step, rounded to f16 (nearest even), into the
// layer's cache at positions pos0 + r (row (pos0 + r) % ring: a sliding-
// window layer keeps a ring). One invocation per pair of values.
//
// KV_Q8_0 / KV_Q4_0 (a quantized cache, kv_cache.glsl): one invocation per
// block of 32 values, quantized as the CPU reference stores them (ggml's
// set_rows): Q8_0 by ggml's x86 quantizer (d = amax / 127, q =
// rne(x * 127 / amax)), Q4_0 by quantize_row_q4_0_ref (d = max / -8 with
// max the value of largest magnitude, first one; q = min(15, trunc(x / d +
// 8.5))); d stored as f16, nearest even.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "kv_cache.glsl"
#ifdef KV_QUANTIZED
#include "q8_packed.glsl"
#endif

layout(local_size_x = 64) in;

layout(push_constant, std430) uniform Push {
    uint64_t k;
    uint64_t v;
    uint64_t k_cache; // the layer's K block
    uint64_t v_cache;
    uint64_t step;
    uint rows;
    uint kv_dim;
    uint ring;
    uint pad;
} pc;

#ifdef KV_QUANTIZED
// The 32 values at `x` as one block at word `bw` of `dst`.
void store_block(F32s x, uint at, U16s dst, uint bw) {
    float v[32];
    for (uint i = 0u; i < 32u; i++) {
        v[i] = x.v[at + i];
    }
#ifdef KV_Q8_0
    float amax = 0.0;
    for (uint i = 0u; i < 32u; i++) {
        amax = max(amax, abs(v[i]));
    }
    float d = div_rn(amax, 127.0);
    float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    dst.v[bw] = uint16_t(f16_bits(d));
    for (uint j = 0u; j < 16u; j++) {
        uint lo = uint(int(roundEven(v[2u * j] * id))) & 0xFFu;
        uint hi = uint(int(roundEven(v[2u * j + 1u] * id))) & 0xFFu;
        dst.v[bw + 1u + j] = uint16_t(lo | (hi << 8));
    }
#else
    float amax = 0.0;
    float mx = 0.0;
    for (uint i = 0u; i < 32u; i++) {
        if (amax < abs(v[i])) {
            amax = abs(v[i]);
            mx = v[i];
        }
    }
    float d = div_rn(mx, -8.0);
    float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    dst.v[bw] = uint16_t(f16_bits(d));
    for (uint j = 0u; j < 16u; j += 2u) {
        // x * id + 8.5 rounded twice, as the CPU computes it (no fma).
        precise float a0 = v[j] * id + 8.5;
        precise float a1 = v[j + 1u] * id + 8.5;
        precise float b0 = v[j + 16u] * id + 8.5;
        precise float b1 = v[j + 17u] * id + 8.5;
        uint q0 = min(15u, uint(int(a0))) | (min(15u, uint(int(b0))) << 4);
        uint q1 = min(15u, uint(int(a1))) | (min(15u, uint(int(b1))) << 4);
        dst.v[bw + 1u + j / 2u] = uint16_t(q0 | (q1 << 8));
    }
#endif
}

void main() {
    uint idx = wg_linear() * 64u + gl_LocalInvocationID.x;
    uint blocks = pc.kv_dim / 32u;
    if (idx >= pc.rows * blocks) {
        return;
    }
    uint r = idx / blocks;
    uint c = idx % blocks;
    uint pos = (step_pos0(pc.step) + r) % pc.ring;
    uint src = r * pc.kv_dim + 32u * c;
    uint dst = (pos * blocks + c) * KV_BLOCK_WORDS;
    store_block(F32s(pc.k), src, U16s(pc.k_cache), dst);
    store_block(F32s(pc.v), src, U16s(pc.v_cache), dst);
}
#else
void main() {
    uint idx = wg_linear() * 64u + gl_LocalInvocationID.x;
    uint pairs = pc.kv_dim / 2u;
    if (idx >= pc.rows * pairs) {
        return;
    }
    uint r = idx / pairs;
    uint c = idx % pairs;
    uint pos = (step_pos0(pc.step) + r) % pc.ring;
    uint src = r * pc.kv_dim + 2u * c;
    uint dst = pos * pairs + c;
    F32s k = F32s(pc.k);
    F32s v = F32s(pc.v);
    U32s(pc.k_cache).v[dst] = f16_bits(k.v[src]) | (f16_bits(k.v[src + 1u]) << 16);
    U32s(pc.v_cache).v[dst] = f16_bits(v.v[src]) | (f16_bits(v.v[src + 1u]) << 16);
}
#endif
