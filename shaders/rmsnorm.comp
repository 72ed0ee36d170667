// RMSNorm over groups of `group` values (a row, or one head for Qwen3's Q/K
// norms): out = x / sqrt(mean(x^2) + eps) * w. One workgroup per group.
// OUT_Q8 (a row that only the integer mat-vec reads next) also writes the
// row Q8-packed (q8_packed.glsl) to `q8` / `q8_scales`, one invocation per
// block of 32, so the mat-vec needs no separate rounding pass; `group` is
// then a multiple of 32.
#version 460
#extension GL_GOOGLE_include_directive : require
#define NEEDS_REDUCE
#include "common.glsl"
#ifdef OUT_Q8
#include "q8_packed.glsl"
#endif

layout(local_size_x = WG_SIZE) in;

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w;
    uint64_t out_;
    uint group;
    uint n_groups;
    float eps;
    uint pad;
    uint64_t q8; // OUT_Q8 only
    uint64_t q8_scales;
    // A second norm of the same group size (not OUT_Q8): workgroups
    // n_groups .. n_groups + n_groups2 normalise x2 by w2 into out2.
    uint64_t x2;
    uint64_t w2;
    uint64_t out2;
    uint n_groups2;
    uint pad2;
} pc;

void main() {
    uint g = wg_linear();
    bool second = g >= pc.n_groups;
    if (second) {
        g -= pc.n_groups;
        if (g >= pc.n_groups2) {
            return;
        }
    }
    uint64_t x_at = second ? pc.x2 : pc.x;
    uint64_t out_at = second ? pc.out2 : pc.out_;
    F32s x = F32s(x_at + uint64_t(g) * pc.group * 4u);
    F32s o = F32s(out_at + uint64_t(g) * pc.group * 4u);
    F32s w = F32s(second ? pc.w2 : pc.w);
    float ss = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < pc.group; i += WG_SIZE) {
        float v = x.v[i];
        ss += v * v;
    }
    ss = wg_sum(ss);
    float scale = 1.0 / sqrt(ss / float(pc.group) + pc.eps);
#ifdef OUT_Q8
    uint nb = pc.group / 32u;
    V4s xv = V4s(pc.x + uint64_t(g) * pc.group * 4u);
    V4s ov = V4s(pc.out_ + uint64_t(g) * pc.group * 4u);
    V4s wv = V4s(pc.w);
    for (uint b = gl_LocalInvocationID.x; b < nb; b += WG_SIZE) {
        // The block's loads all before its first store: a store may alias
        // them for all the compiler knows, so loads after it would wait.
        vec4 v[8];
        for (uint j = 0u; j < 8u; j++) {
            uint i = b * 8u + j;
            v[j] = xv.v[i] * scale * wv.v[i];
        }
        for (uint j = 0u; j < 8u; j++) {
            ov.v[b * 8u + j] = v[j];
        }
        store_q8_packed(v, pc.q8, pc.q8_scales, g * nb + b);
    }
#else
    for (uint i = gl_LocalInvocationID.x; i < pc.group; i += WG_SIZE) {
        o.v[i] = x.v[i] * scale * w.v[i];
    }
#endif
}
