//! [`HipOptions`]: the switches only the HIP device has.

/// Bytes of the pinned staging buffer weights are uploaded through.
pub const DEFAULT_STAGING_BYTES: usize = 64 << 20;

/// How to open the device (the switches shared with the Vulkan backend are
/// [`GpuOptions`](rocmforge_core::gpu::GpuOptions)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HipOptions {
    /// Device ordinal (`--device N`); `None` takes the first.
    pub device: Option<usize>,
    /// Replay graphs as captured hipGraphs (else launch by launch).
    pub graphs: bool,
    /// Bytes of the pinned staging buffer (tests chunked uploads).
    pub staging_bytes: usize,
    /// Breadcrumbs (a 1-byte memset into pinned memory every 32 launches)
    /// so a timeout names the launches in flight; where the runtime refuses
    /// such memsets they are left out on their own.
    pub crumbs: bool,
}

impl Default for HipOptions {
    fn default() -> Self {
        HipOptions {
            device: None,
            graphs: true,
            staging_bytes: DEFAULT_STAGING_BYTES,
            crumbs: true,
        }
    }
}

impl HipOptions {
    /// Defaults, then the environment: `ROCMFORGE_HIP_GRAPHS=0` (direct
    /// launches), `ROCMFORGE_HIP_CRUMBS=0` (no breadcrumbs) and
    /// `ROCMFORGE_HIP_STAGING_BYTES`. The runtime itself is
    /// `ROCMFORGE_HIP_RUNTIME` (`hip` or unset: HIP; `cuda`: the CUDA driver).
    pub fn from_env() -> HipOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        HipOptions {
            device: None,
            graphs: var("ROCMFORGE_HIP_GRAPHS").is_none_or(|v| v != "0"),
            staging_bytes: (var("ROCMFORGE_HIP_STAGING_BYTES").and_then(|v| v.parse().ok()))
                .unwrap_or(DEFAULT_STAGING_BYTES),
            crumbs: var("ROCMFORGE_HIP_CRUMBS").is_none_or(|v| v != "0"),
        }
    }
}
