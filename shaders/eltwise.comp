// Elementwise ops, one invocation per value; OP picks the op at build time:
// OP_ADD: out = a + b; OP_SWIGLU: out = silu(a) * b; OP_COPY: out = a;
// OP_SCALE: out = a * factor; OP_GEGLU: out = gelu(a) * b, GELU's tanh form
// on a rounded to f16, itself rounded to f16 (ggml's CPU reads it from a
// table of every f16), 0 below -10 and a above 10; OP_SWIGLU_OAI: gpt-oss's
// clamped SwiGLU, x = min(a, limit), y = clamp(b, -limit, limit),
// out = x / (1 + e^(alpha * -x)) * (y + 1) with alpha = factor;
// OP_SIGMOID_GATE: out = a * sigmoid(g), g = b[i / cols] (one value per
// row), the sigmoid as ggml's qwen2moe graph takes it: silu(g) / g.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant, std430) uniform Push {
    uint64_t a;
    uint64_t b;
    uint64_t out_;
    uint n;
    float factor;
    float limit;
    uint cols;
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
#elif defined(OP_SWIGLU_OAI)
    float x = min(a, pc.limit);
    float y = clamp(F32s(pc.b).v[i], -pc.limit, pc.limit);
    float r = x / (1.0 + exp(pc.factor * -x)) * (y + 1.0);
#elif defined(OP_SIGMOID_GATE)
    float g = F32s(pc.b).v[i / pc.cols];
    float r = a * (g / (1.0 + exp(-g)) / g);
#elif defined(OP_COPY)
    float r = a;
#elif defined(OP_SCALE)
    float r = a * pc.factor;
#elif defined(OP_GEGLU)
    float g;
    if (a <= -10.0) {
        g = 0.0;
    } else if (a >= 10.0) {
        g = a;
    } else {
        float x = round_f16(a);
        // tanh(y) = 1 - 2 / (e^2y + 1), finite for every y (a GLSL tanh
        // may divide infinities).
        float y = 0.7978846 * x * (1.0 + 0.044715 * x * x);
        g = round_f16(0.5 * x * (1.0 + (1.0 - 2.0 / (exp(2.0 * y) + 1.0))));
    }
    float r = g * F32s(pc.b).v[i];
#else
#error "no OP_ defined"
#endif
    F32s(pc.out_).v[i] = r;
}
