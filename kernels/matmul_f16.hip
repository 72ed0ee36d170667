// Prefill matmul on the matrix cores, through the prelude's fragment
// function (WMMA on RDNA3/RDNA4, mma.sync on NVIDIA, FMA elsewhere):
//   C[m][n] = sum_k A[m][k] * B[n][k] (+ bias[n])
// A: m x k f16 (activations, one row per token), B: n x k f16 (weight
// rows), C: m x n f32, so C is the backend's out[token][row]. f16
// products accumulate in f32.
//
// A workgroup of 4 waves computes a 64 x 64 tile of C, each wave 32 x 32
// as 2 x 2 fragments. k advances by 32: both 64 x 32 input tiles go to
// shared memory (zero-filled past m, n and k), then every wave does
// 2 (k) x 2 x 2 fragment multiplies from there. A dequantizing variant for
// GGUF weights only has to replace the B tile loader.
#include "shapes.h"

#define MM_WG 128u
#define MM_TILE 64u // rows of A and of B per workgroup
#define MM_BK 32u
// Row stride of the shared tiles in halves: 80 bytes keeps rows 16-byte
// aligned (fragment loads) and spreads them over the banks.
#define MM_LD (MM_BK + 8u)

// Rows r0..r0+63, columns k0..k0+31 of a rows x k row-major f16 matrix into
// tile (64 x MM_LD), 8 halves (16 bytes) per load, zeros outside.
DEV void mm_load_tile(half* tile, const half* src, uint32_t r0, uint32_t rows, uint32_t k,
                      uint32_t k0) {
#pragma unroll
    for (uint32_t c = thread_id_x(); c < MM_TILE * (MM_BK / 8u); c += MM_WG) {
        uint32_t r = c / (MM_BK / 8u);
        uint32_t kc = 8u * (c % (MM_BK / 8u));
        uint4 v = (uint4)(0u);
        if (r0 + r < rows && k0 + kc < k) {
            v = *(const uint4*)(src + (uint64_t)(r0 + r) * k + k0 + kc);
        }
        *(uint4*)(tile + r * MM_LD + kc) = v;
    }
}

// Grid: (ceil(n / 64), ceil(m / 64)) workgroups of MM_WG.
KERNEL LAUNCH_BOUNDS(MM_WG) void matmul_f16(const half* a, const half* b, const float* bias,
                                            float* c, MatmulShape s) {
    __shared__ __attribute__((aligned(16))) half as[MM_TILE * MM_LD];
    __shared__ __attribute__((aligned(16))) half bs[MM_TILE * MM_LD];
    const uint32_t n0 = block_id_x() * MM_TILE;
    const uint32_t m0 = block_id_y() * MM_TILE;
    const uint32_t wm = wave_id() % 2u; // this wave's 32 rows of the tile
    const uint32_t wn = wave_id() / 2u; // and 32 columns

    FragC acc[2][2];
#pragma unroll
    for (uint32_t i = 0u; i < 2u; i++) {
#pragma unroll
        for (uint32_t j = 0u; j < 2u; j++) {
            acc[i][j] = frag_c_zero();
        }
    }
    for (uint32_t k0 = 0u; k0 < s.k; k0 += MM_BK) {
        mm_load_tile(as, a, m0, s.m, s.k, k0);
        mm_load_tile(bs, b, n0, s.n, s.k, k0);
        block_barrier();
#pragma unroll
        for (uint32_t kk = 0u; kk < MM_BK; kk += 16u) {
            FragA fa[2];
            FragB fb[2];
#pragma unroll
            for (uint32_t i = 0u; i < 2u; i++) {
                fa[i] = frag_a_load(as + (32u * wm + 16u * i) * MM_LD + kk, MM_LD);
                fb[i] = frag_b_load(bs + (32u * wn + 16u * i) * MM_LD + kk, MM_LD);
            }
#pragma unroll
            for (uint32_t i = 0u; i < 2u; i++) {
#pragma unroll
                for (uint32_t j = 0u; j < 2u; j++) {
                    acc[i][j] = mma_16x16x16(fa[i], fb[j], acc[i][j]);
                }
            }
        }
        block_barrier();
    }

#pragma unroll
    for (uint32_t i = 0u; i < 2u; i++) {
#pragma unroll
        for (uint32_t j = 0u; j < 2u; j++) {
#pragma unroll
            for (uint32_t e = 0u; e < 8u; e++) {
                uint32_t m = m0 + 32u * wm + 16u * i + frag_c_row(e);
                uint32_t n = n0 + 32u * wn + 16u * j + frag_c_col(e);
                if (m < s.m && n < s.n) {
                    float v = acc[i][j].v[e];
                    if (bias != nullptr) {
                        v += bias[n];
                    }
                    c[(uint64_t)m * s.n + n] = v;
                }
            }
        }
    }
}
