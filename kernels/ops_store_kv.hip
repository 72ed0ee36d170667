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
