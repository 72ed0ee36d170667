// Test only: spins until the host sets the flag word, to exercise the
// bounded fence wait and the timeout path. Many workgroups each poll the
// flag up to `bound` times (llvmpipe caps the iterations of one loop nest
// at 65535, so the length comes from the workgroup count); once the flag is
// set, every remaining workgroup returns at its first poll.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "types.glsl"

layout(local_size_x = 1) in;

// Word 0: the flag; word 1 receives an iteration count, so the loop has an
// observable result and cannot be removed.
layout(buffer_reference, std430, buffer_reference_align = 4) coherent volatile buffer Flag {
    uint v;
    uint iterations;
};

layout(push_constant, std430) uniform Push {
    uint64_t flag;
    uint64_t bound;
} pc;

void main() {
    Flag f = Flag(pc.flag);
    uint i = 0u;
    // A volatile read each iteration: it cannot be hoisted, and unlike an
    // atomic it is not served from a GPU cache that never sees the host's
    // write (the H100 kept spinning on an atomic poll of host memory).
    while (uint64_t(i) < pc.bound && f.v == 0u) {
        i++;
    }
    atomicMax(f.iterations, i);
}
