// The routing of router logits (llama.cpp's build_moe_ffn with softmax
// gating), for moe.comp's OP_ROUTE and the router mat-vec that routes its
// own logits (matvec.comp's ROUTE): softmax into shared memory, then the k
// most probable experts best first (lower index first among equals) into
// ids (as f32) and their probabilities into weights, divided by their sum
// (clamped as ggml does) when normalize is set. Each of the k picks is a
// workgroup argmax over the experts ranked after the previous pick:
// subgroup operations only where the subgroup is the workgroup.
//
// Needs NEEDS_REDUCE (common.glsl's wg_max, wg_sum) and WG_SIZE: the
// workgroup routes a token. LOGITS is the buffer reference type the logits
// are read through (F32s, or a coherent one where other workgroups of the
// launch wrote them).
#ifndef MOE_ROUTE_GLSL
#define MOE_ROUTE_GLSL

#ifndef LOGITS
#define LOGITS F32s
#endif

// Most experts (rocmforge_core::gpu::moe::MAX_EXPERTS).
#define MAX_E 512u

struct RouteArgs {
    uint64_t logits;
    uint64_t ids;
    uint64_t weights;
    uint n_expert;
    uint k;
    uint normalize;
};

shared float prob[MAX_E];
shared uint min_buf[WG_SIZE]; // one slot per subgroup

// True when (p, e) ranks before (q, f): more probable, or as probable with a
// lower index.
bool ranks_before(float p, uint e, float q, uint f) {
    return p > q || (p == q && e < f);
}

// A picked expert as the f32 id the expert kernels read. No expert ranks
// after the previous pick when the logits hold a NaN: the id is clamped so
// the expert kernels never read outside the expert stack (the values are
// garbage either way).
float clamped_id(uint e, uint n_expert) {
    return float(min(e, n_expert - 1u));
}

// Smallest (`largest` false) or largest `v` over the workgroup, returned
// to every invocation: integer subgroup reductions (one instruction on
// NVIDIA). Call from uniform control flow.
uint wg_extreme_u(uint v, bool largest) {
    v = largest ? subgroupMax(v) : subgroupMin(v);
    if (gl_NumSubgroups == 1u) {
        return v;
    }
    if (subgroupElect()) {
        min_buf[gl_SubgroupID] = v;
    }
    memoryBarrierShared();
    barrier();
    uint m = min_buf[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) {
        m = largest ? max(m, min_buf[i]) : min(m, min_buf[i]);
    }
    memoryBarrierShared();
    barrier();
    return m;
}

uint wg_min_u(uint v) { return wg_extreme_u(v, false); }
uint wg_max_u(uint v) { return wg_extreme_u(v, true); }

// Routes token t of r: the whole workgroup, from uniform control flow.
void route_token(RouteArgs r, uint t) {
    uint lane = gl_LocalInvocationID.x;
    LOGITS l = LOGITS(r.logits);
    uint base = t * r.n_expert;
    // prob[] may still be read for the previous token.
    memoryBarrierShared();
    barrier();
    // The logits are read once, into the invocation's own slots of prob[].
    float mx = -1.0 / 0.0;
    for (uint e = lane; e < r.n_expert; e += WG_SIZE) {
        float v = l.v[base + e];
        prob[e] = v;
        mx = max(mx, v);
    }
    mx = wg_max(mx);
    // Each e^x computed once, kept in shared memory, then scaled.
    float part = 0.0;
    for (uint e = lane; e < r.n_expert; e += WG_SIZE) {
        float ex = exp(prob[e] - mx);
        prob[e] = ex;
        part += ex;
    }
    float inv = 1.0 / wg_sum(part);
    for (uint e = lane; e < r.n_expert; e += WG_SIZE) {
        prob[e] = prob[e] * inv;
    }
    memoryBarrierShared();
    barrier();
    float prev_p = 1.0 / 0.0;
    uint prev_e = 0xFFFFFFFFu;
    float chosen = 0.0;
    // Invocation j keeps pick j (j < WG_SIZE) and writes it at the end, so
    // the normalised weights need no reread of global memory.
    float my_p = 0.0;
    uint my_e = 0u;
    for (uint j = 0u; j < r.k; j++) {
        // Each invocation's best expert ranked after the previous pick,
        // then the workgroup's best of those: the largest probability, and
        // the lowest index among the invocations that hold it.
        float best_p = -1.0;
        uint best_e = 0xFFFFFFFFu;
        for (uint e = lane; e < r.n_expert; e += WG_SIZE) {
            float pe = prob[e];
            if (ranks_before(prev_p, prev_e, pe, e) && ranks_before(pe, e, best_p, best_e)) {
                best_p = pe;
                best_e = e;
            }
        }
        // Probabilities are ≥ 0, whose bits order as they do: the largest
        // is an integer maximum of the bits plus one (0: no candidate).
        uint key = best_p >= 0.0 ? floatBitsToUint(best_p) + 1u : 0u;
        uint top = wg_max_u(key);
        prev_e = wg_min_u(key == top ? best_e : 0xFFFFFFFFu);
        prev_p = top == 0u ? -1.0 : uintBitsToFloat(top - 1u);
        chosen += prev_p;
        if (j == lane) {
            my_p = prev_p;
            my_e = prev_e;
        } else if (j >= WG_SIZE && lane == 0u) {
            F32s(r.ids).v[t * r.k + j] = clamped_id(prev_e, r.n_expert);
            F32s(r.weights).v[t * r.k + j] = prev_p;
        }
    }
    float d = max(chosen, 6.103515625e-5);
    if (lane < r.k) {
        F32s(r.ids).v[t * r.k + lane] = clamped_id(my_e, r.n_expert);
        F32s(r.weights).v[t * r.k + lane] = r.normalize != 0u ? my_p / d : my_p;
    }
    // Picks past the workgroup's invocations: invocation 0 wrote them, so
    // it rereads its own writes.
    if (r.normalize != 0u && lane == 0u) {
        for (uint j = WG_SIZE; j < r.k; j++) {
            F32s(r.weights).v[t * r.k + j] /= d;
        }
    }
}

#endif
