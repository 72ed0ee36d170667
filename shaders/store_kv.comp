// StoreKv: K and V rows of the step, rounded to f16 (nearest even), into the
// layer's cache at positions pos0 + r (row (pos0 + r) % ring: a sliding-
// window layer keeps a ring). One invocation per pair of values.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

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
