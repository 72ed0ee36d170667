// RMSNorm over groups of `group` values (a row, or one head for Qwen3's Q/K
// norms): out = x / sqrt(mean(x^2) + eps) * w. One workgroup per group.
#version 460
#extension GL_GOOGLE_include_directive : require
#define NEEDS_REDUCE
#include "common.glsl"

layout(local_size_x = WG_SIZE) in;

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w;
    uint64_t out_;
    uint group;
    uint n_groups;
    float eps;
} pc;

void main() {
    uint g = wg_linear();
    if (g >= pc.n_groups) {
        return;
    }
    F32s x = F32s(pc.x + uint64_t(g) * pc.group * 4u);
    F32s o = F32s(pc.out_ + uint64_t(g) * pc.group * 4u);
    F32s w = F32s(pc.w);
    float ss = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < pc.group; i += WG_SIZE) {
        float v = x.v[i];
        ss += v * v;
    }
    ss = wg_sum(ss);
    float scale = 1.0 / sqrt(ss / float(pc.group) + pc.eps);
    for (uint i = gl_LocalInvocationID.x; i < pc.group; i += WG_SIZE) {
        o.v[i] = x.v[i] * scale * w.v[i];
    }
}
