// Merges split decode attention (attention_decode.comp, or attention.comp
// with SPLIT; rocmforge_core::gpu::split) in a launch of its own: one
// workgroup per (token, head) row, attention_merge.glsl's merge_runs. The
// lowering uses it where the decode kernels do not merge themselves
// (pc.counters = 0: fusion off).
//
// OUT_Q8 also writes the output Q8-packed (q8_packed.glsl) for the integer
// mat-vec that reads it; the head size is then a multiple of 32.
#version 460
#extension GL_GOOGLE_include_directive : require
#define NEEDS_REDUCE
#include "common.glsl"

layout(local_size_x = WG_SIZE) in;

#ifdef ATT_DIMS
#define MERGE_DIMS ATT_DIMS
#endif

#include "attention_push.glsl"
#include "attention_merge.glsl"

void main() {
    uint g = wg_linear();
    if (g >= pc.n_tokens * pc.n_head) {
        return;
    }
#ifdef OUT_Q8
    merge_runs(g, true);
#else
    merge_runs(g, false);
#endif
}
