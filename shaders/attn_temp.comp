// Llama 4's attention temperature (Ministral 3's Q), in place: row r of x,
// the token at position pos0 + r (pos0 from the step-input region), times
// ln(floor(pos / floor) + 1) * scale + 1, which is 1 within the first
// `floor` positions. One invocation per value. The reference takes the
// logarithm in f64; the device's log is within a few ulp of it.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t step;
    uint n;
    uint cols;
    float scale;
    uint floor_;
} pc;

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= pc.n) {
        return;
    }
    float pos = float(step_pos0(pc.step) + i / pc.cols);
    float f = log(floor(pos / float(pc.floor_)) + 1.0) * pc.scale + 1.0;
    F32s(pc.x).v[i] *= f;
}
