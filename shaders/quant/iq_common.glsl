// Shared by the i-quant and ternary dequantizers (iq2_*.glsl, iq3_*.glsl,
// iq1_*.glsl, tq*.glsl). Their blocks are only 2-byte aligned (66, 74, 82,
// 98, 110, 50, 54 bytes), so they are read as 16-bit halves. Lattice points
// come from the generated iq_grids.glsl (compact form: a level index per
// coordinate, see that file); the caller defines IQ_TABLE_<LATTICE> before
// including it.
#ifndef QUANT_IQ_COMMON_GLSL
#define QUANT_IQ_COMMON_GLSL

// Byte k of a block.
uint iq_byte(U16s b, uint k) {
    return bitfieldExtract(uint(b.v[k >> 1]), int(8u * (k & 1u)), 8);
}

// The little-endian word at byte 2h (halves h and h + 1).
uint iq_word(U16s b, uint h) {
    return uint(b.v[h]) | (uint(b.v[h + 1u]) << 16);
}

// Point i of a *_POINTS table (16 bits).
#define IQ_POINT(points, i) bitfieldExtract((points)[(i) >> 1], int(16u * ((i) & 1u)), 16)

// A 7-bit sign field with its implied eighth bit: the number of negatives
// is even (ggml's ksigns_iq2xs).
uint iq_signs7(uint s) {
    return s | ((uint(bitCount(s)) & 1u) << 7);
}

// Byte l of packed level words: level l's magnitude (unsigned).
uint iq_level(uint levels, uint l) {
    return bitfieldExtract(levels, int(8u * l), 8);
}

// -1 where bit `first + c` of `signs` is set, else 1, for c = 0..3.
vec4 iq_sign4(uint signs, uint first) {
    uvec4 bits = (uvec4(signs) >> (uvec4(0u, 1u, 2u, 3u) + first)) & 1u;
    return vec4(1.0) - 2.0 * vec4(bits);
}

// Coordinates first..first+3 of an 8-coordinate, 2-bit point `p`, as the
// magnitudes of `levels`.
vec4 iq2_coords4(uint p, uint first, uint levels) {
    uvec4 l = (uvec4(p) >> (2u * (uvec4(0u, 1u, 2u, 3u) + first))) & 3u;
    return vec4(iq_level(levels, l.x), iq_level(levels, l.y), iq_level(levels, l.z), iq_level(levels, l.w));
}

// The 4 coordinates of a 3-bit point `p`, as magnitudes of two level words.
vec4 iq3_coords4(uint p, uvec2 levels) {
    uvec4 l = (uvec4(p) >> uvec4(0u, 3u, 6u, 9u)) & 7u;
    return vec4(iq_level(levels[l.x >> 2], l.x & 3u), iq_level(levels[l.y >> 2], l.y & 3u),
                iq_level(levels[l.z >> 2], l.z & 3u), iq_level(levels[l.w >> 2], l.w & 3u));
}

// An IQ2 group: 8 values db * magnitude, negated where `signs` has the bit,
// in the CPU reference's order ((db * g) * ±1).
void iq2_group8(uint p, uint levels, uint signs, float db, out vec4 lo, out vec4 hi) {
    lo = (db * iq2_coords4(p, 0u, levels)) * iq_sign4(signs, 0u);
    hi = (db * iq2_coords4(p, 4u, levels)) * iq_sign4(signs, 4u);
}

#endif
