// Prefill matmul on the matrix cores (shaders/matmul_coopmat.comp, the
// 64x64-tile variant matmul_cmps: WARPS_T = WARPS_R = FT = FR = 2,
// PREFETCH): out[p][t][r] = x[t] . W_p[r] (+ bias_p[r]) through the
// prelude's fragment operation (WMMA on RDNA3/RDNA4, mma.sync on NVIDIA,
// f32 FMAs from shared memory on gfx10).
//
// A workgroup of 4 waves computes 64 tokens (A rows) x 64 weight rows (B
// columns); wave w owns tokens 32(w % 2).. and rows 32(w / 2).. as 2 x 2
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
// Kernels: matmul_cmps_<ty> for every weight type, argument block MatPush
// (x_scales and residual unused), grid: sum over parts of
// ceil(rows / 64) * ceil(n / 64) (wg_linear).
#include "mat_common.h"

#define MMC_WG 128u
#define MMC_BT 64u // tokens per tile
#define MMC_BR 64u // weight rows per tile
#define MMC_BK 32u
// Row stride of the shared tiles in halves: 80 bytes keeps rows 16-byte
// aligned (fragment loads) and spreads them over the banks.
#define MMC_LD (MMC_BK + 8u)
// Weight units of 8 and activation float4s per invocation per k step.
#define MMC_NU (MMC_BR * 4u / MMC_WG)
#define MMC_NA (MMC_BT * 8u / MMC_WG)

// Register prefetch of the next k step (the shader's PREFETCH) where the
// fragment operation runs on matrix cores. Not on the FMA path (gfx10):
// its multiply holds 16 A rows per lane, which leaves no registers for a
// tile in flight (~150 VGPRs with it, 83 without).
#if RF_MMA_GENERIC
#define MMC_PREFETCH false
#else
#define MMC_PREFETCH true
#endif

// A hard cap at the budget (tests/code_objects.rs): without it clang-19
// gives some K-quant variants 129-130 VGPRs on gfx11, with it 99 and no
// spills (the static checks would catch one).
#if RF_AMDGPU
#define MMC_REGS __attribute__((amdgpu_num_vgpr(128)))
#else
#define MMC_REGS
#endif

typedef half half4 __attribute__((ext_vector_type(4)));

// One k step's tiles in registers, already f16.
struct MmcTile {
    half8 w[MMC_NU];
    half4 a[MMC_NA];
};

template <typename Q>
DEV void mmc_load(MmcTile& tile, uint32_t k0, const uint8_t* w, uint64_t row_bytes, uint32_t m,
                  uint32_t r0, uint32_t t0, const float4* x, uint32_t n, uint32_t k) {
    constexpr uint32_t UNITS = Q::K / 8u;
    const uint32_t tid = thread_id_x();
    const uint32_t k8 = k / 8u;
#pragma unroll
    for (uint32_t s = 0u; s < MMC_NU; s++) {
        uint32_t q = tid + MMC_WG * s;
        uint32_t rr = q / 4u;
        uint32_t u = k0 / 8u + q % 4u;
        bool ok = r0 + rr < m && u < k8;
        uint32_t r = __builtin_elementwise_min(r0 + rr, m - 1u);
        uint32_t uu = __builtin_elementwise_min(u, k8 - 1u);
        float8 v = Q::dequant8(w + (uint64_t)r * row_bytes, uu / UNITS, uu % UNITS);
        tile.w[s] = __builtin_convertvector(ok ? v : (float8)(0.0f), half8);
    }
#pragma unroll
    for (uint32_t s = 0u; s < MMC_NA; s++) {
        uint32_t q = tid + MMC_WG * s;
        uint32_t tt = q / 8u;
        uint32_t c4 = q % 8u;
        bool ok = t0 + tt < n && k0 + 4u * c4 < k;
        uint32_t t = __builtin_elementwise_min(t0 + tt, n - 1u);
        uint32_t kk = __builtin_elementwise_min(k0 + 4u * c4, k - 4u);
        float4 v = x[((uint64_t)t * k + kk) / 4u];
        tile.a[s] = __builtin_convertvector(ok ? v : (float4)(0.0f), half4);
    }
}

// Registers -> shared memory.
DEV void mmc_store(const MmcTile& tile, half* as, half* bs) {
    const uint32_t tid = thread_id_x();
#pragma unroll
    for (uint32_t s = 0u; s < MMC_NU; s++) {
        uint32_t q = tid + MMC_WG * s;
        *(half8*)(bs + (q / 4u) * MMC_LD + 8u * (q % 4u)) = tile.w[s];
    }
#pragma unroll
    for (uint32_t s = 0u; s < MMC_NA; s++) {
        uint32_t q = tid + MMC_WG * s;
        *(half4*)(as + (q / 8u) * MMC_LD + 4u * (q % 8u)) = tile.a[s];
    }
}

template <typename Q> DEV void matmul_cmps(const MatPush& s) {
    __shared__ __attribute__((aligned(16))) half as[MMC_BT * MMC_LD];
    __shared__ __attribute__((aligned(16))) half bs[MMC_BR * MMC_LD];
    const uint32_t n = s.n;
    const uint32_t k = s.k;
    const uint32_t tiles_t = (n + MMC_BT - 1u) / MMC_BT;
    uint32_t tile = wg_linear();
    const uint32_t count[3] = {(s.rows[0] + MMC_BR - 1u) / MMC_BR * tiles_t,
                               (s.rows[1] + MMC_BR - 1u) / MMC_BR * tiles_t,
                               (s.rows[2] + MMC_BR - 1u) / MMC_BR * tiles_t};
    const uint32_t p = find_part(s.n_parts, count, tile);
    if (p >= s.n_parts) {
        return;
    }
    const uint32_t m = part_u32(s.rows, p);
    const uint32_t r0 = (tile / tiles_t) * MMC_BR;
    const uint32_t t0 = (tile % tiles_t) * MMC_BT;
    const uint32_t wt = wave_id() % 2u; // this wave's 32 tokens of the tile
    const uint32_t wr = wave_id() / 2u; // and 32 rows
    const uint64_t row_bytes = row_bytes_of<Q>(k);
    const uint8_t* w = dev_ptr<const uint8_t>(part_u64(s.w, p));
    const float4* x = dev_ptr<const float4>(s.x);

    FragC acc[2][2];
#pragma unroll
    for (uint32_t i = 0u; i < 2u; i++) {
#pragma unroll
        for (uint32_t j = 0u; j < 2u; j++) {
            acc[i][j] = frag_c_zero();
        }
    }
    MmcTile regs;
    if (MMC_PREFETCH) {
        mmc_load<Q>(regs, 0u, w, row_bytes, m, r0, t0, x, n, k);
    }
    for (uint32_t k0 = 0u; k0 < k; k0 += MMC_BK) {
        if (!MMC_PREFETCH) {
            mmc_load<Q>(regs, k0, w, row_bytes, m, r0, t0, x, n, k);
        }
        mmc_store(regs, as, bs);
        block_barrier();
        if (MMC_PREFETCH) {
            // Unconditional (the last step loads a clamped, valid tile it
            // never uses): a branch here would end the basic block, and
            // the loads would be waited for before the first multiply.
            mmc_load<Q>(regs, k0 + MMC_BK, w, row_bytes, m, r0, t0, x, n, k);
        }
#pragma unroll
        for (uint32_t kk = 0u; kk < MMC_BK; kk += 16u) {
            FragA fa[2];
            FragB fb[2];
#pragma unroll
            for (uint32_t i = 0u; i < 2u; i++) {
                fa[i] = frag_a_load(as + (32u * wt + 16u * i) * MMC_LD + kk, MMC_LD);
                fb[i] = frag_b_load(bs + (32u * wr + 16u * i) * MMC_LD + kk, MMC_LD);
            }
#pragma unroll
            for (uint32_t i = 0u; i < 2u; i++) {
#pragma unroll
                for (uint32_t j = 0u; j < 2u; j++) {
                    acc[i][j] = mma_16x16x16(fa[i], fb[j], acc[i][j]);
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

    float* o = dev_ptr<float>(part_u64(s.out, p));
    const uint64_t bias = part_u64(s.bias, p);
#pragma unroll
    for (uint32_t i = 0u; i < 2u; i++) {
#pragma unroll
        for (uint32_t j = 0u; j < 2u; j++) {
#pragma unroll
            for (uint32_t e = 0u; e < 8u; e++) {
                uint32_t t = t0 + 32u * wt + 16u * i + frag_c_row(e);
                uint32_t r = r0 + 32u * wr + 16u * j + frag_c_col(e);
                // Read at a clamped row outside the bounds check, so lanes
                // whose column does not change with e read it once.
                float bv = bias != 0u
                               ? dev_ptr<const float>(bias)[__builtin_elementwise_min(r, m - 1u)]
                               : 0.0f;
                if (t < n && r < m) {
                    o[(uint64_t)t * m + r] = acc[i][j].v[e] + bv;
                }
            }
        }
    }
}

#define MATMUL_CMPS_KERNEL(ty, Q)                                                                   \
    KERNEL LAUNCH_BOUNDS(MMC_WG) MMC_REGS void matmul_cmps_##ty(MatPush s) { matmul_cmps<Q>(s); }
RF_WEIGHT_TYPES(MATMUL_CMPS_KERNEL)
#undef MATMUL_CMPS_KERNEL
