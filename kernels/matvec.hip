// Decode matmul in f32 for 1..MV_MAX_TOKENS tokens (shaders/matvec.comp):
//   out[p][t][r] = x[t] . W_p[r] (+ bias_p[r])
// for every weight type (the K-quants, IQ4_XS and plain floats always; the
// 32-element types when the integer mat-vec is off). x is f32, already
// rounded the way the CPU reference quantizes it for the weight type.
//
// One workgroup of MV_WG per weight row (the rows of all parts in order):
// every invocation dequantizes 8-value units u = tid, tid + MV_WG, ... of
// the row once and uses them for every token (f32 products, summed as the
// shader's dot()s). Wave sums, then one shared slot per wave, summed in
// wave order.
//
// Kernels: matvec_<ty> for every weight type, argument block MatPush
// (x_scales and residual unused), grid: the parts' rows summed (wg_linear).
#include "mat_common.h"

#define MV_WG 64u
#define MV_WAVES (MV_WG / WAVE_SIZE)

DEV float dot4_f32(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

template <typename Q> DEV void matvec(const MatPush& s) {
    __shared__ float part_sums[MV_MAX_TOKENS * MV_WAVES];
    uint32_t r = wg_linear();
    const uint32_t count[3] = {s.rows[0], s.rows[1], s.rows[2]};
    const uint32_t p = find_part(s.n_parts, count, r);
    if (p >= s.n_parts) {
        return;
    }
    const uint32_t m = part_u32(s.rows, p);
    const uint32_t n = s.n;
    const uint32_t units = s.k / 8u;
    constexpr uint32_t UNITS = Q::K / 8u;
    const uint8_t* row = dev_ptr<const uint8_t>(part_u64(s.w, p)) + (uint64_t)r * row_bytes_of<Q>(s.k);
    const float4* x = dev_ptr<const float4>(s.x);

    float acc[MV_MAX_TOKENS];
#pragma unroll
    for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
        acc[t] = 0.0f;
    }
    for (uint32_t u = thread_id_x(); u < units; u += MV_WG) {
        float8 w = Q::dequant8(row, u / UNITS, u % UNITS);
#pragma unroll
        for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t < n) { // uniform: n is an argument
                const float4* xt = x + (uint64_t)t * (s.k / 4u) + 2u * u;
                acc[t] += dot4_f32(w.lo, xt[0]) + dot4_f32(w.hi, xt[1]);
            }
        }
    }
#pragma unroll
    for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
        if (t < n) {
            float v = wave_sum(acc[t]);
            if (lane_id() == 0u) {
                part_sums[t * MV_WAVES + wave_id()] = v;
            }
        }
    }
    block_barrier();
    const uint32_t t = thread_id_x();
    if (t < n) {
        float v = 0.0f;
#pragma unroll
        for (uint32_t i = 0u; i < MV_WAVES; i++) {
            v += part_sums[t * MV_WAVES + i];
        }
        const uint64_t bias = part_u64(s.bias, p);
        if (bias != 0u) {
            v += dev_ptr<const float>(bias)[r];
        }
        dev_ptr<float>(part_u64(s.out, p))[(uint64_t)t * m + r] = v;
    }
}

#define MATVEC_KERNEL(ty, Q)                                                                        \
    KERNEL LAUNCH_BOUNDS(MV_WG) void matvec_##ty(MatPush s) { matvec<Q>(s); }
RF_WEIGHT_TYPES(MATVEC_KERNEL)
#undef MATVEC_KERNEL
