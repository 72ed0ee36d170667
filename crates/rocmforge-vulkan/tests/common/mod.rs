//! What the crate's tests share: a Vulkan backend, or a printed skip on a
//! machine without a Vulkan device, unless `ROCMFORGE_REQUIRE_BACKENDS`
//! names `vulkan` (CI names it: lavapipe must run them), which turns the
//! skip into a failure, as the HIP crate's tests do for `rocm`.

use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::GpuOptions;
use rocmforge_vulkan::{VulkanBackend, VulkanOptions};

/// The options every test starts from: software devices (lavapipe)
/// allowed, the rest from the environment.
pub fn options() -> VulkanOptions {
    VulkanOptions {
        allow_cpu: true,
        ..VulkanOptions::from_env()
    }
}

/// The backend on the device `opts` picks, with the environment's
/// [`GpuOptions`].
#[allow(dead_code)] // Not every test binary uses it.
pub fn open(opts: VulkanOptions) -> Result<VulkanBackend, BackendError> {
    rocmforge_vulkan::open(opts, GpuOptions::from_env())
}

/// `rocmforge_vulkan::open(opts, gpu)`, or None after printing why the
/// machine has no Vulkan device. Any other error, or no device while one
/// is required, fails the test.
pub fn open_or_skip_with(opts: VulkanOptions, gpu: GpuOptions) -> Option<VulkanBackend> {
    rocmforge_testkit::open_or_skip(rocmforge_vulkan::open(opts, gpu), &["vulkan", "vk"])
}

/// [`open_or_skip_with`] the environment's [`GpuOptions`].
#[allow(dead_code)] // Not every test binary uses it.
pub fn open_or_skip(opts: VulkanOptions) -> Option<VulkanBackend> {
    open_or_skip_with(opts, GpuOptions::from_env())
}
