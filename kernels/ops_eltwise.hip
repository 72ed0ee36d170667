// Element-wise ops (shaders/eltwise.comp), one thread per value, 256 per
// workgroup; argument block EltwisePush, grid ceil(n / 256):
//   add      out = a + b
//   swiglu   out = silu(a) * b = a / (1 + e^-a) * b, in that order (the
//            CPU's silu_mul, ggml's form: -0, not NaN, for very negative a)
//   copy     out = a (b unused; LastRow)
// e^x is libm's expf bit for bit (ops_libm.h), as the CPU's; the shader
// uses the device's exp.
#include "ops_common.h"

#define ELTWISE_OPS_WG 256u

namespace ops {

enum class Elt { Add, Swiglu, Copy };

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
    } else {
        r = a;
    }
    dev_ptr<float>(p.out)[i] = r;
}

} // namespace ops

KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void add(EltwisePush p) {
    ops::eltwise_run<ops::Elt::Add>(p);
}
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void swiglu(EltwisePush p) {
    ops::eltwise_run<ops::Elt::Swiglu>(p);
}
KERNEL LAUNCH_BOUNDS(ELTWISE_OPS_WG) void copy(EltwisePush p) {
    ops::eltwise_run<ops::Elt::Copy>(p);
}
