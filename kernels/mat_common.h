// Shared by the weight kernels that take a MatPush (matvec, matvec_int,
// matmul, matmul_cmps): the fused parts (up to three matmuls of one input,
// Q/K/V or gate/up, in one launch; the workgroup index picks the part, as
// in the shaders).
#pragma once

#include "push.h"
#include "quant/all.h"

// Largest token count of the decode mat-vecs (MV_MAX_TOKENS in the
// shaders; rocmforge_core::gpu's MATVEC_MAX_TOKENS).
#define MV_MAX_TOKENS 8u

// Element p (0..2, wave-uniform) of a push block's per-part array, by
// selects: a dynamic index into the by-value argument would copy it to
// scratch (a local depot on NVPTX).
// The NVPTX barrier keeps the optimizer from turning the select of three
// loaded values back into a load from a selected address (which needs the
// argument copied to local memory).
DEV uint64_t part_u64(const uint64_t a[3], uint32_t p) {
    uint64_t a0 = a[0], a1 = a[1], a2 = a[2];
#if RF_NVPTX
    asm("" : "+l"(a0), "+l"(a1), "+l"(a2));
#endif
    return p == 0u ? a0 : (p == 1u ? a1 : a2);
}
DEV uint32_t part_u32(const uint32_t a[3], uint32_t p) {
    uint32_t a0 = a[0], a1 = a[1], a2 = a[2];
#if RF_NVPTX
    asm("" : "+r"(a0), "+r"(a1), "+r"(a2));
#endif
    return p == 0u ? a0 : (p == 1u ? a1 : a2);
}

// The part that workgroup g falls in when part i takes count[i]
// workgroups (the shaders' `while (p < n_parts && g >= count(p))` loop);
// g becomes the index within the part. Returns n_parts or more when g is
// past every part (the last grid row's extra groups).
DEV uint32_t find_part(uint32_t n_parts, const uint32_t count[3], uint32_t& g) {
    uint32_t p = 0u;
#pragma unroll
    for (uint32_t i = 0u; i < 3u; i++) {
        if (p == i && i < n_parts && g >= count[i]) {
            g -= count[i];
            p = i + 1u;
        }
    }
    return p;
}

// Bytes per weight row of k values (plain float rows may end mid-"block":
// size rows by elements, as the shaders do).
template <typename Q> DEV uint64_t row_bytes_of(uint32_t k) {
    return (uint64_t)k * Q::BLOCK_BYTES / Q::K;
}

// ---- The grouped expert matmul's tiles (matmul_id_*) --------------------
//
// A prefill matmul kernel's tokens are rows of x read and rows of out
// written; the dense matmul's tile takes tokens t0.., the grouped expert
// matmul's the pairs of one slot of moe_group's table (ops_moe.hip), each
// reading x row pair / x_div and writing out row pair.

// Tokens t0 + tt of a dense matmul.
struct DenseRows {
    uint32_t t0;
};
DEV uint32_t x_row(const DenseRows& r, uint32_t tt) { return r.t0 + tt; }
DEV uint32_t out_row(const DenseRows& r, uint32_t tt) { return r.t0 + tt; }

// The pairs of a grouped tile and the x rows they read, as loaded into
// shared memory (no division by x_div per load).
struct GroupRows {
    const uint32_t* pairs;
    const uint32_t* x_rows;
};
DEV uint32_t x_row(const GroupRows& r, uint32_t tt) { return r.x_rows[tt]; }
DEV uint32_t out_row(const GroupRows& r, uint32_t tt) { return r.pairs[tt]; }

// A workgroup's tile of a grouped matmul: slot wg % slots of the table,
// rows (wg / slots) * BR... `used` is false (for the whole workgroup) for
// an unused slot or rows past the end.
struct GroupTile {
    bool used;
    uint32_t expert;
    uint32_t n; // pairs in the tile, at most BT
    uint32_t r0;
};

// Reads this workgroup's tile and loads its BT pairs into `pairs` and the
// x rows they read into `x_rows` (shared; past n, pair 0, a valid row).
// Call from uniform control flow with all WG threads.
template <uint32_t BR, uint32_t BT, uint32_t WG>
DEV GroupTile group_tile(const MatGroupPush& s, uint32_t* pairs, uint32_t* x_rows) {
    const uint32_t g = wg_linear();
    GroupTile t;
    t.r0 = (g / s.slots) * BR;
    const uint4 d = dev_ptr<const uint4>(s.table)[g % s.slots];
    t.used = d.x != 0xFFFFFFFFu && t.r0 < s.rows;
    t.expert = d.x;
    t.n = d.z - d.y;
    if (t.used) {
        const uint32_t* order = dev_ptr<const uint32_t>(s.table + (uint64_t)s.slots * 16u);
        for (uint32_t i = thread_id_x(); i < BT; i += WG) {
            const uint32_t p = d.y + i < d.z ? order[d.y + i] : 0u;
            pairs[i] = p;
            x_rows[i] = p / s.x_div;
        }
    }
    block_barrier();
    return t;
}

// The tile's expert's weights, and its biases (nullptr for none).
DEV const uint8_t* group_weights(const MatGroupPush& s, const GroupTile& g) {
    return dev_ptr<const uint8_t>(s.w + g.expert * s.expert_bytes);
}
DEV const float* group_bias(const MatGroupPush& s, const GroupTile& g) {
    return s.bias != 0u ? dev_ptr<const float>(s.bias) + (uint64_t)g.expert * s.rows : nullptr;
}
