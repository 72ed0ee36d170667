// Decode matmul (1..MV_MAX_TOKENS tokens): out[t][r] = x[t] . W[r] (+ bias[r]).
// One workgroup per weight row; every weight byte is read once and used for
// all tokens. Up to three matmuls of one input (Q/K/V, gate/up) run as one
// dispatch: the workgroup index picks the part.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = WG_SIZE) in;

#define MV_MAX_TOKENS 8

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w[3];
    uint64_t out_[3];
    uint64_t bias[3];
    uint rows[3];
    uint k;
    uint n;
    uint n_parts;
} pc;

shared float part_sums[MV_MAX_TOKENS * WG_SIZE];

void main() {
    uint r = wg_linear();
    uint p = 0u;
    while (p < pc.n_parts && r >= pc.rows[p]) {
        r -= pc.rows[p];
        p++;
    }
    if (p >= pc.n_parts) {
        return;
    }
    uint m = pc.rows[p];
    uint units = pc.k / 8u;
    // Plain float rows may end mid-"block": size rows by elements.
    uint64_t row = pc.w[p] + uint64_t(r) * (uint64_t(pc.k) * QUANT_BLOCK_BYTES / QUANT_K);
    V4s x = V4s(pc.x);
    float acc[MV_MAX_TOKENS];
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        acc[t] = 0.0;
    }
    for (uint u = gl_LocalInvocationID.x; u < units; u += WG_SIZE) {
        vec4 lo, hi;
        dequant8(row, u / QUANT_UNITS, u % QUANT_UNITS, lo, hi);
        for (uint t = 0u; t < pc.n; t++) {
            uint base = (t * pc.k) / 4u + 2u * u;
            acc[t] += dot(lo, x.v[base]) + dot(hi, x.v[base + 1u]);
        }
    }
    // Subgroup sums, then one slot per subgroup in shared memory.
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        acc[t] = subgroupAdd(acc[t]);
    }
    if (subgroupElect()) {
        for (uint t = 0u; t < pc.n; t++) {
            part_sums[t * WG_SIZE + gl_SubgroupID] = acc[t];
        }
    }
    memoryBarrierShared();
    barrier();
    uint t = gl_LocalInvocationID.x;
    if (t < pc.n) {
        float s = 0.0;
        for (uint i = 0u; i < gl_NumSubgroups; i++) {
            s += part_sums[t * WG_SIZE + i];
        }
        if (pc.bias[p] != 0ul) {
            s += F32s(pc.bias[p]).v[r];
        }
        F32s(pc.out_[p]).v[t * m + r] = s;
    }
}
