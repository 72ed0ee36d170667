// The grouped expert matmul's side of matmul.comp and matmul_coopmat.comp
// (MAT_ID): its push constants (rocmforge_core::gpu::push::MatGroupPush),
// the workgroup's tile (one slot of moe_group's table times a range of
// rows) and the gather of its pairs. Include after the layout declaration.
#ifndef MAT_ID_GLSL
#define MAT_ID_GLSL

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w;
    // moe_group's table: `slots` uvec4 (expert, begin, end, 0), then the
    // pairs sorted by expert.
    uint64_t table;
    uint64_t out_;
    uint64_t expert_bytes;
    // Per-expert biases, `rows` f32 per expert (0 for none).
    uint64_t bias;
    uint rows;
    uint k;
    uint n_pairs;
    // Pairs per row of x: the experts per token, or 1.
    uint x_div;
    uint slots;
    uint pad;
} pc;

// The pairs of this workgroup's slot, in its order (MAT_ID_MAX_TOKENS is
// the largest tile of tokens of the including kernel).
shared uint mat_id_pairs[MAT_ID_MAX_TOKENS];

struct MatIdTile {
    bool used;
    uint expert;
    // Pairs in the tile (at most the kernel's tile of tokens).
    uint n;
    uint r0;
    uint64_t w;
};

// This workgroup's tile: slot wg % slots, rows (wg / slots) * br..; loads
// its pairs into mat_id_pairs. Call from uniform control flow; returns
// used = false (for the whole workgroup) for an unused slot or a workgroup
// past the grid.
MatIdTile mat_id_tile(uint br, uint bt) {
    uint tile = wg_linear();
    MatIdTile g;
    g.r0 = (tile / pc.slots) * br;
    uvec4 d = U4s(pc.table).v[tile % pc.slots];
    g.used = d.x != 0xFFFFFFFFu && g.r0 < pc.rows;
    g.expert = d.x;
    g.n = d.z - d.y;
    g.w = pc.w + uint64_t(d.x) * pc.expert_bytes;
    if (g.used) {
        U32s order = U32s(pc.table + uint64_t(pc.slots) * 16ul);
        for (uint i = gl_LocalInvocationID.x; i < bt; i += gl_WorkGroupSize.x) {
            mat_id_pairs[i] = d.y + i < d.z ? order.v[d.y + i] : 0u;
        }
    }
    memoryBarrierShared();
    barrier();
    return g;
}

// Pair (output row) of the tile's token tt.
uint mat_id_pair(uint tt) { return mat_id_pairs[tt]; }

// Row of x that the tile's token tt reads.
uint mat_id_x_row(uint tt) { return mat_id_pairs[tt] / pc.x_div; }

#endif
