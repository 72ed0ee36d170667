// Decode matmul in integers for 1..MATVEC_MAX_TOKENS tokens:
//   out[t][r] = x[t] . W[r] (+ bias[r]) (+ residual[t][r])
// with W in GGUF block layout (Q4_0: 18 bytes per 32 weights, Q8_0: 34)
// and x already Q8-packed (q8_packed.h). Per block, as the CPU reference's
// dot products (ggml's): (d_w * d_x) * sum(q_w * q_x), the integer sum
// exact (dot4_i8), the products and the running sum rounded in f32. Only
// the order of the per-block terms differs from the CPU.
//
// A workgroup of MATVEC_WG threads computes MATVEC_NR consecutive rows:
// thread i walks blocks i, i + MATVEC_WG, ... of all of them, so each
// activation block is read once per MATVEC_NR rows and neighbouring lanes
// read neighbouring weight blocks. Wave sums, then one shared slot per
// wave. Decode is bound by reading the weights; the activations (a quarter
// of f32's bytes) stay in cache.
#include "shapes.h"

#define MATVEC_WG 64u
#define MATVEC_NR 2u
#define MATVEC_WAVES (MATVEC_WG / WAVE_SIZE)

// Blocks are 2-byte aligned only (18 and 34 bytes): read 16-bit halves.
DEV uint32_t u32_at(const uint16_t* p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 16); }

// q - o per byte for bytes q, o < 128, with no borrow between bytes.
DEV uint32_t sub_bytes(uint32_t q, uint32_t o) { return ((q | 0x80808080u) - o) ^ 0x80808080u; }

// Block readers: the 32 quants of block ib of `row` as signed bytes, four
// to a word in element order (word i = elements 4i..4i+3); returns d.

struct BlockQ4_0 {
    static constexpr uint32_t BYTES = 18u;
    // Byte j of qs holds element j (low nibble) and j + 16 (high); q - 8.
    DEV float load(const uint8_t* row, uint32_t ib, uint32_t q[8]) {
        const uint16_t* b = (const uint16_t*)(row + ib * BYTES);
#pragma unroll
        for (uint32_t i = 0u; i < 4u; i++) {
            uint32_t w = u32_at(b + 1u + 2u * i);
            q[i] = sub_bytes(w & 0x0F0F0F0Fu, 0x08080808u);
            q[i + 4u] = sub_bytes((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
        return f16_bits_to_f32(b[0]);
    }
};

struct BlockQ8_0 {
    static constexpr uint32_t BYTES = 34u;
    DEV float load(const uint8_t* row, uint32_t ib, uint32_t q[8]) {
        const uint16_t* b = (const uint16_t*)(row + ib * BYTES);
#pragma unroll
        for (uint32_t i = 0u; i < 8u; i++) {
            q[i] = u32_at(b + 1u + 2u * i);
        }
        return f16_bits_to_f32(b[0]);
    }
};

template <typename W>
DEV void matvec_q(const uint8_t* w, const int8_t* xq, const float2* xs, const float* bias,
                  const float* residual, float* out, MatvecShape s, float* part) {
    const uint32_t n = s.n_tokens;
    const uint32_t nb = s.k / 32u;
    const uint32_t r0 = block_id_x() * MATVEC_NR;
    const uint64_t row_bytes = (uint64_t)nb * W::BYTES;

    float acc[MATVEC_NR][MATVEC_MAX_TOKENS];
#pragma unroll
    for (uint32_t r = 0u; r < MATVEC_NR; r++) {
#pragma unroll
        for (uint32_t t = 0u; t < MATVEC_MAX_TOKENS; t++) {
            acc[r][t] = 0.0f;
        }
    }
    for (uint32_t b = thread_id_x(); b < nb; b += MATVEC_WG) {
        uint32_t q[MATVEC_NR][8];
        float dw[MATVEC_NR];
#pragma unroll
        for (uint32_t r = 0u; r < MATVEC_NR; r++) {
            // Rows past the end read the last row again (never written).
            uint32_t rr = r0 + r < s.rows ? r0 + r : s.rows - 1u;
            dw[r] = W::load(w + rr * row_bytes, b, q[r]);
        }
#pragma unroll
        for (uint32_t t = 0u; t < MATVEC_MAX_TOKENS; t++) {
            if (t < n) { // uniform: n is a kernel argument
                uint32_t xb = t * nb + b;
                const uint4* xv = (const uint4*)(xq + 32u * (uint64_t)xb);
                uint4 x0 = xv[0];
                uint4 x1 = xv[1];
                float dx = xs[xb].x;
#pragma unroll
                for (uint32_t r = 0u; r < MATVEC_NR; r++) {
                    int32_t sum = dot4_i8(q[r][0], x0.x, 0);
                    sum = dot4_i8(q[r][1], x0.y, sum);
                    sum = dot4_i8(q[r][2], x0.z, sum);
                    sum = dot4_i8(q[r][3], x0.w, sum);
                    sum = dot4_i8(q[r][4], x1.x, sum);
                    sum = dot4_i8(q[r][5], x1.y, sum);
                    sum = dot4_i8(q[r][6], x1.z, sum);
                    sum = dot4_i8(q[r][7], x1.w, sum);
                    acc[r][t] += (dw[r] * dx) * (float)sum;
                }
            }
        }
    }

    // Wave sums, then the waves' sums in wave order through shared memory.
    // part is [MATVEC_NR * MATVEC_MAX_TOKENS][MATVEC_WAVES].
#pragma unroll
    for (uint32_t r = 0u; r < MATVEC_NR; r++) {
#pragma unroll
        for (uint32_t t = 0u; t < MATVEC_MAX_TOKENS; t++) {
            if (t < n) {
                float v = wave_sum(acc[r][t]);
                if (lane_id() == 0u) {
                    part[(r * MATVEC_MAX_TOKENS + t) * MATVEC_WAVES + wave_id()] = v;
                }
            }
        }
    }
    block_barrier();
    uint32_t i = thread_id_x();
    if (i < MATVEC_NR * n) {
        uint32_t r = i / n;
        uint32_t t = i % n;
        uint32_t row = r0 + r;
        if (row < s.rows) {
            const float* p = part + (r * MATVEC_MAX_TOKENS + t) * MATVEC_WAVES;
            float v = p[0];
            for (uint32_t j = 1u; j < MATVEC_WAVES; j++) {
                v += p[j];
            }
            if (bias != nullptr) {
                v += bias[row];
            }
            uint64_t o = (uint64_t)t * s.rows + row;
            if (residual != nullptr) {
                v += residual[o];
            }
            out[o] = v;
        }
    }
}

// Grid: ceil(rows / MATVEC_NR) workgroups of MATVEC_WG. xq: 32 bytes per
// block, 16-byte aligned; xs: (d, s) per block; bias (rows) and residual
// (laid out as out) may be null.
#define MATVEC_KERNEL(name, block)                                                                  \
    KERNEL LAUNCH_BOUNDS(MATVEC_WG) void name(const uint8_t* w, const int8_t* xq, const float2* xs, \
                                              const float* bias, const float* residual,           \
                                              float* out, MatvecShape s) {                         \
        __shared__ float part[MATVEC_NR * MATVEC_MAX_TOKENS * MATVEC_WAVES];                       \
        matvec_q<block>(w, xq, xs, bias, residual, out, s, part);                                  \
    }

MATVEC_KERNEL(matvec_q4_0, BlockQ4_0)
MATVEC_KERNEL(matvec_q8_0, BlockQ8_0)
