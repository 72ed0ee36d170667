// The Q8-packed activation layout that the integer mat-vec reads
// (matvec_int.comp), written by quantize_act.comp (ACT_Q8_PACKED) and by the
// producers that fuse the rounding into their own output (RmsNorm, SwiGLU,
// decode attention): per block of 32 values, int8 quants at `quants` (32
// bytes per block) and vec2(d, s) at `scales`, with Q8_0's rounding
// (d = amax / 127, q = rne(x * 127 / amax)) and s = f16(d * sum(q)), Q8_1's
// block sum (the same quants serve Q8_0 and Q8_1 weights). One function for
// every writer, so a fused producer rounds exactly as the separate pass.
#ifndef Q8_PACKED_GLSL
#define Q8_PACKED_GLSL

#include "common.glsl"

// a / b correctly rounded: GLSL division may be off by 2.5 ulp; one fma
// step on the exact residual fixes the last bit.
float div_rn(float a, float b) {
    float q = a / b;
    float r = fma(-q, b, a);
    return fma(r, 1.0 / b, q);
}

// Quantizes the 32 values `v` and stores them as block `b`.
void store_q8_packed(vec4 v[8], uint64_t quants, uint64_t scales, uint b) {
    vec4 m4 = vec4(0.0);
    for (uint w = 0u; w < 8u; w++) {
        m4 = max(m4, abs(v[w]));
    }
    float amax = max(max(m4.x, m4.y), max(m4.z, m4.w));
    float d = div_rn(amax, 127.0);
    float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    ivec4 sum4 = ivec4(0);
    uvec4 words[2];
    for (uint w = 0u; w < 8u; w++) {
        ivec4 q = ivec4(roundEven(v[w] * id));
        sum4 += q;
        uvec4 u = uvec4(q) & 0xFFu;
        words[w / 4u][w % 4u] = u.x | (u.y << 8) | (u.z << 16) | (u.w << 24);
    }
    int sum = sum4.x + sum4.y + sum4.z + sum4.w;
    U4s qo = U4s(quants + uint64_t(b) * 32u);
    qo.v[0] = words[0];
    qo.v[1] = words[1];
    F32s so = F32s(scales + uint64_t(b) * 8u);
    so.v[0] = round_f16(d);
    so.v[1] = round_f16(d * float(sum));
}

#endif
