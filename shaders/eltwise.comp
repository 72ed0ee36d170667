// Elementwise ops, one invocation per value; OP picks the op at build time:
// OP_ADD: out = a + b; OP_SWIGLU: out = silu(a) * b; OP_COPY: out = a.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant, std430) uniform Push {
    uint64_t a;
    uint64_t b;
    uint64_t out_;
    uint n;
} pc;

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= pc.n) {
        return;
    }
    float a = F32s(pc.a).v[i];
#if defined(OP_ADD)
    float r = a + F32s(pc.b).v[i];
#elif defined(OP_SWIGLU)
    float r = a / (1.0 + exp(-a)) * F32s(pc.b).v[i];
#elif defined(OP_COPY)
    float r = a;
#else
#error "no OP_ defined"
#endif
    F32s(pc.out_).v[i] = r;
}
