// Prefill matmul on matrix cores (VK_KHR_cooperative_matrix):
// out[t][r] = x[t] . W[r] (+ bias[r]), the product of an activation tile
// (tokens x k, A) and a weight tile (k x rows, B) in 16x16x16 f16 steps with
// f32 accumulators. Same push constants and part fusion as matmul.comp.
//
// A workgroup of WARPS_T x WARPS_R subgroups (of 32: the host enables this
// kernel only there) computes BT tokens x BR rows; each subgroup owns
// FT x FR accumulators of 16x16. k steps by BK = 32: the weight tile is
// dequantized (dequant8) into shared memory as f16, the activation tile
// (already rounded the ggml way by quantize_act, f32) converted to f16.
// Rows, tokens and k past the end are zero-filled (k need only be a
// multiple of 8), so every shape the portable kernel takes works here.
//
// MAT_ID: the grouped expert matmul, as in matmul.comp (mat_id.glsl): the
// workgroup's tokens are the pairs of one slot of moe_group's table.
#version 460
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#include "quant.glsl"

#ifndef WARPS_T
#define WARPS_T 2
#endif
#ifndef WARPS_R
#define WARPS_R 4
#endif
#ifndef FT
#define FT 4
#endif
#ifndef FR
#define FR 2
#endif
#define BT (WARPS_T * FT * 16)
#define BR (WARPS_R * FR * 16)
#define NT (WARPS_T * WARPS_R * 32)
#define BK 32
// Row stride of the shared tiles in f16vec4 (10 = 80 bytes: keeps 16-byte
// alignment and spreads rows over the banks). Tiles are f16vec4 arrays so
// each store is one 8-byte store; coopMatLoad counts element and stride in
// f16vec4 units then.
#define SA4 ((BK + 8) / 4)

layout(local_size_x = NT) in;

#ifdef MAT_ID
#define MAT_ID_MAX_TOKENS BT
#include "mat_id.glsl"
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
} pc;
#endif

// Row of x that token tt of a tile starting at token t0 reads (tt below
// the tile's token count).
#ifdef MAT_ID
#define X_ROW(t0, tt) mat_id_x_row(tt)
#else
#define X_ROW(t0, tt) ((t0) + (tt))
#endif

shared f16vec4 as_[BT * SA4];
shared f16vec4 bs_[BR * SA4];
// One 16x16 f32 staging tile per subgroup for the bounded, biased store.
shared float st_[WARPS_T * WARPS_R * 256];

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>

// Weight units of 8 and activation vec4 per invocation per k step.
#define NU (BR * 4 / NT)
#define NA (BT * 8 / NT)

// Global -> registers: the weight tile (BR rows x 4 units of 8, dequantized)
// and the activation tile (BT tokens x 8 vec4, nt of them real) of step k0.
void load_tile(uint k0, uint64_t wbase, uint64_t row_bytes, uint m, uint r0, uint t0, uint nt,
               uint k8, V4s x, out vec4 wv[NU * 2], out vec4 av[NA]) {
    uint tid = gl_LocalInvocationID.x;
    for (uint s = 0u; s < NU; s++) {
        uint q = tid + NT * s;
        uint rr = q / 4u;
        uint u = k0 / 8u + q % 4u;
        bool ok = r0 + rr < m && u < k8;
        uint r = min(r0 + rr, m - 1u);
        uint uu = min(u, k8 - 1u);
        vec4 lo;
        vec4 hi;
        dequant8(wbase + uint64_t(r) * row_bytes, uu / QUANT_UNITS, uu % QUANT_UNITS, lo, hi);
        wv[2u * s] = ok ? lo : vec4(0.0);
        wv[2u * s + 1u] = ok ? hi : vec4(0.0);
    }
    for (uint s = 0u; s < NA; s++) {
        uint q = tid + NT * s;
        uint tt = q / 8u;
        uint c4 = q % 8u;
        bool ok = tt < nt && k0 + 4u * c4 < pc.k;
        uint t = X_ROW(t0, min(tt, nt - 1u));
        uint kk = min(k0 + 4u * c4, pc.k - 4u);
        vec4 v = x.v[(t * pc.k + kk) / 4u];
        av[s] = ok ? v : vec4(0.0);
    }
}

// Registers -> shared memory, as f16.
void store_tile(vec4 wv[NU * 2], vec4 av[NA]) {
    uint tid = gl_LocalInvocationID.x;
    for (uint s = 0u; s < NU; s++) {
        uint q = tid + NT * s;
        uint rr = q / 4u;
        uint j = q % 4u;
        bs_[rr * SA4 + 2u * j] = f16vec4(wv[2u * s]);
        bs_[rr * SA4 + 2u * j + 1u] = f16vec4(wv[2u * s + 1u]);
    }
    for (uint s = 0u; s < NA; s++) {
        uint q = tid + NT * s;
        as_[(q / 8u) * SA4 + q % 8u] = f16vec4(av[s]);
    }
}

// The subgroup's FT x FR accumulators += its A rows x B columns of the
// tile in shared memory.
void mma_step(uint wt, uint wr, inout ACC acc[FT][FR]) {
    for (uint kk = 0u; kk < BK; kk += 16u) {
        MA a[FT];
        MB b[FR];
        for (uint i = 0u; i < FT; i++) {
            coopMatLoad(a[i], as_, (wt * FT * 16u + 16u * i) * SA4 + kk / 4u, SA4,
                        gl_CooperativeMatrixLayoutRowMajor);
        }
        for (uint j = 0u; j < FR; j++) {
            coopMatLoad(b[j], bs_, (wr * FR * 16u + 16u * j) * SA4 + kk / 4u, SA4,
                        gl_CooperativeMatrixLayoutColumnMajor);
        }
        for (uint i = 0u; i < FT; i++) {
            for (uint j = 0u; j < FR; j++) {
                acc[i][j] = coopMatMulAdd(a[i], b[j], acc[i][j]);
            }
        }
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
#ifdef MAT_ID
    MatIdTile g = mat_id_tile(BR, BT);
    if (!g.used) {
        return;
    }
    uint m = pc.rows;
    uint r0 = g.r0;
    uint t0 = 0u;
    uint nt = g.n;
    uint64_t wbase = g.w;
#else
    uint tiles_t = (pc.n + BT - 1u) / BT;
    uint tile = wg_linear();
    uint p = 0u;
    while (p < pc.n_parts) {
        uint tiles = ((pc.rows[p] + BR - 1u) / BR) * tiles_t;
        if (tile < tiles) {
            break;
        }
        tile -= tiles;
        p++;
    }
    if (p >= pc.n_parts) {
        return;
    }
    uint m = pc.rows[p];
    uint r0 = (tile / tiles_t) * BR;
    uint t0 = (tile % tiles_t) * BT;
    uint nt = pc.n - t0;
    uint64_t wbase = pc.w[p];
#endif
    uint warp = gl_SubgroupID;
    uint wt = warp % WARPS_T;
    uint wr = warp / WARPS_T;
    uint64_t row_bytes = uint64_t(pc.k) * QUANT_BLOCK_BYTES / QUANT_K;
    V4s x = V4s(pc.x);
    uint k8 = pc.k / 8u;

    ACC acc[FT][FR];
    for (uint i = 0u; i < FT; i++) {
        for (uint j = 0u; j < FR; j++) {
            acc[i][j] = ACC(0.0);
        }
    }
#ifdef PREFETCH
    // Registers hold the next k step's tile while the matrix cores work on
    // the current one from shared memory: global loads are issued before
    // the multiply-adds and consumed after them. Out-of-range rows and k
    // read a clamped (valid) address and are zeroed by a select, so the
    // loads carry no branches.
    vec4 wv[NU * 2u];
    vec4 av[NA];
    for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
        if (k0 == 0u) {
            load_tile(0u, wbase, row_bytes, m, r0, t0, nt, k8, x, wv, av);
        }
        store_tile(wv, av);
        memoryBarrierShared();
        barrier();
        if (k0 + BK < pc.k) {
            load_tile(k0 + BK, wbase, row_bytes, m, r0, t0, nt, k8, x, wv, av);
        }
        mma_step(wt, wr, acc);
        memoryBarrierShared();
        barrier();
    }
#else
    for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
        vec4 wv[NU * 2u];
        vec4 av[NA];
        load_tile(k0, wbase, row_bytes, m, r0, t0, nt, k8, x, wv, av);
        store_tile(wv, av);
        memoryBarrierShared();
        barrier();
        mma_step(wt, wr, acc);
        memoryBarrierShared();
        barrier();
    }
#endif

#ifdef MAT_ID
    F32s o = F32s(pc.out_);
    bool has_bias = pc.bias != 0ul;
    uint64_t bias = pc.bias + uint64_t(g.expert) * m * 4ul;
#else
    F32s o = F32s(pc.out_[p]);
    bool has_bias = pc.bias[p] != 0ul;
    uint64_t bias = pc.bias[p];
#endif
    uint lane = gl_SubgroupInvocationID;
    uint sbase = warp * 256u;
    for (uint i = 0u; i < FT; i++) {
        for (uint j = 0u; j < FR; j++) {
            coopMatStore(acc[i][j], st_, sbase, 16u, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < 256u; e += gl_SubgroupSize) {
                uint tt = wt * FT * 16u + 16u * i + e / 16u;
                uint r = r0 + wr * FR * 16u + 16u * j + e % 16u;
                if (tt < nt && r < m) {
                    float b = has_bias ? F32s(bias).v[r] : 0.0;
#ifdef MAT_ID
                    o.v[mat_id_pair(tt) * m + r] = st_[sbase + e] + b;
#else
                    o.v[(t0 + tt) * m + r] = st_[sbase + e] + b;
#endif
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
    }
}
