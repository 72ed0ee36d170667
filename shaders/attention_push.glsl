// Attention's argument block: AttentionPush (rocmforge_core::gpu::push),
// shared by attention.comp and attention_combine.comp.
layout(push_constant, std430) uniform Push {
    uint64_t q;
    uint64_t out_;
    uint64_t k_cache; // the layer's K block
    uint64_t v_cache;
    uint64_t step;
    uint n_tokens;
    uint n_head;
    uint n_head_kv;
    uint head_dim;
    uint kv_dim;
    float scale;
    uint64_t q8; // OUT_Q8 only
    uint64_t q8_scales;
    uint window; // 0: every position; else the last `window` (sliding)
    uint ring; // position p is row p % ring of the blocks (a sliding ring)
    uint64_t sinks; // one f32 logit per head, 0: none
    // SPLIT and the combine (rocmforge_core::gpu::split): per run its
    // unnormalised output, then per run (maximum, sum).
    uint64_t partials;
    uint n_split; // runs per (token, head) row
    uint split_min; // fewest positions a run takes
    // A u32 per (token, head) row, zero at the start of every step: the
    // decode kernels count a row's finished runs there and the last merges
    // them (attention_merge.glsl); 0: attention_combine.comp merges.
    uint64_t counters;
} pc;
