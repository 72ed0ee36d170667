// Activation rounding before a matmul (shaders/quantize_act.comp), as the
// CPU reference and ggml quantize a row for the weight type's dot type.
// Argument block QuantizePush; 64 threads per workgroup; grid
// ceil((n / BLOCK) / 64), i.e. workgroup w owns blocks 64w .. 64w + 63
// (the Q8-packed variants: ceil((n / 32) / 2), blocks 2w and 2w + 1):
//
//   quantize_q8_0       BLOCK 32, "fake" Q8_0 into f32 at out:
//                       d = f16(amax / 127), o = d * rne(x * (127 / amax))
//                       (Q8_1 activations round the same way);
//   quantize_q8_k       BLOCK 256, fake Q8_K: iscale = -127 / mx (mx the
//                       first value of largest magnitude), o = (1 / iscale)
//                       * clamp(rne(iscale * x), -128, 127); all zeros for
//                       an all-zero block;
//   quantize_q8_packed  BLOCK 32, real Q8 into the packed layout of
//                       q8_packed.h: quants at out, (d, s) at scales;
//   swiglu_q8           the same for silu(x) * up (x the gate), which is
//                       also written as f32 to act: SwiGLU and the rounding
//                       of its output in one pass;
//   swiglu_oai_q8       the same for gpt-oss's clamped SwiGLU (alpha and
//                       limit in the push);
//   quantize_f16        BLOCK 8, every value rounded to f16 (nearest even);
//   quantize_bf16       BLOCK 8, to bf16 (nearest even; inf / NaN kept).
//
// The shader gives one thread one block. Here a wave takes one block at a
// time, lane i holding value i (i, i + 32, ... for Q8_K), so every load is
// one coalesced 128-byte line; each wave loops over its 32 of the
// workgroup's 64 blocks. The numbers are the same: the max and the integer
// sums do not depend on the order, divisions are correctly rounded
// (div_rn in the shader), and the Q8-packed writers call
// wave_store_q8_packed as every fused producer does. The f16 / bf16
// variants are element-wise: thread t of workgroup w rounds values
// 512w + t + 64j, j < 8.
#include "ops_common.h"

#define QUANTIZE_OPS_WG 64u

namespace ops {

enum class Act { Q8_0, Q8_K, Q8Packed, SwigluQ8, SwigluOaiQ8, F16, BF16 };

// Largest |v| over the wave, ties to the lowest index, and the signed value
// there (Q8_K's "first value of largest magnitude"). idx is the value's
// index in the block. Uniform control flow.
struct MaxAt {
    float amax;
    float v;
    uint32_t idx;
};

DEV MaxAt wave_max_at(MaxAt m) {
    for (uint32_t s = 16u; s > 0u; s >>= 1) {
        MaxAt o;
        o.amax = wave_shfl_xor_f32(m.amax, s);
        o.v = wave_shfl_xor_f32(m.v, s);
        o.idx = wave_shfl_xor(m.idx, s);
        if (o.amax > m.amax || (o.amax == m.amax && o.idx < m.idx)) {
            m = o;
        }
    }
    return m;
}

template <Act A> DEV void quantize_run(const QuantizePush& p) {
    uint32_t lane = lane_id();
    if (A == Act::F16 || A == Act::BF16) {
        uint32_t base = wg_linear() * (QUANTIZE_OPS_WG * 8u) + thread_id_x();
        const float* x = dev_ptr<const float>(p.x);
        float* o = dev_ptr<float>(p.out);
#pragma unroll
        for (uint32_t j = 0u; j < 8u; j++) {
            uint32_t i = base + j * QUANTIZE_OPS_WG;
            if (i < p.n) {
                float v = x[i];
                if (A == Act::F16) {
                    o[i] = round_f16(v);
                } else {
                    uint32_t u = __builtin_bit_cast(uint32_t, v);
                    if ((u & 0x7F800000u) != 0x7F800000u) {
                        u += 0x7FFFu + ((u >> 16) & 1u);
                    }
                    o[i] = __builtin_bit_cast(float, u & 0xFFFF0000u);
                }
            }
        }
        return;
    }
    constexpr uint32_t BLOCK = A == Act::Q8_K ? 256u : 32u;
    // The Q8-packed roundings run in decode steps, a few hundred blocks at
    // most: one block per wave, so the grid spreads them over the GPU
    // (the HIP backend lowers with Lowering::q8_packed_blocks_per_group =
    // 2). Walking 32 blocks per wave made a 7B decode's SwiGLU+Q8 take
    // ~33 us per layer on the H100.
    constexpr bool PACKED = A == Act::Q8Packed || A == Act::SwigluQ8 || A == Act::SwigluOaiQ8;
    constexpr uint32_t PER_WAVE = PACKED ? 1u : QUANTIZE_OPS_WG / 2u; // blocks per wave
    uint32_t first = wg_linear() * (2u * PER_WAVE) + wave_id() * PER_WAVE;
    const float* x = dev_ptr<const float>(p.x);
    for (uint32_t j = 0u; j < PER_WAVE; j++) {
        uint32_t b = first + j;
        if (b * BLOCK >= p.n) {
            return; // wave-uniform; later blocks are past the end too
        }
        const float* xb = x + (uint64_t)b * BLOCK;
        if (A == Act::Q8_0) {
            float v = xb[lane];
            float amax = wave_max(dev_fabsf(v));
            float d = round_f16(amax / 127.0f);
            float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            dev_ptr<float>(p.out)[(uint64_t)b * BLOCK + lane] = d * dev_rintf(v * id);
        } else if (A == Act::Q8_K) {
            // Per block, so that the 16 per-lane addresses below are not
            // hoisted out of the loop (32 registers held for nothing).
            uint32_t ln = opaque(lane);
            float v[8];
            MaxAt m = {0.0f, 0.0f, 0u};
#pragma unroll
            for (uint32_t k = 0u; k < 8u; k++) {
                v[k] = xb[ln + 32u * k];
                // In index order, strictly greater: the first maximum.
                if (dev_fabsf(v[k]) > m.amax) {
                    m.amax = dev_fabsf(v[k]);
                    m.v = v[k];
                    m.idx = ln + 32u * k;
                }
            }
            m = wave_max_at(m);
            float* ob = dev_ptr<float>(p.out) + (uint64_t)b * BLOCK;
            if (m.amax == 0.0f) {
#pragma unroll
                for (uint32_t k = 0u; k < 8u; k++) {
                    ob[ln + 32u * k] = 0.0f;
                }
                continue;
            }
            float iscale = -127.0f / m.v;
            float d = 1.0f / iscale;
#pragma unroll
            for (uint32_t k = 0u; k < 8u; k++) {
                float q = dev_rintf(iscale * v[k]);
                q = __builtin_fminf(__builtin_fmaxf(q, -128.0f), 127.0f);
                ob[ln + 32u * k] = d * q;
            }
        } else {
            float v = xb[lane];
            if (A == Act::SwigluQ8 || A == Act::SwigluOaiQ8) {
                uint64_t i = (uint64_t)b * BLOCK + lane;
                float u = dev_ptr<const float>(p.up)[i];
                v = A == Act::SwigluQ8 ? swiglu_value(v, u) : swiglu_oai_value(v, u, p.alpha, p.limit);
                dev_ptr<float>(p.act)[i] = v;
            }
            wave_store_q8_packed(v, dev_ptr<int8_t>(p.out), dev_ptr<float2>(p.scales), b);
        }
    }
}

} // namespace ops

#define QUANTIZE_OPS_KERNEL(name, act)                                                             \
    KERNEL LAUNCH_BOUNDS(QUANTIZE_OPS_WG) void name(QuantizePush p) {                              \
        ops::quantize_run<ops::Act::act>(p);                                                       \
    }
QUANTIZE_OPS_KERNEL(quantize_q8_0, Q8_0)
QUANTIZE_OPS_KERNEL(quantize_q8_k, Q8_K)
QUANTIZE_OPS_KERNEL(quantize_q8_packed, Q8Packed)
QUANTIZE_OPS_KERNEL(swiglu_q8, SwigluQ8)
QUANTIZE_OPS_KERNEL(swiglu_oai_q8, SwigluOaiQ8)
QUANTIZE_OPS_KERNEL(quantize_f16, F16)
QUANTIZE_OPS_KERNEL(quantize_bf16, BF16)
#undef QUANTIZE_OPS_KERNEL
