// Embed (shaders/embed.comp): dequantized rows of the token embedding table
// for the step's token ids, read from the step-input region. One workgroup
// of EMBED_WG per token; each invocation writes 8-value units u = tid,
// tid + EMBED_WG, ... of its row as two 16-byte stores.
//
// Kernels: embed_<ty> for every weight type (quant/all.h), argument block
// EmbedPush, grid: n_tokens workgroups (wg_linear).
#include "push.h"
#include "quant/all.h"

#define EMBED_WG 64u

template <typename Q> DEV void embed(const EmbedPush& p) {
    const uint32_t r = wg_linear();
    if (r >= p.n_tokens) {
        return;
    }
    // The session checks ids; clamp anyway so a bad id cannot read outside
    // the table.
    const uint32_t id = __builtin_elementwise_min(step_token(p.step, r), p.n_vocab - 1u);
    const uint8_t* row = dev_ptr<const uint8_t>(p.table) + (uint64_t)id * p.row_bytes;
    float4* o = dev_ptr<float4>(p.out) + (uint64_t)r * (p.cols / 4u);
    constexpr uint32_t UNITS = Q::K / 8u;
    for (uint32_t u = thread_id_x(); u < p.cols / 8u; u += EMBED_WG) {
        float8 v = Q::dequant8(row, u / UNITS, u % UNITS);
        o[2u * u] = v.lo;
        o[2u * u + 1u] = v.hi;
    }
}

#define EMBED_KERNEL(ty, Q)                                                                         \
    KERNEL LAUNCH_BOUNDS(EMBED_WG) void embed_##ty(EmbedPush p) { embed<Q>(p); }
RF_WEIGHT_TYPES(EMBED_KERNEL)
#undef EMBED_KERNEL
