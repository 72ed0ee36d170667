// Expert mat-vec (shaders/matvec_id.comp), llama.cpp's mul_mat_id for
// mixture-of-experts layers:
//   out[p][r] = x[p / x_div] . W_e[r],  e = ids[p]
// for every (token, choice) pair p. The expert ids are read on the device,
// so one recorded launch serves any routing, and only the chosen experts'
// rows are read. One workgroup of MV_WG per (pair, row); the f32 mat-vec's
// reduction (matvec.hip) for one token: wave sums, then one shared slot
// per wave, summed in wave order. A bias (gpt-oss) adds the chosen
// expert's row of f32 biases to each output.
//
// Kernels: matvec_id_<ty> for every weight type, argument block MatIdPush,
// grid: pairs x rows (wg_linear).
#include "mat_common.h"

#define MVID_WG 64u
#define MVID_WAVES (MVID_WG / WAVE_SIZE)

DEV float dot4_id(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

template <typename Q> DEV void matvec_id(const MatIdPush& s) {
    __shared__ float part_sums[MVID_WAVES];
    const uint32_t g = wg_linear();
    if (g >= s.n_pairs * s.rows) {
        return;
    }
    const uint32_t p = g / s.rows;
    const uint32_t r = g % s.rows;
    // Ids are exact small integers stored as f32 (graph::Op::TopKGate).
    const uint32_t e = (uint32_t)dev_ptr<const float>(s.ids)[p];
    constexpr uint32_t UNITS = Q::K / 8u;
    const uint32_t units = s.k / 8u;
    const uint8_t* row = dev_ptr<const uint8_t>(s.w) + (uint64_t)e * s.expert_bytes +
                         (uint64_t)r * row_bytes_of<Q>(s.k);
    const float4* x = dev_ptr<const float4>(s.x) + (uint64_t)(p / s.x_div) * (s.k / 4u);
    float acc = 0.0f;
    for (uint32_t u = thread_id_x(); u < units; u += MVID_WG) {
        float8 w = Q::dequant8(row, u / UNITS, u % UNITS);
        acc += dot4_id(w.lo, x[2u * u]) + dot4_id(w.hi, x[2u * u + 1u]);
    }
    float v = wave_sum(acc);
    if (lane_id() == 0u) {
        part_sums[wave_id()] = v;
    }
    block_barrier();
    if (thread_id_x() == 0u) {
        float sum = 0.0f;
#pragma unroll
        for (uint32_t i = 0u; i < MVID_WAVES; i++) {
            sum += part_sums[i];
        }
        if (s.bias != 0u) {
            sum += dev_ptr<const float>(s.bias)[(uint64_t)e * s.rows + r];
        }
        dev_ptr<float>(s.out)[(uint64_t)p * s.rows + r] = sum;
    }
}

#define MATVEC_ID_KERNEL(ty, Q)                                                                     \
    KERNEL LAUNCH_BOUNDS(MVID_WG) void matvec_id_##ty(MatIdPush s) { matvec_id<Q>(s); }
RF_WEIGHT_TYPES(MATVEC_ID_KERNEL)
#undef MATVEC_ID_KERNEL
