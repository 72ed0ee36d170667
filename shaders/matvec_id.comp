// Expert mat-vec (llama.cpp's mul_mat_id), for mixture-of-experts layers:
//   out[p][r] = x[p / x_div] . W_e[r],  e = ids[p]
// for every (token, choice) pair p. The expert ids are read here, on the
// device, so one recorded dispatch serves whatever experts a step routes
// to; only the chosen experts' rows are read. One workgroup per (pair,
// row), the f32 mat-vec's reduction (matvec.comp) for one token. A bias
// (gpt-oss) adds the chosen expert's row of f32 biases to each output.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = WG_SIZE) in;

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w;
    uint64_t ids;
    uint64_t out_;
    uint64_t expert_bytes;
    uint rows;
    uint k;
    uint n_pairs;
    uint x_div;
    uint64_t bias; // 0: none
    uint64_t x_scales; // matvec_id_int only
} pc;

shared float part_sums[WG_SIZE];

void main() {
    uint g = wg_linear();
    if (g >= pc.n_pairs * pc.rows) {
        return;
    }
    uint p = g / pc.rows;
    uint r = g % pc.rows;
    // Ids are exact small integers stored as f32 (graph::Op::TopKGate).
    uint e = uint(F32s(pc.ids).v[p]);
    uint units = pc.k / 8u;
    uint64_t row = pc.w + uint64_t(e) * pc.expert_bytes
        + uint64_t(r) * (uint64_t(pc.k) * QUANT_BLOCK_BYTES / QUANT_K);
    V4s x = V4s(pc.x);
    uint xbase = ((p / pc.x_div) * pc.k) / 4u;
    float acc = 0.0;
    for (uint u = gl_LocalInvocationID.x; u < units; u += WG_SIZE) {
        vec4 lo, hi;
        dequant8(row, u / QUANT_UNITS, u % QUANT_UNITS, lo, hi);
        acc += dot(lo, x.v[xbase + 2u * u]) + dot(hi, x.v[xbase + 2u * u + 1u]);
    }
    acc = subgroupAdd(acc);
    if (subgroupElect()) {
        part_sums[gl_SubgroupID] = acc;
    }
    memoryBarrierShared();
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        float s = 0.0;
        for (uint i = 0u; i < gl_NumSubgroups; i++) {
            s += part_sums[i];
        }
        if (pc.bias != 0ul) {
            s += F32s(pc.bias).v[e * pc.rows + r];
        }
        F32s(pc.out_).v[p * pc.rows + r] = s;
    }
}
