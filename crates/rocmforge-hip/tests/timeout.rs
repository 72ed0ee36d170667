//! A kernel that never finishes must end the wait with a timeout error
//! naming it and the likely causes, within the bound, and leave the backend
//! refusing further work, without hanging the process
//! (`rocmforge_testkit::Spin`: the child process, the deadline, the checks).
//!
//! Without a HIP or CUDA runtime the test prints why and passes, unless
//! `ROCMFORGE_REQUIRE_BACKENDS` names `rocm`.

use std::time::Duration;

use rocmforge_core::gpu::GpuOptions;
use rocmforge_hip::HipOptions;
use rocmforge_testkit::{open_or_skip, Spin};

const SPIN: Spin = Spin {
    child_var: "ROCMFORGE_HIP_SPIN_CHILD",
    timeout: Duration::from_secs(1),
    wait_at_most: Duration::from_secs(3),
    // A cold PTX JIT in CUDA mode is part of the child's start-up.
    deadline: Duration::from_secs(120),
};

fn open() -> Result<rocmforge_hip::HipBackend, rocmforge_core::backend::BackendError> {
    rocmforge_hip::open(HipOptions::from_env(), GpuOptions::from_env())
}

#[test]
fn spin_child() {
    SPIN.child(open);
}

#[test]
fn a_spinning_kernel_times_out_in_a_child_process() {
    if open_or_skip(open(), &["rocm", "hip"]).is_none() {
        return;
    }
    SPIN.parent(&["amdgpu.cwsr_enable=0", "HSA_ENABLE_SDMA=0"]);
}
