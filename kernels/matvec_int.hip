// Decode matmul in integers for 1..MV_MAX_TOKENS tokens and the 32-element
// weight types (shaders/matvec_int.comp):
//   out[p][t][r] = x[t] . W_p[r] (+ bias_p[r]) (+ residual[t][r])
// with x already Q8-packed (q8_packed.h: int8 quants at x, 32 bytes per
// block, and (d, s) per block at x_scales). Per block, as ggml's CPU dot
// products: (d_w * d_x) * sum(q_w * q_x) [+ m_w * s_x for Q4_1 / Q5_1],
// the integer sum exact (dot4_i8: sudot4 / sdot4 / dp4a / portable), the
// products and the running sum rounded in f32. Only the order of the
// per-block terms differs from the CPU.
//
// A workgroup of MVI_WG threads computes MVI_NR consecutive rows of one
// part, each wave MVI_RW of them, its lanes walking the rows' blocks
// (lane i: blocks i, i + WAVE_SIZE, ...), so each activation block is read
// once per MVI_RW rows and neighbouring lanes read neighbouring weight
// blocks; wave sums only, no shared memory or barrier (a 2048-column row
// is 64 blocks: with MVI_WG invocations on 2 rows, every workgroup paid a
// barrier for 2 rows). MVI_NR is the lowering's Lowering::int_rows and
// Lowering::expert_int_rows for this backend (the GLSL kernel: 2).
//
// Kernels: matvec_int_<ty> for the types with an integer form, argument
// block MatPush, grid: sum over parts of ceil(rows / MVI_NR) (wg_linear).
// k % 32 == 0; with residual set there is one part.
//
// matvec_id_int_<ty> (shaders/matvec_int.comp with MAT_ID): the expert
// mat-vec of a mixture-of-experts layer in the same arithmetic, for every
// (token, choice) pair p: out[p][r] = x[p / x_div] . W_e[r] (+ bias[e][r]),
// e = ids[p] read on the device; argument block MatIdPush, grid n_pairs *
// ceil(rows / MVI_NR), MVI_NR rows of one pair a workgroup; twice that
// with a second stack (up_w: up beside gate), whose half of the grid
// computes it.
#include "mat_common.h"

#define MVI_WG 64u
#define MVI_WAVES (MVI_WG / WAVE_SIZE)
#define MVI_RW 4u
#define MVI_NR (MVI_RW * MVI_WAVES)
// Every (row, token) sum of a wave has its own lane.
static_assert(MVI_RW * MV_MAX_TOKENS <= WAVE_SIZE, "a lane per sum");

// Weight block (q, dm) times an activation block (quants x0, x1, (d, s)
// sx), as ggml's CPU dot products round.
template <typename Q>
DEV float block_term(const uint32_t (&q)[8], float2 dm, uint4 x0, uint4 x1, float2 sx) {
    int32_t sum = dot4_i8(q[0], x0.x, 0);
    sum = dot4_i8(q[1], x0.y, sum);
    sum = dot4_i8(q[2], x0.z, sum);
    sum = dot4_i8(q[3], x0.w, sum);
    sum = dot4_i8(q[4], x1.x, sum);
    sum = dot4_i8(q[5], x1.y, sum);
    sum = dot4_i8(q[6], x1.z, sum);
    sum = dot4_i8(q[7], x1.w, sum);
    if constexpr (Q::Q8_MIN) {
        return (dm.x * sx.x) * (float)sum + dm.y * sx.y;
    } else {
        return (dm.x * sx.x) * (float)sum;
    }
}

template <typename Q> DEV void matvec_int(const MatPush& s) {
    uint32_t g = wg_linear();
    const uint32_t count[3] = {(s.rows[0] + MVI_NR - 1u) / MVI_NR,
                               (s.rows[1] + MVI_NR - 1u) / MVI_NR,
                               (s.rows[2] + MVI_NR - 1u) / MVI_NR};
    const uint32_t p = find_part(s.n_parts, count, g);
    if (p >= s.n_parts) {
        return;
    }
    const uint32_t m = part_u32(s.rows, p);
    const uint32_t n = s.n;
    // This wave's MVI_RW rows.
    const uint32_t r0 = g * MVI_NR + wave_id() * MVI_RW;
    const uint32_t nb = s.k / 32u;
    const uint64_t row_bytes = (uint64_t)nb * Q::BLOCK_BYTES;
    const uint8_t* w = dev_ptr<const uint8_t>(part_u64(s.w, p));
    const uint4* xq = dev_ptr<const uint4>(s.x);
    const float2* xs = dev_ptr<const float2>(s.x_scales);

    float acc[MVI_RW][MV_MAX_TOKENS];
#pragma unroll
    for (uint32_t r = 0u; r < MVI_RW; r++) {
#pragma unroll
        for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
            acc[r][t] = 0.0f;
        }
    }
    for (uint32_t b = lane_id(); b < nb; b += WAVE_SIZE) {
        uint32_t q[MVI_RW][8];
        float2 dm[MVI_RW];
#pragma unroll
        for (uint32_t r = 0u; r < MVI_RW; r++) {
            // Rows past the end read row m - 1 again (never written out).
            uint32_t rr = __builtin_elementwise_min(r0 + r, m - 1u);
            dm[r] = Q::block_q8(w + rr * row_bytes, b, q[r]);
        }
#pragma unroll
        for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t < n) { // uniform: n is an argument
                uint32_t xb = t * nb + b;
                uint4 x0 = xq[2u * (uint64_t)xb];
                uint4 x1 = xq[2u * (uint64_t)xb + 1u];
                float2 sx = xs[xb];
#pragma unroll
                for (uint32_t r = 0u; r < MVI_RW; r++) {
                    acc[r][t] += block_term<Q>(q[r], dm[r], x0, x1, sx);
                }
            }
        }
    }

    // Each (row, token) wave sum; lane r * n + t writes row r0 + r of
    // token t.
    float mine = 0.0f;
#pragma unroll
    for (uint32_t r = 0u; r < MVI_RW; r++) {
#pragma unroll
        for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t < n) {
                float v = wave_sum(acc[r][t]);
                mine = lane_id() == r * n + t ? v : mine;
            }
        }
    }
    const uint32_t i = lane_id();
    if (i < MVI_RW * n) {
        const uint32_t row = r0 + i / n;
        const uint32_t t = i % n;
        if (row < m) {
            const uint64_t bias = part_u64(s.bias, p);
            if (bias != 0u) {
                mine += dev_ptr<const float>(bias)[row];
            }
            const uint64_t o = (uint64_t)t * m + row;
            if (s.residual != 0u) {
                mine += dev_ptr<const float>(s.residual)[o];
            }
            dev_ptr<float>(part_u64(s.out, p))[o] = mine;
        }
    }
}

template <typename Q> DEV void matvec_id_int(const MatIdPush& s) {
    const uint32_t groups = (s.rows + MVI_NR - 1u) / MVI_NR;
    uint32_t g = wg_linear();
    const uint32_t per_stack = s.n_pairs * groups;
    const bool second = g >= per_stack;
    if (second && (s.up_w == 0u || g >= 2u * per_stack)) {
        return;
    }
    g -= second ? per_stack : 0u;
    const uint64_t w_stack = second ? s.up_w : s.w;
    const uint64_t out = second ? s.up_out : s.out;
    const uint64_t bias = second ? s.up_bias : s.bias;
    const uint32_t p = g / groups;
    // This wave's MVI_RW rows.
    const uint32_t r0 = (g % groups) * MVI_NR + wave_id() * MVI_RW;
    // Ids are exact small integers stored as f32 (graph::Op::TopKGate).
    const uint32_t e = (uint32_t)dev_ptr<const float>(s.ids)[p];
    const uint32_t nb = s.k / 32u;
    const uint64_t row_bytes = (uint64_t)nb * Q::BLOCK_BYTES;
    const uint8_t* w = dev_ptr<const uint8_t>(w_stack + (uint64_t)e * s.expert_bytes);
    const uint4* xq = dev_ptr<const uint4>(s.x);
    const float2* xs = dev_ptr<const float2>(s.x_scales);
    const uint32_t xb0 = (p / s.x_div) * nb;
    float acc[MVI_RW];
#pragma unroll
    for (uint32_t r = 0u; r < MVI_RW; r++) {
        acc[r] = 0.0f;
    }
    for (uint32_t b = lane_id(); b < nb; b += WAVE_SIZE) {
        const uint32_t xb = xb0 + b;
        uint4 x0 = xq[2u * (uint64_t)xb];
        uint4 x1 = xq[2u * (uint64_t)xb + 1u];
        float2 sx = xs[xb];
#pragma unroll
        for (uint32_t r = 0u; r < MVI_RW; r++) {
            uint32_t q[8];
            // Rows past the end read the last row again (never written out).
            uint32_t rr = __builtin_elementwise_min(r0 + r, s.rows - 1u);
            float2 dm = Q::block_q8(w + rr * row_bytes, b, q);
            acc[r] += block_term<Q>(q, dm, x0, x1, sx);
        }
    }
    // Each row's wave sum; lane r writes row r0 + r.
    float mine = 0.0f;
#pragma unroll
    for (uint32_t r = 0u; r < MVI_RW; r++) {
        float v = wave_sum(acc[r]);
        mine = lane_id() == r ? v : mine;
    }
    const uint32_t row = r0 + lane_id();
    if (lane_id() < MVI_RW && row < s.rows) {
        if (bias != 0u) {
            mine += dev_ptr<const float>(bias)[(uint64_t)e * s.rows + row];
        }
        dev_ptr<float>(out)[(uint64_t)p * s.rows + row] = mine;
    }
}

#define MATVEC_INT_KERNEL(ty, Q)                                                                    \
    KERNEL LAUNCH_BOUNDS(MVI_WG) void matvec_int_##ty(MatPush s) { matvec_int<Q>(s); }            \
    KERNEL LAUNCH_BOUNDS(MVI_WG) void matvec_id_int_##ty(MatIdPush s) { matvec_id_int<Q>(s); }
RF_INT_WEIGHT_TYPES(MATVEC_INT_KERNEL)
#undef MATVEC_INT_KERNEL
