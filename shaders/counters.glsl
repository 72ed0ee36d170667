// The step's counters (rocmforge_core::plan::StepInputLayout: u32 words
// that every step starts at zero), where the workgroups of a launch count
// themselves so that the last to finish does the launch's closing work.
#ifndef COUNTERS_GLSL
#define COUNTERS_GLSL

#include "types.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer CountersC {
    uint v[];
};

shared uint last_flag;

// Called once by every invocation of a workgroup, from uniform control
// flow, after the workgroup's buffer writes (through `coherent`
// references): counts the workgroup in the counter at `counter` (zero
// before the launch) and tells all its invocations whether it is the
// n-th, the last of the launch's n to finish. That one then sees every
// other workgroup's writes (device-scope barriers on both sides of the
// count) and finds the counter put back to zero for the next launch.
bool last_to_finish(uint64_t counter, uint n) {
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        last_flag = atomicAdd(CountersC(counter).v[0], 1u) + 1u == n ? 1u : 0u;
    }
    memoryBarrierShared();
    barrier();
    if (last_flag == 0u) {
        return false;
    }
    memoryBarrierBuffer();
    if (gl_LocalInvocationID.x == 0u) {
        CountersC(counter).v[0] = 0u;
    }
    return true;
}

#endif
