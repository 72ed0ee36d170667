// Helpers shared by the kernels: the flattened workgroup index, the step
// inputs, f16 rounding, and workgroup reductions written for any subgroup
// size (8 on lavapipe, 32 on NVIDIA and RDNA wave32, 64 on wave64).
#ifndef COMMON_GLSL
#define COMMON_GLSL

#include "types.glsl"
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

// Grids larger than 65535 workgroups are folded into x and y by the host;
// kernels see one linear index and return when it is past their count.
uint wg_linear() {
    return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
}

// The step-input region (u32 words): 0 = pos0, 1 = n_kv, 2 = n_tokens,
// 3 = 0, 4.. = token ids. Written by the host before every submit, so one
// recorded command buffer serves every position.
uint step_pos0(uint64_t step) { return U32s(step).v[0]; }
uint step_n_kv(uint64_t step) { return U32s(step).v[1]; }
uint step_token(uint64_t step, uint r) { return U32s(step).v[4u + r]; }

// f32 -> f16 bits, round to nearest even, in integer arithmetic so the
// result does not depend on the device's conversion rounding mode.
uint f16_bits(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint e = (x >> 23) & 0xFFu;
    uint m = x & 0x7FFFFFu;
    if (e == 0xFFu) {
        return sign | 0x7C00u | (m != 0u ? 0x200u : 0u);
    }
    int ee = int(e) - 112;
    if (ee >= 31) {
        return sign | 0x7C00u;
    }
    if (ee <= 0) {
        uint shift = uint(14 - ee);
        if (shift > 24u) {
            return sign;
        }
        uint mant = m | 0x800000u;
        uint h = mant >> shift;
        uint rem = mant & ((1u << shift) - 1u);
        uint half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (h & 1u) != 0u)) {
            h += 1u;
        }
        return sign | h;
    }
    uint h = (uint(ee) << 10) | (m >> 13);
    uint rem = m & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) {
        h += 1u;
    }
    return sign | h;
}

// f rounded to the nearest f16 value (ties to even), as an f32. For
// magnitudes in [2^-14, 2^15), f16 normals, that is the f32 mantissa rounded
// to 10 bits in place (a carry into the exponent gives the right value):
// four integer operations, where the decode attention's in-order walk does
// two of these per position in its serial chain. Other magnitudes
// (subnormals, overflow to infinity, NaN) take the full conversion.
float round_f16(float f) {
    uint x = floatBitsToUint(f);
    uint e = (x >> 23) & 0xFFu;
    if (e >= 113u && e <= 141u) {
        return uintBitsToFloat((x + 0xFFFu + ((x >> 13) & 1u)) & 0xFFFFE000u);
    }
    return unpackHalf2x16(f16_bits(f)).x;
}

#ifdef NEEDS_REDUCE
// One slot per subgroup (at most one per invocation).
shared float red_buf[WG_SIZE];

// Sum of `v` over the workgroup, returned to every invocation. Call from
// uniform control flow.
float wg_sum(float v) {
    v = subgroupAdd(v);
    if (gl_NumSubgroups == 1u) {
        return v;
    }
    if (subgroupElect()) {
        red_buf[gl_SubgroupID] = v;
    }
    memoryBarrierShared();
    barrier();
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) {
        s += red_buf[i];
    }
    memoryBarrierShared();
    barrier();
    return s;
}

float wg_max(float v) {
    v = subgroupMax(v);
    if (gl_NumSubgroups == 1u) {
        return v;
    }
    if (subgroupElect()) {
        red_buf[gl_SubgroupID] = v;
    }
    memoryBarrierShared();
    barrier();
    float s = red_buf[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) {
        s = max(s, red_buf[i]);
    }
    memoryBarrierShared();
    barrier();
    return s;
}
#endif

#endif
