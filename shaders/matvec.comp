// Decode matmul (1..MV_MAX_TOKENS tokens): out[t][r] = x[t] . W[r] (+ bias[r]).
// One workgroup per weight row; every weight byte is read once and used for
// all tokens. Up to three matmuls of one input (Q/K/V, gate/up) run as one
// dispatch: the workgroup index picks the part.
//
// Short rows (fewer 8-value units than the workgroup has invocations, as
// in the tiny test models): the TEAMS variant (matvec_teams_*) splits the
// workgroup into `teams` teams of WG_SIZE / teams invocations, each with a
// row of its own, summed through shared memory (team_rows; core's
// gpu::matmul::row_teams picks the split). A real model's rows are one
// team: the kernel without TEAMS, which holds none of the split's code.
//
// ROUTE (moe_router_f32, f32 weights; MoeRouterPush): a decode step's
// router, one workgroup per expert, whose last workgroup to finish routes
// the logits as moe.comp's OP_ROUTE does (moe_route.glsl), so the routing
// takes no launch of its own. With NORM (moe_norm_router_f32; pc.norm_x
// set), the FFN norm in front of the router runs here too, in the same
// pass over the rows: each invocation sums the squares of the values it
// reads (f32, its own order: the plain norm's sum may differ in the last
// bit) beside the dot of the router's row with x * w, and the workgroup's
// sums are scaled by the token's 1 / sqrt(mean(x^2) + eps) at the end (the
// CPU scales x before the dot: the two differ at f32 rounding). Then the
// workgroup writes blocks of 32 r, r + n_expert, ... of the norm's output,
// (x * scale) * w as rmsnorm.comp writes them (and, with pc.q8, Q8-packed
// as rmsnorm_q8 does) for the experts.
#version 460
#extension GL_GOOGLE_include_directive : require
#ifdef ROUTE
#define NEEDS_REDUCE
#endif
#include "common.glsl"
#include "quant.glsl"
#ifdef ROUTE
#extension GL_EXT_control_flow_attributes : require
// Units of 8 floats an invocation loads before it sums them: a 2048- or
// 2880-column row's whole share for a workgroup of 32 (Qwen3-MoE's,
// gpt-oss's), so the loads are in flight together and a row costs one trip
// to memory, not one a unit (the rows are a few KiB: the trips, not the
// bytes, set the time). A router has a workgroup per expert, a few per
// compute unit at most, so the registers cost no occupancy.
#define ROUTER_UNROLL 12u
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer F32sC {
    float v[];
};
#include "counters.glsl"
#define LOGITS F32sC
#include "moe_route.glsl"
#ifdef NORM
#include "q8_packed.glsl"
#endif
#endif

layout(local_size_x = WG_SIZE) in;

#define MV_MAX_TOKENS 8

#ifdef ROUTE
// MoeRouterPush (rocmforge_core::gpu::push): the router's f32 rows, then
// the routing.
layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w;
    uint64_t bias;
    uint64_t logits;
    uint64_t ids;
    uint64_t weights;
    uint64_t counter;
    uint64_t norm_x; // 0: no norm in front
    uint64_t norm_w;
    uint64_t q8; // 0: the norm's output in f32 only
    uint64_t q8_scales;
    uint cols;
    uint n_expert;
    uint n;
    uint k;
    uint normalize;
    float eps;
} pc;
#ifdef NORM
// Each token's norm scale, 1 / sqrt(mean(x^2) + eps).
float norm_scale[MV_MAX_TOKENS];
#endif
#else
layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w[3];
    uint64_t out_[3];
    uint64_t bias[3];
    uint rows[3];
    uint k;
    uint n;
    uint n_parts;
    uint64_t x_scales; // matvec_int's
    uint64_t residual; // matvec_int's
    // Teams a workgroup is split into, a row each (a power of two).
    uint teams;
} pc;
#endif

shared float part_sums[MV_MAX_TOKENS * WG_SIZE];

// Row r of W (at `row`, k columns) against the n tokens of x, written to
// out[t * m + r] with bias[r] added (bias 0: none).
void matvec_row(uint64_t x_at, uint64_t row, uint k, uint n, uint64_t bias, uint64_t out_at,
                uint m, uint r) {
    uint units = k / 8u;
    V4s x = V4s(x_at);
    float acc[MV_MAX_TOKENS];
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        acc[t] = 0.0;
    }
#ifdef ROUTE
#ifdef NORM
    float ss[MV_MAX_TOKENS];
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        ss[t] = 0.0;
    }
#endif
    // The router's f32 rows: ROUTER_UNROLL units an invocation loaded
    // before they are summed (the same sums in the same order).
    for (uint u0 = gl_LocalInvocationID.x; u0 < units; u0 += WG_SIZE * ROUTER_UNROLL) {
        vec4 lo[ROUTER_UNROLL];
        vec4 hi[ROUTER_UNROLL];
        [[unroll]] for (uint j = 0u; j < ROUTER_UNROLL; j++) {
            uint u = min(u0 + j * WG_SIZE, units - 1u);
            dequant8(row, u / QUANT_UNITS, u % QUANT_UNITS, lo[j], hi[j]);
        }
#ifdef NORM
        // The norm's weights with them.
        vec4 nlo[ROUTER_UNROLL];
        vec4 nhi[ROUTER_UNROLL];
        [[unroll]] for (uint j = 0u; j < ROUTER_UNROLL; j++) {
            uint col = 2u * min(u0 + j * WG_SIZE, units - 1u);
            nlo[j] = V4s(pc.norm_w).v[col];
            nhi[j] = V4s(pc.norm_w).v[col + 1u];
        }
#endif
        // A token's activations are loaded for all units before any is
        // summed too (past the row's end, the last unit again: loaded,
        // never summed).
        [[unroll]] for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t < n) {
                vec4 xlo[ROUTER_UNROLL];
                vec4 xhi[ROUTER_UNROLL];
                [[unroll]] for (uint j = 0u; j < ROUTER_UNROLL; j++) {
                    uint col = 2u * min(u0 + j * WG_SIZE, units - 1u);
                    uint base = (t * k) / 4u + col;
                    xlo[j] = x.v[base];
                    xhi[j] = x.v[base + 1u];
                }
                [[unroll]] for (uint j = 0u; j < ROUTER_UNROLL; j++) {
                    if (u0 + j * WG_SIZE < units) {
#ifdef NORM
                        ss[t] += dot(xlo[j], xlo[j]) + dot(xhi[j], xhi[j]);
                        acc[t] += dot(lo[j], xlo[j] * nlo[j]) + dot(hi[j], xhi[j] * nhi[j]);
#else
                        acc[t] += dot(lo[j], xlo[j]) + dot(hi[j], xhi[j]);
#endif
                    }
                }
            }
        }
    }
#ifdef NORM
    // Each token's scale, and the sums scaled by it.
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        if (t < n) { // uniform
            norm_scale[t] = 1.0 / sqrt(wg_sum(ss[t]) / float(k) + pc.eps);
            acc[t] *= norm_scale[t];
        }
    }
#endif
#else
    for (uint u = gl_LocalInvocationID.x; u < units; u += WG_SIZE) {
        vec4 lo, hi;
        dequant8(row, u / QUANT_UNITS, u % QUANT_UNITS, lo, hi);
        for (uint t = 0u; t < n; t++) {
            uint base = (t * k) / 4u + 2u * u;
            acc[t] += dot(lo, x.v[base]) + dot(hi, x.v[base + 1u]);
        }
    }
#endif
    // Subgroup sums of the n tokens in use (n is uniform), then one slot
    // per subgroup in shared memory.
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        if (t < n) {
            acc[t] = subgroupAdd(acc[t]);
        }
    }
    if (subgroupElect()) {
        for (uint t = 0u; t < n; t++) {
            part_sums[t * WG_SIZE + gl_SubgroupID] = acc[t];
        }
    }
    memoryBarrierShared();
    barrier();
    uint t = gl_LocalInvocationID.x;
    if (t < n) {
        float s = 0.0;
        for (uint i = 0u; i < gl_NumSubgroups; i++) {
            s += part_sums[t * WG_SIZE + i];
        }
        if (bias != 0ul) {
            s += F32s(bias).v[r];
        }
#ifdef ROUTE
        F32sC(out_at).v[t * m + r] = s;
#else
        F32s(out_at).v[t * m + r] = s;
#endif
    }
}

#ifdef ROUTE
// One workgroup per expert; the last to finish (counters.glsl) routes
// every token (moe_route.glsl; a workgroup of 32, one subgroup on NVIDIA
// and RDNA's wave32, as moe.comp's OP_ROUTE). Logits are written and read
// through coherent references.
#ifdef NORM
// This workgroup's blocks of the norm's output (r, r + n_expert, ... over
// the tokens' blocks in order), each by one invocation, at the scales
// matvec_row took.
void norm_rows(uint r) {
    uint c4 = pc.cols / 4u;
    V4s src = V4s(pc.norm_x);
    uint nb = pc.cols / 32u;
    V4s nw = V4s(pc.norm_w);
    V4s o = V4s(pc.x);
    for (uint gb = r + gl_LocalInvocationID.x * pc.n_expert; gb < pc.n * nb;
         gb += WG_SIZE * pc.n_expert) {
        uint t = gb / nb;
        uint b = gb % nb;
        vec4 v[8];
        for (uint j = 0u; j < 8u; j++) {
            v[j] = src.v[t * c4 + b * 8u + j] * norm_scale[t] * nw.v[b * 8u + j];
        }
        for (uint j = 0u; j < 8u; j++) {
            o.v[t * c4 + b * 8u + j] = v[j];
        }
        if (pc.q8 != 0ul) {
            store_q8_packed(v, pc.q8, pc.q8_scales, gb);
        }
    }
}
#endif

void main() {
    uint r = wg_linear();
    if (r >= pc.n_expert) {
        return; // the whole workgroup, and none is counted
    }
#ifdef NORM
    uint64_t x_at = pc.norm_x;
#else
    uint64_t x_at = pc.x;
#endif
    matvec_row(x_at, pc.w + uint64_t(r) * (uint64_t(pc.cols) * QUANT_BLOCK_BYTES / QUANT_K), pc.cols,
               pc.n, pc.bias, pc.logits, pc.n_expert, r);
#ifdef NORM
    norm_rows(r);
#endif
    if (!last_to_finish(pc.counter, pc.n_expert)) {
        return;
    }
    RouteArgs args = RouteArgs(pc.logits, pc.ids, pc.weights, pc.n_expert, pc.k, pc.normalize);
    for (uint t = 0u; t < pc.n; t++) {
        route_token(args, t);
    }
}
#else
// A workgroup split into pc.teams teams of `lanes` invocations, a row each
// (r0 + team): each invocation sums its units lane, lane + lanes, ... of
// its team's row, leaves its sums in shared memory, and sum team * n + t
// (the team's lanes for token t) is taken by invocation (that index) %
// WG_SIZE. Rows from the part's end on are read (the last row again) but
// not written.
void team_rows() {
    uint teams = pc.teams;
    uint g = wg_linear();
    uint p = 0u;
    while (p < pc.n_parts && g >= (pc.rows[p] + teams - 1u) / teams) {
        g -= (pc.rows[p] + teams - 1u) / teams;
        p++;
    }
    if (p >= pc.n_parts) {
        return;
    }
    uint m = pc.rows[p];
    uint n = pc.n;
    uint k = pc.k;
    uint lanes = WG_SIZE / teams;
    uint i = gl_LocalInvocationID.x;
    uint r0 = g * teams;
    uint r = min(r0 + i / lanes, m - 1u);
    uint64_t row = pc.w[p] + uint64_t(r) * (uint64_t(k) * QUANT_BLOCK_BYTES / QUANT_K);
    uint units = k / 8u;
    V4s x = V4s(pc.x);
    float acc[MV_MAX_TOKENS];
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        acc[t] = 0.0;
    }
    for (uint u = i % lanes; u < units; u += lanes) {
        vec4 lo, hi;
        dequant8(row, u / QUANT_UNITS, u % QUANT_UNITS, lo, hi);
        for (uint t = 0u; t < n; t++) {
            uint base = (t * k) / 4u + 2u * u;
            acc[t] += dot(lo, x.v[base]) + dot(hi, x.v[base + 1u]);
        }
    }
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        if (t < n) {
            part_sums[t * WG_SIZE + i] = acc[t];
        }
    }
    memoryBarrierShared();
    barrier();
    // Up to WG_SIZE * n sums: an invocation may take several.
    for (uint o = i; o < teams * n; o += WG_SIZE) {
        uint team = o / n;
        uint t = o % n;
        uint rt = r0 + team;
        if (rt < m) {
            float s = 0.0;
            for (uint j = 0u; j < lanes; j++) {
                s += part_sums[t * WG_SIZE + team * lanes + j];
            }
            if (pc.bias[p] != 0ul) {
                s += F32s(pc.bias[p]).v[rt];
            }
            F32s(pc.out_[p]).v[t * m + rt] = s;
        }
    }
}

void main() {
#ifdef TEAMS
    team_rows();
    return;
#endif
    uint r = wg_linear();
    uint p = 0u;
    while (p < pc.n_parts && r >= pc.rows[p]) {
        r -= pc.rows[p];
        p++;
    }
    if (p >= pc.n_parts) {
        return;
    }
    // Plain float rows may end mid-"block": size rows by elements.
    uint64_t row = pc.w[p] + uint64_t(r) * (uint64_t(pc.k) * QUANT_BLOCK_BYTES / QUANT_K);
    matvec_row(pc.x, row, pc.k, pc.n, pc.bias[p], pc.out_[p], pc.rows[p], r);
}
#endif
