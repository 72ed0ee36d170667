//! A kernel that never finishes must end the step with a timeout error
//! naming it, within the configured bound, and leave the backend refusing
//! further work, without hanging the process (`rocmforge_testkit::Spin`:
//! the child process, the deadline, the checks).

mod common;

use std::time::Duration;

use rocmforge_testkit::Spin;

const SPIN: Spin = Spin {
    child_var: "ROCMFORGE_VULKAN_SPIN_CHILD",
    timeout: Duration::from_secs(1),
    wait_at_most: Duration::from_secs(5),
    deadline: Duration::from_secs(60),
};

#[test]
fn spin_child() {
    SPIN.child(|| common::open(common::options()));
}

#[test]
fn a_spinning_kernel_times_out_in_a_child_process() {
    // Only a machine without a Vulkan device skips (and not where one is
    // required); any other failure to open is the test's failure.
    if common::open_or_skip(common::options()).is_none() {
        return;
    }
    SPIN.parent(&[]);
}
