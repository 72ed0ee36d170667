// The kernels' argument blocks: C mirrors of rocmforge_core::gpu::push (the
// Vulkan shaders' push-constant blocks), one per kernel family. A kernel
// takes exactly one of these, by value, as its only parameter; the host
// passes the bytes `Push::bytes()` gives. Pointers are u64 device addresses
// (dev_ptr<T>() below turns one into a typed global pointer). Every u64 is
// 8-aligned and the fields leave no padding; the static_asserts pin every
// size and offset to the Rust structs' (keep both sides in step).
//
// Also here, shared by every kernel family: the flattened workgroup index
// and the step-input region, read as the shaders read them
// (shaders/common.glsl).
#pragma once

#include "prelude.h"

// ---- Argument blocks ---------------------------------------------------

// embed_<ty>: rows of the token table for the step's token ids.
struct EmbedPush {
    uint64_t table;
    uint64_t out;
    uint64_t step;
    uint32_t row_bytes;
    uint32_t cols;
    uint32_t n_vocab;
    uint32_t n_tokens;
};

// matvec_<ty>, matvec_int_<ty>, matmul_<ty>, matmul_cmps_<ty>: up to three
// matmuls of one input (n_parts), out[p][t][r] = x[t] . w[p][r] (+ bias).
struct MatPush {
    uint64_t x;
    uint64_t w[3];
    uint64_t out[3];
    uint64_t bias[3];
    uint32_t rows[3];
    uint32_t k;
    uint32_t n;
    uint32_t n_parts;
    // Per-block (d, s) of Q8-packed activations (matvec_int only).
    uint64_t x_scales;
    // Rows added to the output, a fused residual add (matvec_int only; 0 =
    // none).
    uint64_t residual;
    // Teams a mat-vec workgroup is split into (always 1 here: the HIP
    // lowering does not split, Lowering::row_teams).
    uint32_t teams;
    uint32_t pad;
};

struct NormPush {
    uint64_t x;
    uint64_t w;
    uint64_t out;
    uint32_t group;
    uint32_t n_groups;
    float eps;
    uint32_t pad;
    // Where rmsnorm_q8 also writes its output Q8-packed (quants, scales).
    uint64_t q8;
    uint64_t q8_scales;
    // A second norm of the same group size (rmsnorm only): workgroups
    // n_groups .. n_groups + n_groups2 normalise x2 by w2 into out2.
    uint64_t x2;
    uint64_t w2;
    uint64_t out2;
    uint32_t n_groups2;
    uint32_t pad2;
};

// YaRN's per-op terms (graph::YarnTerms): ext_factor 0 and mscale 1 for
// plain RoPE.
struct YarnPush {
    float ext_factor;
    float mscale;
    float corr_lo;
    float corr_hi;
};

struct RopePush {
    uint64_t x;
    uint64_t step;
    uint64_t freq_factors;
    uint32_t rows;
    uint32_t n_heads;
    uint32_t head_dim;
    uint32_t n_rot;
    uint32_t neox;
    float theta_scale;
    float freq_scale;
    YarnPush yarn;
    uint32_t pad;
};

// rope_kv: RoPE of Q (at x) and K, and the step's K / V rows stored into
// the layer's cache.
struct RopeKvPush {
    uint64_t x;
    uint64_t step;
    uint64_t freq_factors;
    uint32_t rows;
    uint32_t n_heads;
    uint32_t head_dim;
    uint32_t n_rot;
    uint32_t neox;
    float theta_scale;
    float freq_scale;
    uint32_t n_heads_kv;
    YarnPush yarn;
    uint64_t k;
    uint64_t v;
    uint64_t k_cache;
    uint64_t v_cache;
    uint32_t ring; // position p is row p % ring of the layer's blocks
    uint32_t pad;
};

// norm_rope_kv: Qwen3's per-head norms of Q and K, RoPE of both (no
// YaRN), and the step's K / V rows stored into the layer's cache.
struct NormRopeKvPush {
    uint64_t q;
    uint64_t q_out;
    uint64_t k;
    uint64_t k_out;
    uint64_t v;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t step;
    uint64_t freq_factors;
    uint64_t q_norm;
    uint64_t k_norm;
    uint32_t rows;
    uint32_t n_heads;
    uint32_t head_dim;
    uint32_t n_rot;
    uint32_t neox;
    float theta_scale;
    float freq_scale;
    uint32_t n_heads_kv;
    uint32_t ring; // position p is row p % ring of the layer's blocks
    float eps;
};

struct StoreKvPush {
    uint64_t k;
    uint64_t v;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t step;
    uint32_t rows;
    uint32_t kv_dim;
    uint32_t ring; // position p is row p % ring of the layer's blocks
    uint32_t pad;
};

struct AttentionPush {
    uint64_t q;
    uint64_t out;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t step;
    uint32_t n_tokens;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;
    uint32_t kv_dim;
    float scale;
    // Where attention_staged_q8 also writes its output Q8-packed.
    uint64_t q8;
    uint64_t q8_scales;
    // Positions a token attends to (itself and the ones before), 0 for all.
    uint32_t window;
    uint32_t ring; // position p is row p % ring of the layer's blocks
    // One f32 logit per query head joining every softmax's denominator
    // (attention sinks), 0 for none.
    uint64_t sinks;
    // Split decode attention (attention_split, attention_combine*; 0
    // otherwise): per split its maximum, sum and unnormalised output.
    uint64_t partials;
    uint32_t n_split;   // splits of each (token, head) row's positions
    uint32_t split_min; // fewest positions a split takes
    // A u32 per (token, head) row, zero at the start of every step: where
    // the decode kernels count a row's finished runs so that the last
    // merges them (attention_combine's work); 0: a combine launch merges.
    uint64_t counters;
};

struct EltwisePush {
    uint64_t a;
    uint64_t b;
    uint64_t out;
    uint32_t n;
    float factor; // scale's factor, swiglu_oai's alpha
    float limit;  // swiglu_oai's clamp
    uint32_t cols; // sigmoid_gate: values per row of a (b has one per row)
};

struct MoeRoutePush {
    uint64_t logits;
    uint64_t ids;
    uint64_t weights;
    uint32_t n_rows;
    uint32_t n_expert;
    uint32_t k;
    uint32_t normalize;
};

// moe_router_f32: the router mat-vec of f32 weights for up to 8 tokens,
// one workgroup per expert, whose last workgroup to finish routes the
// logits as moe_route does (counting in `counter`, a u32 of the step-input
// region's counters, zero at every step's start, put back to zero).
struct MoeRouterPush {
    uint64_t x;
    uint64_t w;
    uint64_t bias; // n_expert f32, 0 for none
    uint64_t logits;
    uint64_t ids;
    uint64_t weights;
    uint64_t counter;
    // The FFN norm in front (norm_x 0: none, x is the router's input):
    // its input rows, weight, and Q8-packed output (q8 0: none); x is
    // then the norm's output, written.
    uint64_t norm_x;
    uint64_t norm_w;
    uint64_t q8;
    uint64_t q8_scales;
    uint32_t cols;
    uint32_t n_expert;
    uint32_t n;
    uint32_t k;
    uint32_t normalize;
    float eps;
};

// attn_temp: Llama 4's attention temperature, rows of cols at pos0 + r.
struct AttnTempPush {
    uint64_t x;
    uint64_t step;
    uint32_t n;
    uint32_t cols;
    float scale;
    uint32_t floor;
};

struct MatIdPush {
    uint64_t x;
    uint64_t w;
    uint64_t ids;
    uint64_t out;
    uint64_t expert_bytes;
    uint32_t rows;
    uint32_t k;
    uint32_t n_pairs;
    uint32_t x_div;
    uint64_t bias; // per-expert f32 rows of `rows`, 0 for none
    uint64_t x_scales; // matvec_id_int_*: the Q8-packed blocks' (d, s)
    // matvec_id_int_*: a second stack of the same shape read with the same
    // input and ids (up beside gate), its output and biases; 0 for none.
    uint64_t up_w;
    uint64_t up_out;
    uint64_t up_bias;
};

// moe_group: the pairs of ids sorted by expert into a table of `slots`
// uint4 slots (expert, begin, end, 0), then `order`
// (rocmforge_core::gpu::moe).
struct MoeGroupPush {
    uint64_t ids;
    uint64_t table;
    uint32_t n_pairs;
    uint32_t n_expert;
    uint32_t tile; // most pairs per slot
    uint32_t slots;
};

// matmul_id_*: the grouped expert matmul over moe_group's table.
struct MatGroupPush {
    uint64_t x;
    uint64_t w;
    uint64_t table;
    uint64_t out;
    uint64_t expert_bytes;
    uint64_t bias; // per-expert f32 rows of `rows`, 0 for none
    uint32_t rows;
    uint32_t k;
    uint32_t n_pairs;
    uint32_t x_div;
    uint32_t slots;
    uint32_t pad;
};

struct MoeSumPush {
    uint64_t x;
    uint64_t weights;
    uint64_t out;
    uint32_t n_rows;
    uint32_t cols;
    uint32_t k;
    uint32_t pad;
    uint64_t residual; // added to each sum (a fused residual add), 0 for none
};

// moe_sum_rmsnorm(_q8): moe_sum of row t plus its residual, written to sum,
// then rmsnorm(_q8) of it into out (and q8 / q8_scales), a workgroup per row.
struct MoeSumNormPush {
    uint64_t x;
    uint64_t weights;
    uint64_t residual;
    uint64_t sum;
    uint64_t w;
    uint64_t out;
    uint64_t q8;
    uint64_t q8_scales;
    uint32_t cols;
    uint32_t n_rows;
    uint32_t k;
    float eps;
};

struct SpinPush {
    uint64_t flag;
    uint64_t bound;
};

struct QuantizePush {
    uint64_t x;
    uint64_t out;
    uint32_t n;
    uint32_t pad;
    // Where quantize_q8_packed writes the per-block (d, s).
    uint64_t scales;
    // swiglu_q8 and swiglu_oai_q8 only: the up projection (x is the gate)
    // and where the f32 SwiGLU output goes.
    uint64_t up;
    uint64_t act;
    // swiglu_oai_q8 only: gpt-oss's alpha and limit.
    float alpha;
    float limit;
};

#define RF_PUSH_AT(T, f, off) static_assert(__builtin_offsetof(T, f) == (off), #T "." #f " offset")

static_assert(sizeof(EmbedPush) == 40, "EmbedPush size");
RF_PUSH_AT(EmbedPush, table, 0);
RF_PUSH_AT(EmbedPush, out, 8);
RF_PUSH_AT(EmbedPush, step, 16);
RF_PUSH_AT(EmbedPush, row_bytes, 24);
RF_PUSH_AT(EmbedPush, cols, 28);
RF_PUSH_AT(EmbedPush, n_vocab, 32);
RF_PUSH_AT(EmbedPush, n_tokens, 36);

static_assert(sizeof(MatPush) == 128, "MatPush size");
RF_PUSH_AT(MatPush, x, 0);
RF_PUSH_AT(MatPush, w, 8);
RF_PUSH_AT(MatPush, out, 32);
RF_PUSH_AT(MatPush, bias, 56);
RF_PUSH_AT(MatPush, rows, 80);
RF_PUSH_AT(MatPush, k, 92);
RF_PUSH_AT(MatPush, n, 96);
RF_PUSH_AT(MatPush, n_parts, 100);
RF_PUSH_AT(MatPush, x_scales, 104);
RF_PUSH_AT(MatPush, residual, 112);
RF_PUSH_AT(MatPush, teams, 120);

static_assert(sizeof(NormPush) == 88, "NormPush size");
RF_PUSH_AT(NormPush, x, 0);
RF_PUSH_AT(NormPush, w, 8);
RF_PUSH_AT(NormPush, out, 16);
RF_PUSH_AT(NormPush, group, 24);
RF_PUSH_AT(NormPush, n_groups, 28);
RF_PUSH_AT(NormPush, eps, 32);
RF_PUSH_AT(NormPush, pad, 36);
RF_PUSH_AT(NormPush, q8, 40);
RF_PUSH_AT(NormPush, q8_scales, 48);
RF_PUSH_AT(NormPush, x2, 56);
RF_PUSH_AT(NormPush, w2, 64);
RF_PUSH_AT(NormPush, out2, 72);
RF_PUSH_AT(NormPush, n_groups2, 80);
RF_PUSH_AT(NormPush, pad2, 84);

static_assert(sizeof(YarnPush) == 16, "YarnPush size");
static_assert(sizeof(RopePush) == 72, "RopePush size");
RF_PUSH_AT(RopePush, x, 0);
RF_PUSH_AT(RopePush, step, 8);
RF_PUSH_AT(RopePush, freq_factors, 16);
RF_PUSH_AT(RopePush, rows, 24);
RF_PUSH_AT(RopePush, n_heads, 28);
RF_PUSH_AT(RopePush, head_dim, 32);
RF_PUSH_AT(RopePush, n_rot, 36);
RF_PUSH_AT(RopePush, neox, 40);
RF_PUSH_AT(RopePush, theta_scale, 44);
RF_PUSH_AT(RopePush, freq_scale, 48);
RF_PUSH_AT(RopePush, yarn, 52);
RF_PUSH_AT(RopePush, pad, 68);

static_assert(sizeof(RopeKvPush) == 112, "RopeKvPush size");
RF_PUSH_AT(RopeKvPush, x, 0);
RF_PUSH_AT(RopeKvPush, step, 8);
RF_PUSH_AT(RopeKvPush, freq_factors, 16);
RF_PUSH_AT(RopeKvPush, rows, 24);
RF_PUSH_AT(RopeKvPush, n_heads, 28);
RF_PUSH_AT(RopeKvPush, head_dim, 32);
RF_PUSH_AT(RopeKvPush, n_rot, 36);
RF_PUSH_AT(RopeKvPush, neox, 40);
RF_PUSH_AT(RopeKvPush, theta_scale, 44);
RF_PUSH_AT(RopeKvPush, freq_scale, 48);
RF_PUSH_AT(RopeKvPush, n_heads_kv, 52);
RF_PUSH_AT(RopeKvPush, yarn, 56);
RF_PUSH_AT(RopeKvPush, k, 72);
RF_PUSH_AT(RopeKvPush, v, 80);
RF_PUSH_AT(RopeKvPush, k_cache, 88);
RF_PUSH_AT(RopeKvPush, v_cache, 96);
RF_PUSH_AT(RopeKvPush, ring, 104);

static_assert(sizeof(NormRopeKvPush) == 128, "NormRopeKvPush size");
RF_PUSH_AT(NormRopeKvPush, q, 0);
RF_PUSH_AT(NormRopeKvPush, q_out, 8);
RF_PUSH_AT(NormRopeKvPush, k, 16);
RF_PUSH_AT(NormRopeKvPush, k_out, 24);
RF_PUSH_AT(NormRopeKvPush, v, 32);
RF_PUSH_AT(NormRopeKvPush, k_cache, 40);
RF_PUSH_AT(NormRopeKvPush, v_cache, 48);
RF_PUSH_AT(NormRopeKvPush, step, 56);
RF_PUSH_AT(NormRopeKvPush, freq_factors, 64);
RF_PUSH_AT(NormRopeKvPush, q_norm, 72);
RF_PUSH_AT(NormRopeKvPush, k_norm, 80);
RF_PUSH_AT(NormRopeKvPush, rows, 88);
RF_PUSH_AT(NormRopeKvPush, n_heads, 92);
RF_PUSH_AT(NormRopeKvPush, head_dim, 96);
RF_PUSH_AT(NormRopeKvPush, n_rot, 100);
RF_PUSH_AT(NormRopeKvPush, neox, 104);
RF_PUSH_AT(NormRopeKvPush, theta_scale, 108);
RF_PUSH_AT(NormRopeKvPush, freq_scale, 112);
RF_PUSH_AT(NormRopeKvPush, n_heads_kv, 116);
RF_PUSH_AT(NormRopeKvPush, ring, 120);
RF_PUSH_AT(NormRopeKvPush, eps, 124);

static_assert(sizeof(StoreKvPush) == 56, "StoreKvPush size");
RF_PUSH_AT(StoreKvPush, k, 0);
RF_PUSH_AT(StoreKvPush, v, 8);
RF_PUSH_AT(StoreKvPush, k_cache, 16);
RF_PUSH_AT(StoreKvPush, v_cache, 24);
RF_PUSH_AT(StoreKvPush, step, 32);
RF_PUSH_AT(StoreKvPush, rows, 40);
RF_PUSH_AT(StoreKvPush, kv_dim, 44);
RF_PUSH_AT(StoreKvPush, ring, 48);

static_assert(sizeof(AttentionPush) == 120, "AttentionPush size");
RF_PUSH_AT(AttentionPush, q, 0);
RF_PUSH_AT(AttentionPush, out, 8);
RF_PUSH_AT(AttentionPush, k_cache, 16);
RF_PUSH_AT(AttentionPush, v_cache, 24);
RF_PUSH_AT(AttentionPush, step, 32);
RF_PUSH_AT(AttentionPush, n_tokens, 40);
RF_PUSH_AT(AttentionPush, n_head, 44);
RF_PUSH_AT(AttentionPush, n_head_kv, 48);
RF_PUSH_AT(AttentionPush, head_dim, 52);
RF_PUSH_AT(AttentionPush, kv_dim, 56);
RF_PUSH_AT(AttentionPush, scale, 60);
RF_PUSH_AT(AttentionPush, q8, 64);
RF_PUSH_AT(AttentionPush, q8_scales, 72);
RF_PUSH_AT(AttentionPush, window, 80);
RF_PUSH_AT(AttentionPush, ring, 84);
RF_PUSH_AT(AttentionPush, sinks, 88);
RF_PUSH_AT(AttentionPush, partials, 96);
RF_PUSH_AT(AttentionPush, n_split, 104);
RF_PUSH_AT(AttentionPush, split_min, 108);

static_assert(sizeof(EltwisePush) == 40, "EltwisePush size");
RF_PUSH_AT(EltwisePush, a, 0);
RF_PUSH_AT(EltwisePush, b, 8);
RF_PUSH_AT(EltwisePush, out, 16);
RF_PUSH_AT(EltwisePush, n, 24);
RF_PUSH_AT(EltwisePush, factor, 28);
RF_PUSH_AT(EltwisePush, limit, 32);
RF_PUSH_AT(EltwisePush, cols, 36);

static_assert(sizeof(MoeRoutePush) == 40, "MoeRoutePush size");
RF_PUSH_AT(MoeRoutePush, logits, 0);
RF_PUSH_AT(MoeRoutePush, ids, 8);
RF_PUSH_AT(MoeRoutePush, weights, 16);
RF_PUSH_AT(MoeRoutePush, n_rows, 24);
RF_PUSH_AT(MoeRoutePush, n_expert, 28);
RF_PUSH_AT(MoeRoutePush, k, 32);
RF_PUSH_AT(MoeRoutePush, normalize, 36);

static_assert(sizeof(MoeRouterPush) == 112, "MoeRouterPush size");
RF_PUSH_AT(MoeRouterPush, counter, 48);
RF_PUSH_AT(MoeRouterPush, norm_x, 56);
RF_PUSH_AT(MoeRouterPush, q8_scales, 80);
RF_PUSH_AT(MoeRouterPush, cols, 88);
RF_PUSH_AT(MoeRouterPush, eps, 108);

static_assert(sizeof(AttnTempPush) == 32, "AttnTempPush size");
RF_PUSH_AT(AttnTempPush, step, 8);
RF_PUSH_AT(AttnTempPush, floor, 28);

static_assert(sizeof(MatIdPush) == 96, "MatIdPush size");
RF_PUSH_AT(MatIdPush, up_w, 72);
RF_PUSH_AT(MatIdPush, up_bias, 88);
RF_PUSH_AT(MatIdPush, x, 0);
RF_PUSH_AT(MatIdPush, w, 8);
RF_PUSH_AT(MatIdPush, ids, 16);
RF_PUSH_AT(MatIdPush, out, 24);
RF_PUSH_AT(MatIdPush, expert_bytes, 32);
RF_PUSH_AT(MatIdPush, rows, 40);
RF_PUSH_AT(MatIdPush, k, 44);
RF_PUSH_AT(MatIdPush, n_pairs, 48);
RF_PUSH_AT(MatIdPush, x_div, 52);
RF_PUSH_AT(MatIdPush, bias, 56);
RF_PUSH_AT(MatIdPush, x_scales, 64);

static_assert(sizeof(MoeGroupPush) == 32, "MoeGroupPush size");
RF_PUSH_AT(MoeGroupPush, table, 8);
RF_PUSH_AT(MoeGroupPush, n_pairs, 16);
RF_PUSH_AT(MoeGroupPush, slots, 28);

static_assert(sizeof(MatGroupPush) == 72, "MatGroupPush size");
RF_PUSH_AT(MatGroupPush, table, 16);
RF_PUSH_AT(MatGroupPush, out, 24);
RF_PUSH_AT(MatGroupPush, expert_bytes, 32);
RF_PUSH_AT(MatGroupPush, bias, 40);
RF_PUSH_AT(MatGroupPush, rows, 48);
RF_PUSH_AT(MatGroupPush, k, 52);
RF_PUSH_AT(MatGroupPush, n_pairs, 56);
RF_PUSH_AT(MatGroupPush, x_div, 60);
RF_PUSH_AT(MatGroupPush, slots, 64);

static_assert(sizeof(MoeSumPush) == 48, "MoeSumPush size");
RF_PUSH_AT(MoeSumPush, residual, 40);
RF_PUSH_AT(MoeSumPush, x, 0);
RF_PUSH_AT(MoeSumPush, weights, 8);
RF_PUSH_AT(MoeSumPush, out, 16);
RF_PUSH_AT(MoeSumPush, n_rows, 24);
RF_PUSH_AT(MoeSumPush, cols, 28);
RF_PUSH_AT(MoeSumPush, k, 32);
RF_PUSH_AT(MoeSumPush, pad, 36);

static_assert(sizeof(MoeSumNormPush) == 80, "MoeSumNormPush size");
RF_PUSH_AT(MoeSumNormPush, x, 0);
RF_PUSH_AT(MoeSumNormPush, weights, 8);
RF_PUSH_AT(MoeSumNormPush, residual, 16);
RF_PUSH_AT(MoeSumNormPush, sum, 24);
RF_PUSH_AT(MoeSumNormPush, w, 32);
RF_PUSH_AT(MoeSumNormPush, out, 40);
RF_PUSH_AT(MoeSumNormPush, q8, 48);
RF_PUSH_AT(MoeSumNormPush, q8_scales, 56);
RF_PUSH_AT(MoeSumNormPush, cols, 64);
RF_PUSH_AT(MoeSumNormPush, n_rows, 68);
RF_PUSH_AT(MoeSumNormPush, k, 72);
RF_PUSH_AT(MoeSumNormPush, eps, 76);

static_assert(sizeof(SpinPush) == 16, "SpinPush size");
RF_PUSH_AT(SpinPush, flag, 0);
RF_PUSH_AT(SpinPush, bound, 8);

static_assert(sizeof(QuantizePush) == 56, "QuantizePush size");
RF_PUSH_AT(QuantizePush, x, 0);
RF_PUSH_AT(QuantizePush, out, 8);
RF_PUSH_AT(QuantizePush, n, 16);
RF_PUSH_AT(QuantizePush, pad, 20);
RF_PUSH_AT(QuantizePush, scales, 24);
RF_PUSH_AT(QuantizePush, up, 32);
RF_PUSH_AT(QuantizePush, act, 40);
RF_PUSH_AT(QuantizePush, alpha, 48);
RF_PUSH_AT(QuantizePush, limit, 52);

#undef RF_PUSH_AT

// ---- Device addresses --------------------------------------------------

// A u64 device address as a typed pointer into global memory. Through the
// global address space first: the optimizer then knows it is global (AMDGPU
// global_load/global_store rather than flat ones, which also wait on the
// LDS counter), and converting back to a generic pointer lets helpers take
// plain T*.
template <typename T> DEV T* dev_ptr(uint64_t addr) {
    return (T*)(__attribute__((address_space(1))) T*)addr;
}

// ---- Workgroups and step inputs (shaders/common.glsl) ------------------

// Grids of more than 65535 workgroups are folded into x and y by the host
// (rocmforge_core::gpu::grid): one linear index; kernels return when it is
// past their count (the last row's extra groups).
DEV uint32_t wg_linear() { return block_id_x() + block_id_y() * grid_dim_x(); }

// The step-input region (u32 words): 0 = pos0, 1 = n_kv, 2 = n_tokens,
// 3 = 0, 4.. = token ids, written by the host before every run, so one
// recorded graph serves every position.
DEV uint32_t step_pos0(uint64_t step) { return dev_ptr<const uint32_t>(step)[0]; }
DEV uint32_t step_n_kv(uint64_t step) { return dev_ptr<const uint32_t>(step)[1]; }
DEV uint32_t step_token(uint64_t step, uint32_t r) { return dev_ptr<const uint32_t>(step)[4u + r]; }
