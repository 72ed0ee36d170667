// Shared by the IQ1_S and IQ1_M dequantizers: their 2048-point ternary
// lattice (levels -1, 0, 1) and the ±1/8 shift of each group.
#ifndef QUANT_IQ1_COMMON_GLSL
#define QUANT_IQ1_COMMON_GLSL
#define IQ_TABLE_IQ1S
#include "iq_grids.glsl"
#include "iq_common.glsl"

// Coordinates first..first+3 of lattice point `index` as -1, 0, 1.
vec4 iq1_coords4(uint index, uint first) {
    uint p = IQ_POINT(IQ1S_POINTS, index);
    ivec4 l = ivec4((uvec4(p) >> (2u * (uvec4(0u, 1u, 2u, 3u) + first))) & 3u);
    return vec4(l - 1);
}

// 8 values dl * (coordinate + delta), as the CPU reference computes them.
void iq1_group8(uint index, float dl, float delta, out vec4 lo, out vec4 hi) {
    lo = dl * (iq1_coords4(index, 0u) + delta);
    hi = dl * (iq1_coords4(index, 4u) + delta);
}
#endif
