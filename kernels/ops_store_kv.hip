// StoreKv (shaders/store_kv.comp): the step's K and V rows, rounded to f16
// (nearest even), into the layer's cache at positions pos0 + r, pos0 from
// the step-input region. One thread per pair of values, written as one
// 32-bit word; 64 threads per workgroup.
//
// Kernel: store_kv, argument block StoreKvPush, grid
// ceil(rows * kv_dim / 2 / 64); kv_dim is even and the cache blocks 4-byte
// aligned, as the shader assumes.
#include "ops_common.h"

#define STORE_KV_OPS_WG 64u

KERNEL LAUNCH_BOUNDS(STORE_KV_OPS_WG) void store_kv(StoreKvPush p) {
    uint32_t idx = wg_linear() * STORE_KV_OPS_WG + thread_id_x();
    uint32_t pairs = p.kv_dim / 2u;
    if (idx >= p.rows * pairs) {
        return;
    }
    uint32_t r = idx / pairs;
    uint32_t c = idx % pairs;
    uint64_t src = (uint64_t)r * p.kv_dim + 2u * c;
    // A sliding-window layer's block is a ring of positions.
    uint64_t dst = (uint64_t)((step_pos0(p.step) + r) % p.ring) * pairs + c;
    const float* k = dev_ptr<const float>(p.k);
    const float* v = dev_ptr<const float>(p.v);
    dev_ptr<uint32_t>(p.k_cache)[dst] =
        f32_to_f16_bits(k[src]) | ((uint32_t)f32_to_f16_bits(k[src + 1u]) << 16);
    dev_ptr<uint32_t>(p.v_cache)[dst] =
        f32_to_f16_bits(v[src]) | ((uint32_t)f32_to_f16_bits(v[src + 1u]) << 16);
}

// store_kv_q8_0, store_kv_q4_0: the same rows into a quantized cache, as
// ggml's set_rows stores them (the CPU backend's store_row): a row of
// kv_dim values is kv_dim / 32 blocks back to back, and one thread
// quantizes one block of K and one of V. The blocks are only 2-byte
// aligned, so they are written in 16-bit units.
//
//   Q8_0 {f16 d; int8 qs[32]}, ggml's x86 quantizer: amax = max |x|,
//        d = amax / 127, q = rint(x * (127 / amax)) (0 for amax = 0);
//   Q4_0 {f16 d; uint8 qs[16]}, ggml's quantize_row_q4_0_ref: m = the
//        first value of largest |x|, d = m / -8, q = min(15, trunc(x / d
//        + 8.5)) (x * (1 / d) in f32; 0 + 8 for d = 0), qs[j] = q(x[j])
//        | q(x[j + 16]) << 4.
//
// Divisions are correctly rounded (ops_common.h), d rounded to f16
// (nearest even). Grid ceil(rows * kv_dim / 32 / 64).

namespace ops {

enum class KvQuant { Q8_0, Q4_0 };

template <KvQuant T> DEV void store_kv_block(const float* x, uint16_t* b) {
    float v[32];
#pragma unroll
    for (uint32_t j = 0u; j < 32u; j++) {
        v[j] = x[j];
    }
    if (T == KvQuant::Q8_0) {
        float amax = 0.0f;
#pragma unroll
        for (uint32_t j = 0u; j < 32u; j++) {
            amax = dev_fmaxf(amax, dev_fabsf(v[j]));
        }
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[0] = f32_to_f16_bits(d);
#pragma unroll
        for (uint32_t j = 0u; j < 16u; j++) {
            uint32_t q0 = (uint32_t)(int32_t)dev_rintf(v[2u * j] * id) & 0xFFu;
            uint32_t q1 = (uint32_t)(int32_t)dev_rintf(v[2u * j + 1u] * id) & 0xFFu;
            b[1u + j] = (uint16_t)(q0 | (q1 << 8));
        }
    } else {
        float amax = 0.0f;
        float max = 0.0f;
#pragma unroll
        for (uint32_t j = 0u; j < 32u; j++) {
            if (amax < dev_fabsf(v[j])) {
                amax = dev_fabsf(v[j]);
                max = v[j];
            }
        }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[0] = f32_to_f16_bits(d);
        uint32_t q[16];
#pragma unroll
        for (uint32_t j = 0u; j < 16u; j++) {
            int32_t lo = __builtin_elementwise_min((int32_t)(v[j] * id + 8.5f), 15);
            int32_t hi = __builtin_elementwise_min((int32_t)(v[j + 16u] * id + 8.5f), 15);
            q[j] = (uint32_t)lo | ((uint32_t)hi << 4);
        }
#pragma unroll
        for (uint32_t j = 0u; j < 8u; j++) {
            b[1u + j] = (uint16_t)(q[2u * j] | (q[2u * j + 1u] << 8));
        }
    }
}

template <KvQuant T> DEV void store_kv_quant_run(const StoreKvPush& p) {
    constexpr uint32_t UNITS = T == KvQuant::Q8_0 ? 17u : 9u; // 16-bit units a block
    uint32_t idx = wg_linear() * STORE_KV_OPS_WG + thread_id_x();
    uint32_t blocks = p.kv_dim / 32u;
    if (idx >= p.rows * blocks) {
        return;
    }
    uint32_t r = idx / blocks;
    uint32_t c = idx % blocks;
    uint64_t src = (uint64_t)r * p.kv_dim + 32u * c;
    uint64_t dst = ((uint64_t)((step_pos0(p.step) + r) % p.ring) * blocks + c) * UNITS;
    store_kv_block<T>(dev_ptr<const float>(p.k) + src, dev_ptr<uint16_t>(p.k_cache) + dst);
    store_kv_block<T>(dev_ptr<const float>(p.v) + src, dev_ptr<uint16_t>(p.v_cache) + dst);
}

} // namespace ops

KERNEL LAUNCH_BOUNDS(STORE_KV_OPS_WG) void store_kv_q8_0(StoreKvPush p) {
    ops::store_kv_quant_run<ops::KvQuant::Q8_0>(p);
}
KERNEL LAUNCH_BOUNDS(STORE_KV_OPS_WG) void store_kv_q4_0(StoreKvPush p) {
    ops::store_kv_quant_run<ops::KvQuant::Q4_0>(p);
}
