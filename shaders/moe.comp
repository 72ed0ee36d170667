// Mixture-of-experts routing and combining (llama.cpp's build_moe_ffn with
// softmax gating); OP picks the op at build time:
// OP_ROUTE: per token row of router logits, one workgroup of 32:
//   moe_route.glsl's route_token (shared with the router mat-vec that
//   routes its own logits, matvec.comp's ROUTE): softmax into shared
//   memory, then the k most probable experts best first (lower index first
//   among equals) into ids (as f32) and their probabilities into weights,
//   divided by their sum (clamped as ggml does) when normalize is set.
//   Each of the k picks is a workgroup argmax over the experts ranked after
//   the previous pick: subgroup operations only where the subgroup is the
//   workgroup. (One invocation per token took 35 us a
//   layer in a Qwen3-30B-A3B decode on the H100; 64 invocations with a
//   shared-memory argmax per pick, 7 barriers each, 13.7 us on the H200
//   in HIP.)
// OP_SUM: out[t][i] = sum over j of weights[t][j] * x[t * k + j][i], in
//   order of j, one invocation per value; then residual[t][i] added where
//   the push block names one (a fused residual add).
// OP_GROUP: the (token, choice) pairs of ids sorted by expert for the
//   grouped expert matmul (matmul.comp's MAT_ID), one workgroup of 256:
//   the pairs counted per expert, a prefix sum over the experts, each pair
//   placed in its expert's range of `order` (in no fixed order within it:
//   every pair's output row is computed alone, so results do not depend on
//   it), and one slot (expert, begin, end, 0) per tile of at most `tile`
//   pairs of one expert, the unused slots' expert 0xFFFFFFFF. The table is
//   `slots` uvec4 slots, then `order` (rocmforge_core::gpu::moe).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#if defined(OP_ROUTE)
// Built with WG_SIZE = 32 and NEEDS_REDUCE (common.glsl's wg_max, wg_sum).
layout(local_size_x = WG_SIZE) in;

layout(push_constant, std430) uniform Push {
    uint64_t logits;
    uint64_t ids;
    uint64_t weights;
    uint n_rows;
    uint n_expert;
    uint k;
    uint normalize;
} pc;

#include "moe_route.glsl"

void main() {
    uint t = wg_linear();
    if (t >= pc.n_rows) {
        return;
    }
    route_token(RouteArgs(pc.logits, pc.ids, pc.weights, pc.n_expert, pc.k, pc.normalize), t);
}
#elif defined(OP_SUM)
layout(local_size_x = 256) in;

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t weights;
    uint64_t out_;
    uint n_rows;
    uint cols;
    uint k;
    uint pad;
    uint64_t residual;
} pc;

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= pc.n_rows * pc.cols) {
        return;
    }
    uint t = i / pc.cols;
    uint c = i % pc.cols;
    F32s x = F32s(pc.x);
    F32s w = F32s(pc.weights);
    precise float acc = x.v[(t * pc.k) * pc.cols + c] * w.v[t * pc.k];
    for (uint j = 1u; j < pc.k; j++) {
        precise float term = x.v[(t * pc.k + j) * pc.cols + c] * w.v[t * pc.k + j];
        acc += term;
    }
    if (pc.residual != 0ul) {
        acc += F32s(pc.residual).v[i];
    }
    F32s(pc.out_).v[i] = acc;
}
#elif defined(OP_GROUP)
// Largest expert count (MOE_GROUP_MAX_EXPERTS in rocmforge_core::gpu::moe).
#define MAX_E 256u
layout(local_size_x = 256) in;

layout(push_constant, std430) uniform Push {
    uint64_t ids;
    uint64_t table;
    uint n_pairs;
    uint n_expert;
    uint tile;
    uint slots;
} pc;

shared uint count_[MAX_E];
// Expert e's pairs are order[first[e] .. first[e + 1]], its tiles slots
// tile_first[e] .. tile_first[e + 1].
shared uint first[MAX_E + 1u];
shared uint tile_first[MAX_E + 1u];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint n_e = pc.n_expert;
    F32s ids = F32s(pc.ids);
    U4s slot = U4s(pc.table);
    U32s order = U32s(pc.table + uint64_t(pc.slots) * 16ul);
    for (uint e = tid; e < n_e; e += 256u) {
        count_[e] = 0u;
    }
    memoryBarrierShared();
    barrier();
    for (uint i = tid; i < pc.n_pairs; i += 256u) {
        atomicAdd(count_[min(uint(ids.v[i]), n_e - 1u)], 1u);
    }
    memoryBarrierShared();
    barrier();
    if (tid == 0u) {
        uint at = 0u;
        uint tiles = 0u;
        for (uint e = 0u; e < n_e; e++) {
            first[e] = at;
            tile_first[e] = tiles;
            at += count_[e];
            tiles += (count_[e] + pc.tile - 1u) / pc.tile;
            count_[e] = 0u;
        }
        first[n_e] = at;
        tile_first[n_e] = tiles;
    }
    memoryBarrierShared();
    barrier();
    for (uint i = tid; i < pc.n_pairs; i += 256u) {
        uint e = min(uint(ids.v[i]), n_e - 1u);
        order.v[first[e] + atomicAdd(count_[e], 1u)] = i;
    }
    for (uint s = tid; s < pc.slots; s += 256u) {
        if (s >= tile_first[n_e]) {
            slot.v[s] = uvec4(0xFFFFFFFFu, 0u, 0u, 0u);
            continue;
        }
        // The expert whose tiles hold s: tile_first[e] <= s < tile_first[e + 1].
        uint lo = 0u;
        uint hi = n_e;
        while (hi - lo > 1u) {
            uint mid = (lo + hi) / 2u;
            if (tile_first[mid] <= s) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        uint begin = first[lo] + (s - tile_first[lo]) * pc.tile;
        slot.v[s] = uvec4(lo, begin, min(begin + pc.tile, first[lo + 1u]), 0u);
    }
}
#else
#error "no OP_ defined"
#endif
