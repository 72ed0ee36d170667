// Element-wise ops (shaders/eltwise.comp), one thread per value, 256 per
// workgroup; argument block EltwisePush, grid ceil(n / 256):
//   add      out = a + b
//   swiglu   out = silu(a) * b = a / (1 + e^-a) * b, in that order (the
//            CPU's silu_mul, ggml's form: -0, not NaN, for very negative a)
//   copy     out = a (b unused; LastRow)
//   scale    out = a * factor (b unused; Gemma's embedding scale)
//   swiglu_oai  gpt-oss's clamped SwiGLU: x = min(a, limit),
//            y = clamp(b, -limit, limit), out = x / (1 + e^(factor * -x))
//            * (y + 1), in ggml's order
//   sigmoid_gate  out = a * sigmoid(g), g = b[i / cols]: Qwen2-MoE's shared
//            expert scale, the sigmoid as ggml's graph takes it, silu(g) / g
//   geglu    out = gelu(a) * b: GELU's tanh form (tanh through libm's e^x:
//            the result is rounded to f16, as ggml's CPU table is, which
//            absorbs the last bits) on a rounded to f16; 0 below -10, a
//            above 10
// e^x is libm's expf bit for bit (ops_libm.h), as the CPU's; the shader
// uses the device's exp.
#include "ops_common.h"

#define ELTWISE_OPS_WG 256u

namespace ops {

enum class Elt { Add, Swiglu, Copy, Scale, Geglu, SwigluOai, SigmoidGate };

DEV float geglu_gate(float a) {
    if (a <= -10.0f) {
        return 0.0f;
    }
    if (a >= 10.0f) {
        return a;
    }
    const float x = (float)(_Float16)a;
    // tanh(y) = 1 - 2 / (e^2y + 1): no device libm here beyond ops_libm.h.
    const float y = 0.7978846f * x * (1.0f + 0.044715f * x * x);
    const float t = 1.0f - 2.0f / (libm_expf(2.0f * y) + 1.0f);
    return (float)(_Float16)(0.5f * x * (1.0f + t));
}

template <Elt OP> DEV void eltwise_run(const EltwisePush& p) {
    uint32_t i = wg_linear() * ELTWISE_OPS_WG + thread_id_x();
    if (i >= p.n) {
        return;
    }
    float a = dev_ptr<const float>(p.a)[i];
    float r;
    if (OP == Elt::Add) {
        r = a + dev_ptr<const float>(p.b)[i];
    } else if (OP == Elt::Swiglu) {
        r = swiglu_value(a, dev_ptr<const float>(p.b)[i]);
    } else if (OP == Elt::Scale) {
        r = a * p.factor;
    } else if (OP == Elt::SwigluOai) {
        r = swiglu_oai_value(a, dev_ptr<const float>(p.b)[i], p.factor, p.limit);
    } else if (OP == Elt::SigmoidGate) {
        float g = dev_ptr<const float>(p.b)[i / p.cols];
        r = a * (g / (1.0f + libm_expf(-g)) / g);
    } else if (OP == Elt::Geglu) {
        r = geglu_gate(a) * dev_ptr<const float>(p.b)[i];
    } else {
        r = a;
    }
    dev_ptr<float>(p.out)[i] = r;
}

} // namespace ops

// attn_temp (AttnTempPush): Llama 4's attention temperature in place, row
// r of x (position pos0 + r) times ln(floor(pos / floor) + 1) * scale + 1,
// the logarithm in f64 as the reference takes it.
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void attn_temp(AttnTempPush p) {
    uint32_t i = wg_linear() * ELTWISE_OPS_WG + thread_id_x();
    if (i >= p.n) {
        return;
    }
    float pos = (float)(step_pos0(p.step) + i / p.cols);
    double steps = (double)__builtin_floorf(pos / (float)p.floor) + 1.0;
    float f = (float)(ops::libm_log(steps) * (double)p.scale + 1.0);
    dev_ptr<float>(p.x)[i] *= f;
}

KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void add(EltwisePush p) {
    ops::eltwise_run<ops::Elt::Add>(p);
}
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void swiglu(EltwisePush p) {
    ops::eltwise_run<ops::Elt::Swiglu>(p);
}
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void copy(EltwisePush p) {
    ops::eltwise_run<ops::Elt::Copy>(p);
}
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void scale(EltwisePush p) {
    ops::eltwise_run<ops::Elt::Scale>(p);
}
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void swiglu_oai(EltwisePush p) {
    ops::eltwise_run<ops::Elt::SwigluOai>(p);
}
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void sigmoid_gate(EltwisePush p) {
    ops::eltwise_run<ops::Elt::SigmoidGate>(p);
}
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void geglu(EltwisePush p) {
    ops::eltwise_run<ops::Elt::Geglu>(p);
}
