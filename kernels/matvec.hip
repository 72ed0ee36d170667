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
// (x_scales and residual unused), grid: the parts' rows summed (wg_linear);
// moe_router_f32 (below), the f32 router with the routing, and
// moe_norm_router_f32, the same with the FFN norm in front.
#include "mat_common.h"
#include "moe_route.h"

#define MV_WG 64u
#define MV_WAVES (MV_WG / WAVE_SIZE)

DEV float dot4_f32(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// Float4 i of token t's row of x (k4 float4s a row), as matvec_row reads
// it: the rows as they are...
struct RowsAsIs {
    const float4* x;
    uint32_t k4;
    DEV_METHOD float4 operator()(uint32_t t, uint32_t i) const { return x[(uint64_t)t * k4 + i]; }
};

// ...or normalised by an RMS norm first, (x * scale_t) * w, as rmsnorm
// writes them (moe_norm_router_f32; `scale` in shared memory).
struct RowsNormed {
    const float4* x;
    const float4* w;
    const float* scale;
    uint32_t k4;
    DEV_METHOD float4 operator()(uint32_t t, uint32_t i) const {
        return x[(uint64_t)t * k4 + i] * scale[t] * w[i];
    }
};

// Row r of W (at `row`, k columns) against the n tokens of x by a
// workgroup of WG threads, written to out[t * m + r] with bias[r] added
// (bias 0: none); part_sums: MV_MAX_TOKENS * WG / WAVE_SIZE floats. Each
// thread dequantizes U units before it sums them (the same sums in the
// same order for any U): the router's f32 rows take 8, a 2048-column
// row's whole share for a wave, so its loads are in flight together and a
// row costs one trip to memory, not one a unit.
template <typename Q, uint32_t WG, uint32_t U = 1u, typename X>
DEV void matvec_row(X x, const uint8_t* row, uint32_t k, uint32_t n, uint64_t bias, float* out,
                    uint32_t m, uint32_t r, float* part_sums) {
    constexpr uint32_t WAVES = WG / WAVE_SIZE;
    const uint32_t units = k / 8u;
    constexpr uint32_t UNITS = Q::K / 8u;
    float acc[MV_MAX_TOKENS];
#pragma unroll
    for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
        acc[t] = 0.0f;
    }
    for (uint32_t u0 = thread_id_x(); u0 < units; u0 += WG * U) {
        // Every unit's loads before any sum, and no branch between them:
        // a unit past the row's end reads the last one again and sums
        // zeros (+0 to the sum: the same sums in the same order). With
        // the sums of a unit behind `u < units` instead, the compiler sank
        // each unit's loads into its branch, one trip to memory a unit.
        float8 w[U];
#pragma unroll
        for (uint32_t j = 0u; j < U; j++) {
            const bool in_row = u0 + j * WG < units;
            const uint32_t u = in_row ? u0 + j * WG : units - 1u;
            w[j] = Q::dequant8(row, u / UNITS, u % UNITS);
            if (!in_row) {
                w[j] = (float8)(0.0f);
            }
        }
#pragma unroll
        for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t < n) { // uniform: n is an argument
                float4 xv[2u * U];
#pragma unroll
                for (uint32_t j = 0u; j < U; j++) {
                    const uint32_t u = u0 + j * WG < units ? u0 + j * WG : units - 1u;
                    xv[2u * j] = x(t, 2u * u);
                    xv[2u * j + 1u] = x(t, 2u * u + 1u);
                }
#pragma unroll
                for (uint32_t j = 0u; j < U; j++) {
                    acc[t] += dot4_f32(w[j].lo, xv[2u * j]) + dot4_f32(w[j].hi, xv[2u * j + 1u]);
                }
            }
        }
    }
#pragma unroll
    for (uint32_t t = 0u; t < MV_MAX_TOKENS; t++) {
        if (t < n) {
            float v = wave_sum(acc[t]);
            if (lane_id() == 0u) {
                part_sums[t * WAVES + wave_id()] = v;
            }
        }
    }
    block_barrier();
    const uint32_t t = thread_id_x();
    if (t < n) {
        float v = 0.0f;
#pragma unroll
        for (uint32_t i = 0u; i < WAVES; i++) {
            v += part_sums[t * WAVES + i];
        }
        if (bias != 0u) {
            v += dev_ptr<const float>(bias)[r];
        }
        out[(uint64_t)t * m + r] = v;
    }
}

template <typename Q> DEV void matvec(const MatPush& s) {
    __shared__ float part_sums[MV_MAX_TOKENS * MV_WAVES];
    uint32_t r = wg_linear();
    const uint32_t count[3] = {s.rows[0], s.rows[1], s.rows[2]};
    const uint32_t p = find_part(s.n_parts, count, r);
    if (p >= s.n_parts) {
        return;
    }
    const uint8_t* row = dev_ptr<const uint8_t>(part_u64(s.w, p)) + (uint64_t)r * row_bytes_of<Q>(s.k);
    matvec_row<Q, MV_WG>(RowsAsIs{dev_ptr<const float4>(s.x), s.k / 4u}, row, s.k, s.n, part_u64(s.bias, p),
                  dev_ptr<float>(part_u64(s.out, p)), part_u32(s.rows, p), r, part_sums);
}

#define MATVEC_KERNEL(ty, Q)                                                                        \
    KERNEL LAUNCH_BOUNDS(MV_WG) void matvec_##ty(MatPush s) { matvec<Q>(s); }
RF_WEIGHT_TYPES(MATVEC_KERNEL)
#undef MATVEC_KERNEL

// moe_router_f32 (MoeRouterPush): the router's rows as matvec_f32 computes
// them, one workgroup of one wave per expert; the last to finish
// (last_to_finish, in the step's counter) routes every token as moe_route
// does. Up to
// MOE_ROUTE_WG * MOE_ROUTE_HELD experts (the lowering's limit).
//
// moe_norm_router_f32 (the same argument block, norm_x set): the FFN norm
// in front of the router too. Each workgroup takes every token's scale as
// rmsnorm does (squares rounded to f32, summed in f64, its own order),
// reads the rows normalised (RowsNormed), and writes blocks of 32 r,
// r + n_expert, ... of the norm's output to s.x (and Q8-packed to s.q8,
// as rmsnorm_q8) for the experts. Its row walk loads 4 units a lane
// before it sums them, not 8: the norm's weights for them are loaded too,
// and 8 ran out of scalar registers (52 SGPRs spilled on gfx11).
#define ROUTER_WG MOE_ROUTE_WG
#define ROUTER_UNROLL 8u
#define NORM_UNROLL 8u
static_assert(ROUTER_WG == WAVE_SIZE, "the norm's blocks: one a wave");

// Every token's norm scale (to `scale`, shared memory), then this
// workgroup's blocks of the norm's output, a wave each (lane = value).
DEV void router_norm(const MoeRouterPush& s, uint32_t r, float* scale) {
    const float* src = dev_ptr<const float>(s.norm_x);
    const float* nw = dev_ptr<const float>(s.norm_w);
    for (uint32_t t = 0u; t < s.n; t++) {
        // The squares in f64 are exact sums for any order but the rarest.
        const float4* row4 = dev_ptr<const float4>(s.norm_x) + (uint64_t)t * (s.cols / 4u);
        // NORM_UNROLL float4s a lane loaded before any is summed (in the
        // same order), with no branch between: the plain loop made a trip
        // to memory of each, and a sum behind `c < c4` had its load sunk
        // into the branch again. Past the row a lane sums zeros (+0).
        double ss = 0.0;
        const uint32_t c4 = s.cols / 4u;
        for (uint32_t c0 = thread_id_x(); c0 < c4; c0 += ROUTER_WG * NORM_UNROLL) {
            float4 v[NORM_UNROLL];
#pragma unroll
            for (uint32_t j = 0u; j < NORM_UNROLL; j++) {
                const uint32_t c = c0 + j * ROUTER_WG;
                v[j] = row4[c < c4 ? c : c4 - 1u];
                if (c >= c4) {
                    v[j] = (float4)(0.0f); // past the row: sums +0
                }
            }
#pragma unroll
            for (uint32_t j = 0u; j < NORM_UNROLL; j++) {
                ss += (double)(v[j].x * v[j].x) + (double)(v[j].y * v[j].y) + (double)(v[j].z * v[j].z) +
                      (double)(v[j].w * v[j].w);
            }
        }
        // One wave: its sum is the workgroup's.
        const float mean = (float)(wave_sum_f64(ss) / (double)s.cols);
        if (lane_id() == 0u) {
            scale[t] = 1.0f / dev_sqrtf(mean + s.eps);
        }
    }
    block_barrier();
    const uint32_t nb = s.cols / 32u;
    float* out = dev_ptr<float>(s.x);
    for (uint32_t gb = r; gb < s.n * nb; gb += s.n_expert) {
        const uint32_t t = gb / nb;
        const uint32_t c = (gb % nb) * 32u + lane_id();
        const float v = src[(uint64_t)t * s.cols + c] * scale[t] * nw[c];
        out[(uint64_t)t * s.cols + c] = v;
        if (s.q8 != 0u) {
            wave_store_q8_packed(v, dev_ptr<int8_t>(s.q8), dev_ptr<float2>(s.q8_scales), gb);
        }
    }
}

template <bool NORM>
DEV void moe_router(const MoeRouterPush& s, float* part_sums, uint64_t* tab, float* scale) {
    const uint32_t r = wg_linear();
    if (r >= s.n_expert) {
        return; // the whole workgroup, and none is counted
    }
    const uint8_t* row = dev_ptr<const uint8_t>(s.w) + (uint64_t)r * row_bytes_of<quant::F32>(s.cols);
    if (NORM) {
        router_norm(s, r, scale);
        matvec_row<quant::F32, ROUTER_WG, ROUTER_UNROLL / 2u>(
            RowsNormed{dev_ptr<const float4>(s.norm_x), dev_ptr<const float4>(s.norm_w), scale,
                       s.cols / 4u},
            row, s.cols, s.n, s.bias, dev_ptr<float>(s.logits), s.n_expert, r, part_sums);
    } else {
        matvec_row<quant::F32, ROUTER_WG, ROUTER_UNROLL>(
            RowsAsIs{dev_ptr<const float4>(s.x), s.cols / 4u}, row, s.cols, s.n, s.bias,
            dev_ptr<float>(s.logits), s.n_expert, r, part_sums);
    }
    if (!last_to_finish(dev_ptr<uint32_t>(s.counter), s.n_expert)) {
        return; // the whole workgroup
    }
    MoeRoutePush route;
    route.logits = s.logits;
    route.ids = s.ids;
    route.weights = s.weights;
    route.n_rows = s.n;
    route.n_expert = s.n_expert;
    route.k = s.k;
    route.normalize = s.normalize;
    for (uint32_t t = 0u; t < s.n; t++) {
        ops::moe_route_held(route, t, lane_id(), tab);
    }
}

KERNEL LAUNCH_BOUNDS(ROUTER_WG) void moe_router_f32(MoeRouterPush s) {
    __shared__ float part_sums[MV_MAX_TOKENS * (ROUTER_WG / WAVE_SIZE)];
    __shared__ uint64_t tab[32];
    moe_router<false>(s, part_sums, tab, nullptr);
}

KERNEL LAUNCH_BOUNDS(ROUTER_WG) void moe_norm_router_f32(MoeRouterPush s) {
    __shared__ float part_sums[MV_MAX_TOKENS * (ROUTER_WG / WAVE_SIZE)];
    __shared__ uint64_t tab[32];
    __shared__ float scale[MV_MAX_TOKENS];
    moe_router<true>(s, part_sums, tab, scale);
}
#undef ROUTER_WG
#undef ROUTER_UNROLL
#undef NORM_UNROLL
