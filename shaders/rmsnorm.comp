// RMSNorm over groups of `group` values (a row, or one head for Qwen3's Q/K
// norms): out = x / sqrt(mean(x^2) + eps) * w. One workgroup per group.
// OUT_Q8 (a row that only the integer mat-vec reads next) also writes the
// row Q8-packed (q8_packed.glsl) to `q8` / `q8_scales`, one invocation per
// block of 32, so the mat-vec needs no separate rounding pass; `group` is
// then a multiple of 32. MOE_SUM (below) computes its rows first.
#version 460
#extension GL_GOOGLE_include_directive : require
#define NEEDS_REDUCE
#include "common.glsl"
#ifdef OUT_Q8
#include "q8_packed.glsl"
#endif

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = WG_SIZE) in;

// Values of a row an invocation loads together: a 4096-value row's whole
// share for a workgroup of 512.
#define NORM_UNROLL 8u
// MOE_SUM: experts (k) and vec4 columns an invocation loads together
// (gpt-oss's 2880-value rows are 720 columns; Qwen3 routes 8 experts);
// more experts take the plain loop. Rounds of SUM_MAX_K for any k (one
// loop for both cases) measured ~1.5% slower in decode on the lent H200
// (docs/measurements.md, session 34), so the k <= 8 path stays separate.
#define SUM_MAX_K 8u
#define SUM_COLS 2u

#ifdef MOE_SUM
// A mixture-of-experts layer's end and the next block's norm in one launch
// (moe_sum_rmsnorm, moe_sum_rmsnorm_q8), a workgroup per row t: the row's
// values are moe_sum's (moe.comp: the k expert rows weighted, each product
// rounded, in order of j, then the residual), written to `sum`, then
// normalised as below. Rows of a multiple of 32 values.
layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t weights;
    uint64_t residual;
    uint64_t sum;
    uint64_t w;
    uint64_t out_;
    uint64_t q8; // OUT_Q8 only
    uint64_t q8_scales;
    uint cols;
    uint n_rows;
    uint k;
    float eps;
} pc;
// The sum, read back by other invocations of the workgroup than its
// writers (after a buffer memory barrier).
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer F32sC { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) coherent buffer V4sC { vec4 v[]; };
#define XS F32sC
#define XV V4sC
#else
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
#define XS F32s
#define XV V4s
#endif

// Writes group g of `group` values at x_at, times `scale` and the weights
// at w_at, to out_at (and, OUT_Q8, Q8-packed as blocks g * group / 32 on).
void normalise(uint64_t x_at, uint64_t w_at, uint64_t out_at, uint g, uint group, float scale) {
#ifdef OUT_Q8
    uint nb = group / 32u;
    XV xv = XV(x_at + uint64_t(g) * group * 4u);
    V4s ov = V4s(out_at + uint64_t(g) * group * 4u);
    V4s wv = V4s(w_at);
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
    XS x = XS(x_at + uint64_t(g) * group * 4u);
    F32s o = F32s(out_at + uint64_t(g) * group * 4u);
    F32s w = F32s(w_at);
    for (uint i = gl_LocalInvocationID.x; i < group; i += WG_SIZE) {
        o.v[i] = x.v[i] * scale * w.v[i];
    }
#endif
}

#ifdef MOE_SUM
void main() {
    uint t = wg_linear();
    if (t >= pc.n_rows) {
        return; // the whole workgroup
    }
    uint n4 = pc.cols / 4u;
    uint64_t row = uint64_t(t) * pc.cols * 4u;
    V4s x = V4s(pc.x + row * pc.k);
    F32s wt = F32s(pc.weights + uint64_t(t) * pc.k * 4u);
    V4s res = V4s(pc.residual + row);
    V4sC sum = V4sC(pc.sum + row);
    float ss = 0.0;
    if (pc.k <= SUM_MAX_K) { // uniform
        // Every expert's values of an invocation's SUM_COLS columns loaded
        // before any is summed: one trip to memory, not one an expert and
        // column (the loop over k compiled to a load, then a wait, a trip).
        // The same sums in the same order.
        float wk[SUM_MAX_K];
        [[unroll]] for (uint j = 0u; j < SUM_MAX_K; j++) {
            wk[j] = j < pc.k ? wt.v[j] : 0.0;
        }
        for (uint c0 = gl_LocalInvocationID.x; c0 < n4; c0 += WG_SIZE * SUM_COLS) {
            vec4 xs[SUM_COLS][SUM_MAX_K];
            vec4 rs[SUM_COLS];
            [[unroll]] for (uint i = 0u; i < SUM_COLS; i++) {
                uint c = min(c0 + i * WG_SIZE, n4 - 1u);
                [[unroll]] for (uint j = 0u; j < SUM_MAX_K; j++) {
                    if (j < pc.k) {
                        xs[i][j] = x.v[j * n4 + c];
                    }
                }
                rs[i] = res.v[c];
            }
            [[unroll]] for (uint i = 0u; i < SUM_COLS; i++) {
                uint c = c0 + i * WG_SIZE;
                if (c < n4) {
                    precise vec4 acc = xs[i][0] * wk[0];
                    [[unroll]] for (uint j = 1u; j < SUM_MAX_K; j++) {
                        if (j < pc.k) {
                            precise vec4 term = xs[i][j] * wk[j];
                            acc += term;
                        }
                    }
                    acc += rs[i];
                    sum.v[c] = acc;
                    ss += acc.x * acc.x + acc.y * acc.y + acc.z * acc.z + acc.w * acc.w;
                }
            }
        }
    } else {
        for (uint c = gl_LocalInvocationID.x; c < n4; c += WG_SIZE) {
            precise vec4 acc = x.v[c] * wt.v[0];
            for (uint j = 1u; j < pc.k; j++) {
                precise vec4 term = x.v[j * n4 + c] * wt.v[j];
                acc += term;
            }
            acc += res.v[c];
            sum.v[c] = acc;
            ss += acc.x * acc.x + acc.y * acc.y + acc.z * acc.z + acc.w * acc.w;
        }
    }
    // The sums visible to the invocations that normalise them.
    memoryBarrierBuffer();
    barrier();
    ss = wg_sum(ss);
    float scale = 1.0 / sqrt(ss / float(pc.cols) + pc.eps);
    normalise(pc.sum, pc.w, pc.out_, t, pc.cols, scale);
}
#else
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
    // NORM_UNROLL values an invocation loaded before they are summed (past
    // the group's end, zeros: + 0 changes no sum), in the same order.
    float ss = 0.0;
    for (uint i0 = gl_LocalInvocationID.x; i0 < pc.group; i0 += WG_SIZE * NORM_UNROLL) {
        float v[NORM_UNROLL];
        [[unroll]] for (uint j = 0u; j < NORM_UNROLL; j++) {
            uint i = i0 + j * WG_SIZE;
            v[j] = x.v[min(i, pc.group - 1u)];
            v[j] = i < pc.group ? v[j] : 0.0;
        }
        [[unroll]] for (uint j = 0u; j < NORM_UNROLL; j++) {
            ss += v[j] * v[j];
        }
    }
    ss = wg_sum(ss);
    float scale = 1.0 / sqrt(ss / float(pc.group) + pc.eps);
    normalise(x_at, second ? pc.w2 : pc.w, out_at, g, pc.group, scale);
}
#endif
