//! [`VulkanOptions`]: the switches only the Vulkan device has.

use crate::device::SubgroupSize;

/// How to open the device (the switches shared with the HIP backend are
/// [`GpuOptions`](rocmforge_core::gpu::GpuOptions)).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct VulkanOptions {
    /// Device index in the driver's list; `None` picks the best GPU.
    pub device: Option<usize>,
    /// Allow automatic choice of a CPU implementation (lavapipe).
    pub allow_cpu: bool,
    /// Upload weights through the staging buffer even on UMA devices (tests
    /// the discrete-GPU path on any device).
    pub force_staging: bool,
    /// The subgroup size pipelines are created with: by default 32 where
    /// the device lets pipelines require a size, else the driver's.
    pub subgroup_size: SubgroupSize,
    /// No register prefetch in the matrix-core matmuls (measurement).
    pub no_prefetch: bool,
}

impl VulkanOptions {
    /// Defaults, then the environment: `ROCMFORGE_VULKAN_ALLOW_CPU=1`,
    /// `ROCMFORGE_VULKAN_STAGING=1`, `ROCMFORGE_VULKAN_SUBGROUP_SIZE` (a
    /// size to pin, e.g. 64 for wave64 on RADV; 0 for the driver's
    /// default), `ROCMFORGE_VULKAN_COOPMAT_PREFETCH=0`.
    pub fn from_env() -> VulkanOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let flag = |k: &str| var(k).is_some_and(|v| v != "0");
        VulkanOptions {
            device: None,
            allow_cpu: flag("ROCMFORGE_VULKAN_ALLOW_CPU"),
            force_staging: flag("ROCMFORGE_VULKAN_STAGING"),
            subgroup_size: var("ROCMFORGE_VULKAN_SUBGROUP_SIZE")
                .map_or(SubgroupSize::Auto, |v| SubgroupSize::parse(&v)),
            no_prefetch: var("ROCMFORGE_VULKAN_COOPMAT_PREFETCH").is_some_and(|v| v == "0"),
        }
    }
}
