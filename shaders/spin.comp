// Test only: spins until the host sets the flag word or `bound` iterations
// pass, to exercise the bounded fence wait and the timeout path.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "types.glsl"

layout(local_size_x = 1) in;

layout(buffer_reference, std430, buffer_reference_align = 4) coherent volatile buffer Flag { uint v; };

layout(push_constant, std430) uniform Push {
    uint64_t flag;
    uint64_t bound;
} pc;

void main() {
    Flag f = Flag(pc.flag);
    for (uint64_t i = 0ul; i < pc.bound; i++) {
        if (f.v != 0u) {
            break;
        }
    }
}
