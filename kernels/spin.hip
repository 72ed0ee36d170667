// Test only: spins until the host sets flag[0] (or `bound` polls), to show
// that the backend's bounded wait fires and the process exits cleanly.
// Launch one workgroup (rocmforge_core::gpu::workgroup_size("spin") = 1;
// only invocation 0 polls). Each poll is a volatile load, so it is neither
// hoisted out of the loop nor served from a cache that never sees the
// host's write; flag[1] receives the number of polls, so the loop has an
// observable result. The argument block is the Vulkan shader's (SpinPush).
#include "push.h"

KERNEL LAUNCH_BOUNDS(1) void spin(SpinPush p) {
    if (thread_id_x() != 0u || block_id_x() != 0u) {
        return;
    }
    volatile uint32_t* flag = dev_ptr<volatile uint32_t>(p.flag);
    uint64_t i = 0u;
    while (i < p.bound && flag[0] == 0u) {
        i++;
    }
    flag[1] = i > 0xffffffffu ? 0xffffffffu : (uint32_t)i;
}
