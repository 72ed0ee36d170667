// Activation rounding before a matmul, as the CPU reference (and ggml) does:
// each weight type has a "vec_dot type" its activations are quantized to.
// Here they are quantized and dequantized again in f32 ("fake quantization"),
// so the matmul kernels stay f32 while computing what the CPU computes up to
// summation order. One invocation per block:
//   ACT_Q8_0: blocks of 32, d = amax / 127 (stored f16), q = rne(x * 127/amax)
//             (Q8_1 activations round the same way);
//   ACT_Q8_K: blocks of 256, iscale = -127 / max (signed value of largest
//             magnitude, first one), q = clamp(rne(iscale * x)), d = 1 / iscale;
//   ACT_F16 / ACT_BF16: every value rounded to nearest even.
// ACT_Q8_PACKED quantizes for real, for the integer mat-vec
// (matvec_int.comp), into the layout of q8_packed.glsl: quants at `out`,
// (d, s) per block at `scales`. With SWIGLU it first computes the values as
// silu(gate) * up (gate at `x`, up at `up`), writes them as f32 to `act` and
// quantizes them: the SwiGLU op and the rounding of its output in one pass;
// with SWIGLU_OAI, gpt-oss's clamped SwiGLU (pc.alpha, pc.limit) as
// eltwise.comp's OP_SWIGLU_OAI computes it.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "q8_packed.glsl"

layout(local_size_x = 64) in;

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t out_;
    uint n; // values (rows * k; k is a multiple of the block size)
    uint pad;
    uint64_t scales; // ACT_Q8_PACKED only
    uint64_t up;     // SWIGLU / SWIGLU_OAI only
    uint64_t act;
    float alpha; // SWIGLU_OAI only
    float limit;
} pc;

#if defined(ACT_Q8_0) || defined(ACT_Q8_PACKED)
#define BLOCK 32u
#elif defined(ACT_Q8_K)
#define BLOCK 256u
#else
#define BLOCK 8u
#endif

void main() {
    uint b = wg_linear() * 64u + gl_LocalInvocationID.x;
    if (b * BLOCK >= pc.n) {
        return;
    }
    F32s x = F32s(pc.x + uint64_t(b) * BLOCK * 4u);
#ifndef ACT_Q8_PACKED
    F32s o = F32s(pc.out_ + uint64_t(b) * BLOCK * 4u);
#endif
#if defined(ACT_Q8_0)
    float amax = 0.0;
    for (uint i = 0u; i < BLOCK; i++) {
        amax = max(amax, abs(x.v[i]));
    }
    float d = round_f16(div_rn(amax, 127.0));
    float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    for (uint i = 0u; i < BLOCK; i++) {
        o.v[i] = d * roundEven(x.v[i] * id);
    }
#elif defined(ACT_Q8_PACKED)
    // The block as eight vec4 loads issued together (rows are 16-aligned).
    V4s xv = V4s(pc.x + uint64_t(b) * BLOCK * 4u);
    vec4 v[8];
#if defined(SWIGLU) || defined(SWIGLU_OAI)
    V4s uv = V4s(pc.up + uint64_t(b) * BLOCK * 4u);
    V4s av = V4s(pc.act + uint64_t(b) * BLOCK * 4u);
    for (uint w = 0u; w < 8u; w++) {
        vec4 g = xv.v[w];
#ifdef SWIGLU
        // As eltwise.comp's OP_SWIGLU, component by component.
        v[w] = g / (1.0 + exp(-g)) * uv.v[w];
#else
        // As eltwise.comp's OP_SWIGLU_OAI, component by component.
        vec4 x = min(g, pc.limit);
        vec4 y = clamp(uv.v[w], -pc.limit, pc.limit);
        v[w] = x / (1.0 + exp(pc.alpha * -x)) * (y + 1.0);
#endif
        av.v[w] = v[w];
    }
#else
    for (uint w = 0u; w < 8u; w++) {
        v[w] = xv.v[w];
    }
#endif
    store_q8_packed(v, pc.out_, pc.scales, b);
#elif defined(ACT_Q8_K)
    float amax = 0.0;
    float mx = 0.0;
    for (uint i = 0u; i < BLOCK; i++) {
        float v = x.v[i];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    if (amax == 0.0) {
        for (uint i = 0u; i < BLOCK; i++) {
            o.v[i] = 0.0;
        }
        return;
    }
    float iscale = div_rn(-127.0, mx);
    float d = div_rn(1.0, iscale);
    for (uint i = 0u; i < BLOCK; i++) {
        o.v[i] = d * clamp(roundEven(iscale * x.v[i]), -128.0, 127.0);
    }
#elif defined(ACT_F16)
    for (uint i = 0u; i < BLOCK; i++) {
        o.v[i] = round_f16(x.v[i]);
    }
#elif defined(ACT_BF16)
    for (uint i = 0u; i < BLOCK; i++) {
        uint u = floatBitsToUint(x.v[i]);
        if ((u & 0x7F800000u) != 0x7F800000u) {
            u += 0x7FFFu + ((u >> 16) & 1u);
        }
        o.v[i] = uintBitsToFloat(u & 0xFFFF0000u);
    }
#else
#error "no ACT_ defined"
#endif
}
