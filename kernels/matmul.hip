// Prefill matmul, portable (shaders/matmul.comp):
//   out[p][t][r] = x[t] . W_p[r] (+ bias_p[r])
// for many tokens, in f32: F32 weights always, and graphs of fewer tokens
// than the matrix-core kernel takes. x is f32, already rounded the way the
// CPU reference quantizes it for the weight type.
//
// A workgroup of MMP_WG computes a tile of MMP_BM weight rows x MMP_BN
// tokens, stepping k by MMP_BK: the weight tile is dequantized into shared
// memory once per step and reused by all the tile's tokens (k need only be
// a multiple of 8; the last step is zero-padded). Each invocation owns 4
// rows x 4 tokens, accumulated in k order with rounded f32 products, as in
// the shader; here they are 4 neighbouring rows and tokens (one 16-byte
// shared read each per k), where the shader strides them by 16 and 8.
//
// Kernels: matmul_<ty> for every weight type, argument block MatPush
// (x_scales and residual unused), grid: sum over parts of
// ceil(rows / 64) * ceil(n / 32) (wg_linear).
//
// matmul_id_<ty>: the grouped expert matmul (the shader's MAT_ID) on the
// same tiles: the tile's tokens are up to 32 pairs of one expert, one slot
// of moe_group's table (mat_common.h's group_tile). Argument block
// MatGroupPush, grid: slots * ceil(rows / 64).
#include "mat_common.h"

#define MMP_WG 128u
#define MMP_BM 64u
#define MMP_BN 32u
#define MMP_BK 32u

// The tile of weight rows r0.. (m in all) and nt tokens (rows: where they
// read and write) of out = x . W (+ bias).
template <typename Q, typename Rows>
DEV void matmul_portable_tile(const uint8_t* w, uint32_t m, uint32_t r0, uint32_t nt,
                              const Rows& rows, const float4* x, uint32_t k, float* o,
                              const float* bias) {
    // k-major tiles; rows padded by 4 floats to keep 16-byte alignment.
    __shared__ __attribute__((aligned(16))) float ws[MMP_BK][MMP_BM + 4u];
    __shared__ __attribute__((aligned(16))) float xs[MMP_BK][MMP_BN + 4u];
    const uint32_t tid = thread_id_x();
    const uint32_t tr = tid % 16u;
    const uint32_t tc = tid / 16u;
    constexpr uint32_t UNITS = Q::K / 8u;
    const uint64_t row_bytes = row_bytes_of<Q>(k);

    float acc[4][4];
#pragma unroll
    for (uint32_t i = 0u; i < 4u; i++) {
#pragma unroll
        for (uint32_t j = 0u; j < 4u; j++) {
            acc[i][j] = 0.0f;
        }
    }
    for (uint32_t k0 = 0u; k0 < k; k0 += MMP_BK) {
        // Weights: 64 rows x 4 units of 8.
#pragma unroll
        for (uint32_t sl = 0u; sl < 2u; sl++) {
            uint32_t q = tid + MMP_WG * sl;
            uint32_t rr = q / 4u;
            uint32_t j = q % 4u;
            uint32_t u = k0 / 8u + j;
            float8 v = (float8)(0.0f);
            if (r0 + rr < m && u < k / 8u) {
                v = Q::dequant8(w + (uint64_t)(r0 + rr) * row_bytes, u / UNITS, u % UNITS);
            }
#pragma unroll
            for (uint32_t e = 0u; e < 8u; e++) {
                ws[8u * j + e][rr] = v[e];
            }
        }
        // Activations: 32 tokens x 8 float4.
#pragma unroll
        for (uint32_t sl = 0u; sl < 2u; sl++) {
            uint32_t q = tid + MMP_WG * sl;
            uint32_t tt = q / 8u;
            uint32_t c4 = q % 8u;
            float4 v = (float4)(0.0f);
            if (tt < nt && k0 + 4u * c4 < k) {
                v = x[((uint64_t)x_row(rows, tt) * k + k0) / 4u + c4];
            }
#pragma unroll
            for (uint32_t e = 0u; e < 4u; e++) {
                xs[4u * c4 + e][tt] = v[e];
            }
        }
        block_barrier();
#pragma unroll
        for (uint32_t kk = 0u; kk < MMP_BK; kk++) {
            float4 a = *(const float4*)&ws[kk][4u * tr];
            float4 b = *(const float4*)&xs[kk][4u * tc];
#pragma unroll
            for (uint32_t i = 0u; i < 4u; i++) {
#pragma unroll
                for (uint32_t j = 0u; j < 4u; j++) {
                    acc[i][j] += a[i] * b[j];
                }
            }
        }
        block_barrier();
    }
#pragma unroll
    for (uint32_t i = 0u; i < 4u; i++) {
        uint32_t r = r0 + 4u * tr + i;
        if (r >= m) {
            continue;
        }
        float bv = bias != nullptr ? bias[r] : 0.0f;
#pragma unroll
        for (uint32_t j = 0u; j < 4u; j++) {
            uint32_t tt = 4u * tc + j;
            if (tt < nt) {
                o[(uint64_t)out_row(rows, tt) * m + r] = acc[i][j] + bv;
            }
        }
    }
}

template <typename Q> DEV void matmul_portable(const MatPush& s) {
    const uint32_t n = s.n;
    const uint32_t tiles_n = (n + MMP_BN - 1u) / MMP_BN;
    uint32_t tile = wg_linear();
    const uint32_t count[3] = {(s.rows[0] + MMP_BM - 1u) / MMP_BM * tiles_n,
                               (s.rows[1] + MMP_BM - 1u) / MMP_BM * tiles_n,
                               (s.rows[2] + MMP_BM - 1u) / MMP_BM * tiles_n};
    const uint32_t p = find_part(s.n_parts, count, tile);
    if (p >= s.n_parts) {
        return;
    }
    const uint32_t m = part_u32(s.rows, p);
    const uint32_t k = s.k;
    const uint32_t r0 = (tile / tiles_n) * MMP_BM;
    const uint32_t t0 = (tile % tiles_n) * MMP_BN;
    const uint64_t bias = part_u64(s.bias, p);
    matmul_portable_tile<Q>(dev_ptr<const uint8_t>(part_u64(s.w, p)), m, r0, n - t0,
                            DenseRows{t0}, dev_ptr<const float4>(s.x), k,
                            dev_ptr<float>(part_u64(s.out, p)),
                            bias != 0u ? dev_ptr<const float>(bias) : nullptr);
}

template <typename Q> DEV void matmul_id_portable(const MatGroupPush& s) {
    __shared__ uint32_t pairs[MMP_BN];
    __shared__ uint32_t x_rows[MMP_BN];
    const GroupTile g = group_tile<MMP_BM, MMP_BN, MMP_WG>(s, pairs, x_rows);
    if (!g.used) {
        return;
    }
    matmul_portable_tile<Q>(group_weights(s, g), s.rows, g.r0, g.n, GroupRows{pairs, x_rows},
                            dev_ptr<const float4>(s.x), s.k, dev_ptr<float>(s.out),
                            group_bias(s, g));
}

#define MATMUL_KERNEL(ty, Q)                                                                        \
    KERNEL LAUNCH_BOUNDS(MMP_WG) void matmul_##ty(MatPush s) { matmul_portable<Q>(s); }           \
    KERNEL LAUNCH_BOUNDS(MMP_WG) void matmul_id_##ty(MatGroupPush s) { matmul_id_portable<Q>(s); }
RF_WEIGHT_TYPES(MATMUL_KERNEL)
#undef MATMUL_KERNEL
