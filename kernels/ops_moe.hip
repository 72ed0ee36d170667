// Mixture-of-experts routing and combining (shaders/moe.comp), llama.cpp's
// build_moe_ffn with softmax gating:
//   moe_route  per token row of router logits, one wave of 32: softmax
//              (libm's e^x and an f64 normaliser, as the CPU) into shared
//              memory, then the k most probable experts best first (lower
//              index first among equals) into ids (as f32) and their
//              probabilities into weights, divided by their sum (clamped as
//              ggml does) when normalize is set. Each pick is a wave argmax
//              (lane shuffles, no barrier) over the experts ranked after
//              the previous pick. Argument block MoeRoutePush, grid: rows.
//              (A workgroup of 64 with a shared-memory argmax per pick, 7
//              barriers each, took 13.7 us a layer in a Qwen3-30B-A3B
//              decode on the H200.)
//   moe_sum    out[t][i] = sum over j of weights[t][j] * x[t*k + j][i], in
//              order of j, each product rounded before it is added, one
//              thread per value; then a residual added where the push
//              block names one (a fused residual add). Argument block
//              MoeSumPush, 256 threads, grid ceil(rows * cols / 256).
//   moe_group  the (token, choice) pairs of ids sorted by expert for the
//              grouped expert matmul (matmul_id_*), one workgroup of 256:
//              counted per expert, a prefix sum over the experts, each
//              pair placed in its expert's range of `order` (in no fixed
//              order within it: each pair's output row is computed alone),
//              and a slot (expert, begin, end, 0) per tile of at most
//              `tile` pairs of one expert, unused slots' expert 0xFFFFFFFF.
//              Argument block MoeGroupPush, grid 1.
#include "ops_common.h"
#include "moe_route.h"

#define MOE_SUM_WG 256u
#define MOE_GROUP_WG 256u
// Largest expert count (rocmforge_core::gpu::moe::MOE_GROUP_MAX_EXPERTS).
#define MOE_GROUP_MAX_E 256u

KERNEL LAUNCH_BOUNDS(MOE_ROUTE_WG) void moe_route(MoeRoutePush s) {
    __shared__ float prob[MOE_ROUTE_MAX_E];
    __shared__ uint64_t tab[32];
    const uint32_t t = wg_linear();
    if (t >= s.n_rows) {
        return;
    }
    const uint32_t lane = thread_id_x();
    if (s.n_expert <= MOE_ROUTE_WG * MOE_ROUTE_HELD) {
        ops::moe_route_held(s, t, lane, tab);
        return;
    }
    const uint32_t n_e = s.n_expert;
    const float* l = dev_ptr<const float>(s.logits) + (uint64_t)t * n_e;
    float mx = -__builtin_inff();
    for (uint32_t e = lane; e < n_e; e += MOE_ROUTE_WG) {
        mx = dev_fmaxf(mx, l[e]);
    }
    mx = wave_max(mx);
    // The CPU sums the normaliser in f64 (ggml's soft_max). Each e^x is
    // computed once, kept in shared memory, then scaled (the kernel is one
    // wave's chain of dependent instructions: ncu saw ~1,850 of them at
    // 8.5 cycles each, e^x a large part).
    double sum = 0.0;
    for (uint32_t e = lane; e < n_e; e += MOE_ROUTE_WG) {
        const float ex = ops::libm_expf(l[e] - mx);
        prob[e] = ex;
        sum += (double)ex;
    }
    const float inv = (float)(1.0 / wave_sum_f64(sum));
    for (uint32_t e = lane; e < n_e; e += MOE_ROUTE_WG) {
        prob[e] = prob[e] * inv;
    }
    wave_barrier();
    float* ids = dev_ptr<float>(s.ids) + (uint64_t)t * s.k;
    float* w = dev_ptr<float>(s.weights) + (uint64_t)t * s.k;
    float prev_p = __builtin_inff();
    uint32_t prev_e = 0xFFFFFFFFu;
    float chosen = 0.0f;
    // Lane j keeps pick j (j < 32) and writes it at the end, so the
    // normalised weights need no reread of global memory: a store then a
    // load of the same address per pick cost most of the kernel's time.
    float my_p = 0.0f;
    uint32_t my_e = 0u;
    for (uint32_t j = 0u; j < s.k; j++) {
        // Each lane's best expert ranked after the previous pick, then the
        // wave's best of those: a butterfly over a total order, so every
        // lane ends with the same pick.
        float best_p = -1.0f;
        uint32_t best_e = 0xFFFFFFFFu;
        for (uint32_t e = lane; e < n_e; e += MOE_ROUTE_WG) {
            const float pe = prob[e];
            if (ops::ranks_before(prev_p, prev_e, pe, e) && ops::ranks_before(pe, e, best_p, best_e)) {
                best_p = pe;
                best_e = e;
            }
        }
        ops::wave_best(best_p, best_e);
        prev_p = best_p;
        prev_e = best_e;
        chosen += prev_p;
        if (j == lane) {
            my_p = prev_p;
            my_e = prev_e;
        } else if (j >= MOE_ROUTE_WG && lane == 0u) {
            ids[j] = ops::clamped_id(prev_e, n_e);
            w[j] = prev_p;
        }
    }
    ops::moe_route_store(s, t, lane, my_p, my_e, chosen);
}

KERNEL LAUNCH_BOUNDS(MOE_SUM_WG) void moe_sum(MoeSumPush s) {
    const uint32_t i = wg_linear() * MOE_SUM_WG + thread_id_x();
    if (i >= s.n_rows * s.cols) {
        return;
    }
    const uint32_t t = i / s.cols;
    const uint32_t c = i % s.cols;
    const float* x = dev_ptr<const float>(s.x) + (uint64_t)(t * s.k) * s.cols;
    const float* w = dev_ptr<const float>(s.weights) + (uint64_t)t * s.k;
    float acc = ops::moe_weighted(x, w, s.k, s.cols, c);
    if (s.residual != 0u) {
        acc += dev_ptr<const float>(s.residual)[i];
    }
    dev_ptr<float>(s.out)[i] = acc;
}

KERNEL LAUNCH_BOUNDS(MOE_GROUP_WG) void moe_group(MoeGroupPush s) {
    __shared__ uint32_t count[MOE_GROUP_MAX_E];
    // Expert e's pairs are order[first[e] .. first[e + 1]], its tiles the
    // slots tile_first[e] .. tile_first[e + 1].
    __shared__ uint32_t first[MOE_GROUP_MAX_E + 1u];
    __shared__ uint32_t tile_first[MOE_GROUP_MAX_E + 1u];
    const uint32_t tid = thread_id_x();
    const uint32_t n_e = s.n_expert;
    const float* ids = dev_ptr<const float>(s.ids);
    uint4* slot = dev_ptr<uint4>(s.table);
    uint32_t* order = dev_ptr<uint32_t>(s.table + (uint64_t)s.slots * 16u);
    for (uint32_t e = tid; e < n_e; e += MOE_GROUP_WG) {
        count[e] = 0u;
    }
    block_barrier();
    for (uint32_t i = tid; i < s.n_pairs; i += MOE_GROUP_WG) {
        shared_fetch_add(&count[__builtin_elementwise_min((uint32_t)ids[i], n_e - 1u)], 1u);
    }
    block_barrier();
    if (tid == 0u) {
        uint32_t at = 0u;
        uint32_t tiles = 0u;
        for (uint32_t e = 0u; e < n_e; e++) {
            first[e] = at;
            tile_first[e] = tiles;
            at += count[e];
            tiles += (count[e] + s.tile - 1u) / s.tile;
            count[e] = 0u;
        }
        first[n_e] = at;
        tile_first[n_e] = tiles;
    }
    block_barrier();
    for (uint32_t i = tid; i < s.n_pairs; i += MOE_GROUP_WG) {
        const uint32_t e = __builtin_elementwise_min((uint32_t)ids[i], n_e - 1u);
        order[first[e] + shared_fetch_add(&count[e], 1u)] = i;
    }
    for (uint32_t sl = tid; sl < s.slots; sl += MOE_GROUP_WG) {
        if (sl >= tile_first[n_e]) {
            slot[sl] = (uint4){0xFFFFFFFFu, 0u, 0u, 0u};
            continue;
        }
        // The expert whose tiles hold sl: tile_first[e] <= sl < tile_first[e + 1].
        uint32_t lo = 0u;
        uint32_t hi = n_e;
        while (hi - lo > 1u) {
            const uint32_t mid = (lo + hi) / 2u;
            if (tile_first[mid] <= sl) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        const uint32_t begin = first[lo] + (sl - tile_first[lo]) * s.tile;
        const uint32_t end = __builtin_elementwise_min(begin + s.tile, first[lo + 1u]);
        slot[sl] = (uint4){lo, begin, end, 0u};
    }
}
