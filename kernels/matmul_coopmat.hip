// Prefill matmul on the matrix cores (shaders/matmul_coopmat.comp):
// out[p][t][r] = x[t] . W_p[r] (+ bias_p[r]) through the prelude's
// fragment operation (WMMA on RDNA3/RDNA4, mma.sync on NVIDIA, f32 FMAs
// from shared memory on gfx10). Two tilings, the shader's variants:
//
//   matmul_cmps_<ty>  64 tokens x 64 rows, 4 waves of 2 x 2 fragments
//                     (WARPS_T = WARPS_R = FT = FR = 2);
//   matmul_cmp_<ty>   128 x 128, 8 waves (2 along tokens x 4 along rows)
//                     of 4 x 2 fragments (the shader's defaults), half the
//                     dequantization and shared-memory traffic per product;
//                     the lowering takes it where its tiles still fill the
//                     device (rocmforge_core::gpu::matmul, coopmat_big).
//
// Wave w owns tokens FT*16 (w % WT).. and rows FR*16 (w / WT).. as FT x FR
// fragments of 16 x 16. k steps by 32: the weight tile is dequantized
// (dequant8) and the activation tile (already rounded the ggml way by a
// quantize kernel) read as f32, both converted to f16 (round to nearest
// even) into shared memory; products accumulate in f32. Rows, tokens and
// k past the end are zero-filled (k need only be a multiple of 8). Where
// the fragments run on matrix cores, the next step's tile is loaded into
// registers (as f16) while they work on the current one (the shader's
// PREFETCH); out-of-range rows and k read a clamped, valid address and are
// zeroed by a select, so the loads carry no branches.
//
// Argument block MatPush (x_scales and residual unused), grid: sum over
// parts of ceil(rows / BR) * ceil(n / BT) (wg_linear).
//
//   matmul_id_cms_<ty>  the grouped expert matmul (the shader's MAT_ID) on
//                     the 64 x 64 tiling: the tile's tokens are up to 64
//                     pairs of one expert, one slot of moe_group's table
//                     (mat_common.h's group_tile). Argument block
//                     MatGroupPush, grid: slots * ceil(rows / 64).
#include "mat_common.h"

// A tiling: WT x WR waves, each FT x FR fragments.
template <uint32_t WT_, uint32_t WR_, uint32_t FT_, uint32_t FR_> struct MmcShape {
    static constexpr uint32_t WT = WT_;
    static constexpr uint32_t WR = WR_;
    static constexpr uint32_t FT = FT_;
    static constexpr uint32_t FR = FR_;
    static constexpr uint32_t WG = WT * WR * WAVE_SIZE;
    static constexpr uint32_t BT = WT * FT * 16u; // tokens per tile
    static constexpr uint32_t BR = WR * FR * 16u; // weight rows per tile
    // Weight units of 8 and activation quads per invocation per k step.
    static constexpr uint32_t NU = BR * 4u / WG;
    static constexpr uint32_t NA = BT * 8u / WG;
    static_assert(NU * WG == BR * 4u && NA * WG == BT * 8u, "whole units per invocation");
};
using MmcSmall = MmcShape<2u, 2u, 2u, 2u>;
using MmcBig = MmcShape<2u, 4u, 4u, 2u>;

#define MMC_BK 32u
// Row stride of the shared tiles in halves: 80 bytes keeps rows 16-byte
// aligned (fragment loads) and spreads them over the banks.
#define MMC_LD (MMC_BK + 8u)

// Register prefetch of the next k step (the shader's PREFETCH) where the
// fragment operation runs on matrix cores. Not on the FMA path (gfx10):
// its multiply holds 16 A rows per lane, which leaves no registers for a
// tile in flight (~150 VGPRs with it, 83 without).
#if RF_MMA_GENERIC
#define MMC_PREFETCH false
#else
#define MMC_PREFETCH true
#endif

// Hard caps at the budgets (tests/code_objects.rs): without one clang-19
// gives some K-quant variants of the small tiling 129-130 VGPRs on gfx11,
// with it 99 and no spills (the static checks would catch one). The big
// tiling's 64 accumulator VGPRs leave the K-quants' dequantization too
// few under 128 (spills on gfx11); 160 still keeps 9 waves per SIMD. The
// grouped small tiling takes 160 too: its gathered rows cost Q4_K 13
// spilled VGPRs under 128 on gfx11.
#if RF_AMDGPU
#define MMC_REGS_SMALL __attribute__((amdgpu_num_vgpr(128)))
#define MMC_REGS_BIG __attribute__((amdgpu_num_vgpr(160)))
#else
#define MMC_REGS_SMALL
#define MMC_REGS_BIG
#endif

typedef half half4 __attribute__((ext_vector_type(4)));

// One k step's tiles in registers, already f16.
template <typename S> struct MmcTile {
    half8 w[S::NU];
    half4 a[S::NA];
};

// Tokens tt < nt of the tile are real; rows says which x row each reads.
template <typename S, typename Q, typename Rows>
DEV void mmc_load(MmcTile<S>& tile, uint32_t k0, const uint8_t* w, uint64_t row_bytes,
                  uint32_t m, uint32_t r0, const Rows& rows, uint32_t nt, const float4* x,
                  uint32_t k) {
    constexpr uint32_t UNITS = Q::K / 8u;
    const uint32_t tid = thread_id_x();
    const uint32_t k8 = k / 8u;
#pragma unroll
    for (uint32_t s = 0u; s < S::NU; s++) {
        uint32_t q = tid + S::WG * s;
        uint32_t rr = q / 4u;
        uint32_t u = k0 / 8u + q % 4u;
        bool ok = r0 + rr < m && u < k8;
        uint32_t r = __builtin_elementwise_min(r0 + rr, m - 1u);
        uint32_t uu = __builtin_elementwise_min(u, k8 - 1u);
        float8 v = Q::dequant8(w + (uint64_t)r * row_bytes, uu / UNITS, uu % UNITS);
        tile.w[s] = __builtin_convertvector(ok ? v : (float8)(0.0f), half8);
    }
#pragma unroll
    for (uint32_t s = 0u; s < S::NA; s++) {
        uint32_t q = tid + S::WG * s;
        uint32_t tt = q / 8u;
        uint32_t c4 = q % 8u;
        bool ok = tt < nt && k0 + 4u * c4 < k;
        uint32_t t = x_row(rows, __builtin_elementwise_min(tt, nt - 1u));
        uint32_t kk = __builtin_elementwise_min(k0 + 4u * c4, k - 4u);
        float4 v = x[((uint64_t)t * k + kk) / 4u];
        tile.a[s] = __builtin_convertvector(ok ? v : (float4)(0.0f), half4);
    }
}

// Registers -> shared memory.
template <typename S> DEV void mmc_store(const MmcTile<S>& tile, half* as, half* bs) {
    const uint32_t tid = thread_id_x();
#pragma unroll
    for (uint32_t s = 0u; s < S::NU; s++) {
        uint32_t q = tid + S::WG * s;
        *(half8*)(bs + (q / 4u) * MMC_LD + 8u * (q % 4u)) = tile.w[s];
    }
#pragma unroll
    for (uint32_t s = 0u; s < S::NA; s++) {
        uint32_t q = tid + S::WG * s;
        *(half4*)(as + (q / 8u) * MMC_LD + 4u * (q % 8u)) = tile.a[s];
    }
}

// The tile of weight rows r0.. (m in all) and nt tokens (rows: where they
// read and write) of out = x . W (+ bias).
template <typename S, typename Q, typename Rows>
DEV void matmul_coopmat_tile(const uint8_t* w, uint32_t m, uint32_t r0, uint32_t nt,
                             const Rows& rows, const float4* x, uint32_t k, float* o,
                             const float* bias) {
    constexpr uint32_t FT = S::FT;
    constexpr uint32_t FR = S::FR;
    __shared__ __attribute__((aligned(16))) half as[S::BT * MMC_LD];
    __shared__ __attribute__((aligned(16))) half bs[S::BR * MMC_LD];
    const uint32_t wt = wave_id() % S::WT; // this wave's FT * 16 tokens of the tile
    const uint32_t wr = wave_id() / S::WT; // and FR * 16 rows
    const uint64_t row_bytes = row_bytes_of<Q>(k);

    FragC acc[FT][FR];
#pragma unroll
    for (uint32_t i = 0u; i < FT; i++) {
#pragma unroll
        for (uint32_t j = 0u; j < FR; j++) {
            acc[i][j] = frag_c_zero();
        }
    }
    MmcTile<S> regs;
    if (MMC_PREFETCH) {
        mmc_load<S, Q>(regs, 0u, w, row_bytes, m, r0, rows, nt, x, k);
    }
    for (uint32_t k0 = 0u; k0 < k; k0 += MMC_BK) {
        if (!MMC_PREFETCH) {
            mmc_load<S, Q>(regs, k0, w, row_bytes, m, r0, rows, nt, x, k);
        }
        mmc_store<S>(regs, as, bs);
        block_barrier();
        if (MMC_PREFETCH) {
            // Unconditional (the last step loads a clamped, valid tile it
            // never uses): a branch here would end the basic block, and
            // the loads would be waited for before the first multiply.
            mmc_load<S, Q>(regs, k0 + MMC_BK, w, row_bytes, m, r0, rows, nt, x, k);
        }
#pragma unroll
        for (uint32_t kk = 0u; kk < MMC_BK; kk += 16u) {
            // The FR weight fragments held, the FT token fragments loaded
            // one at a time (the big tiling's registers).
            FragB fb[FR];
#pragma unroll
            for (uint32_t j = 0u; j < FR; j++) {
                fb[j] = frag_b_load(bs + (FR * 16u * wr + 16u * j) * MMC_LD + kk, MMC_LD);
            }
#pragma unroll
            for (uint32_t i = 0u; i < FT; i++) {
                FragA fa = frag_a_load(as + (FT * 16u * wt + 16u * i) * MMC_LD + kk, MMC_LD);
#pragma unroll
                for (uint32_t j = 0u; j < FR; j++) {
                    acc[i][j] = mma_16x16x16(fa, fb[j], acc[i][j]);
#if RF_AMDGPU && RF_MMA_GENERIC
                    // Each FMA-path multiply done before the next one's
                    // shared reads start (it reads 16 A rows per lane: two
                    // in flight need ~150 VGPRs).
                    asm volatile("" : "+v"(acc[i][j].v));
#endif
                }
            }
        }
        block_barrier();
    }

#pragma unroll
    for (uint32_t i = 0u; i < FT; i++) {
#pragma unroll
        for (uint32_t j = 0u; j < FR; j++) {
#pragma unroll
            for (uint32_t e = 0u; e < 8u; e++) {
                uint32_t tt = FT * 16u * wt + 16u * i + frag_c_row(e);
                uint32_t r = r0 + FR * 16u * wr + 16u * j + frag_c_col(e);
                // Read at a clamped row outside the bounds check, so lanes
                // whose column does not change with e read it once.
                float bv = bias != nullptr ? bias[__builtin_elementwise_min(r, m - 1u)] : 0.0f;
                if (tt < nt && r < m) {
                    o[(uint64_t)out_row(rows, tt) * m + r] = acc[i][j].v[e] + bv;
                }
            }
        }
    }
}

template <typename S, typename Q> DEV void matmul_coopmat(const MatPush& s) {
    const uint32_t n = s.n;
    const uint32_t tiles_t = (n + S::BT - 1u) / S::BT;
    uint32_t tile = wg_linear();
    const uint32_t count[3] = {(s.rows[0] + S::BR - 1u) / S::BR * tiles_t,
                               (s.rows[1] + S::BR - 1u) / S::BR * tiles_t,
                               (s.rows[2] + S::BR - 1u) / S::BR * tiles_t};
    const uint32_t p = find_part(s.n_parts, count, tile);
    if (p >= s.n_parts) {
        return;
    }
    const uint32_t r0 = (tile / tiles_t) * S::BR;
    const uint32_t t0 = (tile % tiles_t) * S::BT;
    const uint64_t bias = part_u64(s.bias, p);
    matmul_coopmat_tile<S, Q>(dev_ptr<const uint8_t>(part_u64(s.w, p)), part_u32(s.rows, p), r0,
                              n - t0, DenseRows{t0}, dev_ptr<const float4>(s.x), s.k,
                              dev_ptr<float>(part_u64(s.out, p)),
                              bias != 0u ? dev_ptr<const float>(bias) : nullptr);
}

template <typename S, typename Q> DEV void matmul_id_coopmat(const MatGroupPush& s) {
    __shared__ uint32_t pairs[S::BT];
    __shared__ uint32_t x_rows[S::BT];
    const GroupTile g = group_tile<S::BR, S::BT, S::WG>(s, pairs, x_rows);
    if (!g.used) {
        return;
    }
    matmul_coopmat_tile<S, Q>(group_weights(s, g), s.rows, g.r0, g.n, GroupRows{pairs, x_rows},
                              dev_ptr<const float4>(s.x), s.k, dev_ptr<float>(s.out),
                              group_bias(s, g));
}

#define MATMUL_COOPMAT_KERNELS(ty, Q)                                                             \
    KERNEL LAUNCH_BOUNDS(MmcSmall::WG) MMC_REGS_SMALL void matmul_cmps_##ty(MatPush s) {          \
        matmul_coopmat<MmcSmall, Q>(s);                                                           \
    }                                                                                             \
    KERNEL LAUNCH_BOUNDS(MmcBig::WG) MMC_REGS_BIG void matmul_cmp_##ty(MatPush s) {               \
        matmul_coopmat<MmcBig, Q>(s);                                                             \
    }                                                                                             \
    KERNEL LAUNCH_BOUNDS(MmcSmall::WG) MMC_REGS_BIG void matmul_id_cms_##ty(MatGroupPush s) {     \
        matmul_id_coopmat<MmcSmall, Q>(s);                                                        \
    }
RF_WEIGHT_TYPES(MATMUL_COOPMAT_KERNELS)
#undef MATMUL_COOPMAT_KERNELS
