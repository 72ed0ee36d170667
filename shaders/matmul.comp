// Prefill matmul: out[t][r] = x[t] . W[r] (+ bias[r]) for many tokens.
// Portable tiling in shared memory: a workgroup of 128 invocations computes
// a tile of 64 weight rows x 32 tokens, stepping k by 32 (weights
// dequantized into shared memory once per tile and reused by 32 tokens;
// k need only be a multiple of 8, the last step is zero-padded);
// each invocation owns 4 rows x 4 tokens. Same push constants and part
// fusion as matvec.comp.
//
// MAT_ID: the grouped expert matmul (ggml's mul_mat_id). Output row p (a
// (token, choice) pair) is expert ids[p] times x row p / x_div; a
// workgroup's tokens are one slot of moe_group's table (moe.comp): up to 32
// pairs of one expert, gathered through the table's `order`, so the
// expert's rows are read once per 32 pairs instead of once per pair. The
// grid is slots x row tiles; unused slots return at once.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

#define BM 64
#define BN 32
#define BK 32
layout(local_size_x = 128) in;

#ifdef MAT_ID
#define MAT_ID_MAX_TOKENS BN
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

shared float ws[BK][BM + 1];
shared float xs[BK][BN + 1];

void main() {
    uint tid = gl_LocalInvocationID.x;
#ifdef MAT_ID
    MatIdTile g = mat_id_tile(BM, BN);
    if (!g.used) {
        return;
    }
    uint m = pc.rows;
    uint r0 = g.r0;
    uint64_t wbase = g.w;
#else
    uint tiles_n = (pc.n + BN - 1u) / BN;
    uint tile = wg_linear();
    uint p = 0u;
    while (p < pc.n_parts) {
        uint tiles = ((pc.rows[p] + BM - 1u) / BM) * tiles_n;
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
    uint r0 = (tile / tiles_n) * BM;
    uint t0 = (tile % tiles_n) * BN;
    uint64_t wbase = pc.w[p];
#endif
    uint tr = tid % 16u;
    uint tc = tid / 16u;
    // Plain float rows may end mid-"block": size rows by elements.
    uint64_t row_bytes = uint64_t(pc.k) * QUANT_BLOCK_BYTES / QUANT_K;
    V4s x = V4s(pc.x);

    float acc[4][4];
    for (uint i = 0u; i < 4u; i++) {
        for (uint j = 0u; j < 4u; j++) {
            acc[i][j] = 0.0;
        }
    }
    for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
        // Weights: 64 rows x 4 units of 8.
        for (uint s = 0u; s < 2u; s++) {
            uint q = tid + 128u * s;
            uint rr = q / 4u;
            uint j = q % 4u;
            vec4 lo = vec4(0.0);
            vec4 hi = vec4(0.0);
            uint u = k0 / 8u + j;
            if (r0 + rr < m && u < pc.k / 8u) {
                dequant8(wbase + uint64_t(r0 + rr) * row_bytes, u / QUANT_UNITS,
                         u % QUANT_UNITS, lo, hi);
            }
            for (uint e = 0u; e < 4u; e++) {
                ws[8u * j + e][rr] = lo[e];
                ws[8u * j + 4u + e][rr] = hi[e];
            }
        }
        // Activations: 32 tokens x 8 vec4.
        for (uint s = 0u; s < 2u; s++) {
            uint q = tid + 128u * s;
            uint tt = q / 8u;
            uint c4 = q % 8u;
            vec4 v = vec4(0.0);
#ifdef MAT_ID
            if (tt < g.n && k0 + 4u * c4 < pc.k) {
                v = x.v[(mat_id_x_row(tt) * pc.k + k0) / 4u + c4];
            }
#else
            if (t0 + tt < pc.n && k0 + 4u * c4 < pc.k) {
                v = x.v[((t0 + tt) * pc.k + k0) / 4u + c4];
            }
#endif
            for (uint e = 0u; e < 4u; e++) {
                xs[4u * c4 + e][tt] = v[e];
            }
        }
        memoryBarrierShared();
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float a[4];
            float b[4];
            for (uint i = 0u; i < 4u; i++) {
                a[i] = ws[kk][tr + 16u * i];
                b[i] = xs[kk][tc + 8u * i];
            }
            for (uint i = 0u; i < 4u; i++) {
                for (uint j = 0u; j < 4u; j++) {
                    acc[i][j] += a[i] * b[j];
                }
            }
        }
        memoryBarrierShared();
        barrier();
    }
#ifdef MAT_ID
    F32s o = F32s(pc.out_);
    for (uint i = 0u; i < 4u; i++) {
        uint r = r0 + tr + 16u * i;
        if (r >= m) {
            continue;
        }
        float b = pc.bias != 0ul ? F32s(pc.bias).v[g.expert * m + r] : 0.0;
        for (uint j = 0u; j < 4u; j++) {
            uint tt = tc + 8u * j;
            if (tt < g.n) {
                o.v[mat_id_pair(tt) * m + r] = acc[i][j] + b;
            }
        }
    }
#else
    F32s o = F32s(pc.out_[p]);
    for (uint i = 0u; i < 4u; i++) {
        uint r = r0 + tr + 16u * i;
        if (r >= m) {
            continue;
        }
        float b = pc.bias[p] != 0ul ? F32s(pc.bias[p]).v[r] : 0.0;
        for (uint j = 0u; j < 4u; j++) {
            uint t = t0 + tc + 8u * j;
            if (t < pc.n) {
                o.v[t * m + r] = acc[i][j] + b;
            }
        }
    }
#endif
}
