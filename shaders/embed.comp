// Embed: dequantized rows of the token embedding table for the step's token
// ids, read from the step-input region. One workgroup per token.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = WG_SIZE) in;

layout(push_constant, std430) uniform Push {
    uint64_t table;
    uint64_t out_;
    uint64_t step;
    uint row_bytes;
    uint cols;
    uint n_vocab;
    uint n_tokens;
} pc;

void main() {
    uint r = wg_linear();
    if (r >= pc.n_tokens) {
        return;
    }
    // The session checks ids; clamp anyway so a bad id cannot read outside
    // the table.
    uint id = min(step_token(pc.step, r), pc.n_vocab - 1u);
    uint64_t row = pc.table + uint64_t(id) * pc.row_bytes;
    V4s o = V4s(pc.out_ + uint64_t(r) * pc.cols * 4u);
    for (uint u = gl_LocalInvocationID.x; u < pc.cols / 8u; u += WG_SIZE) {
        vec4 lo, hi;
        dequant8(row, u / QUANT_UNITS, u % QUANT_UNITS, lo, hi);
        o.v[2u * u] = lo;
        o.v[2u * u + 1u] = hi;
    }
}
