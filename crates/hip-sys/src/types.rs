//! The values the [`Runtime`](crate::Runtime) hands out: which runtime it
//! is, versions, device pointers, opaque handles and device properties.

use std::ffi::c_void;
use std::fmt;

/// Which library fills the function table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// AMD's HIP runtime, `libamdhip64.so` (ROCm 6.x/7.x).
    Hip,
    /// NVIDIA's CUDA driver API, `libcuda.so.1`: the verification mode on
    /// the lent NVIDIA GPU. It checks logic and numerics, never AMD speed,
    /// which is why it displays as "hip via CUDA driver".
    CudaDriver,
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavor::Hip => "hip",
            Flavor::CudaDriver => "hip via CUDA driver",
        })
    }
}

impl Flavor {
    /// What the library is, for messages.
    pub(crate) fn library_kind(self) -> &'static str {
        match self {
            Flavor::Hip => "HIP runtime",
            Flavor::CudaDriver => "CUDA driver",
        }
    }

    /// How to get the library.
    pub(crate) fn install_hint(self) -> &'static str {
        match self {
            Flavor::Hip => "install ROCm 6.x/7.x or set ROCM_PATH",
            Flavor::CudaDriver => "install the NVIDIA driver, which provides libcuda.so.1",
        }
    }

    /// The oldest release this crate works with.
    pub(crate) fn minimum(self) -> &'static str {
        match self {
            Flavor::Hip => "ROCm 6.0",
            Flavor::CudaDriver => "CUDA 11.4",
        }
    }

    /// Why [`Flavor::minimum`] is the minimum.
    pub(crate) fn minimum_reason(self) -> &'static str {
        match self {
            Flavor::Hip => "the hipDeviceProp_tR0600 ABI",
            Flavor::CudaDriver => "cuGraphInstantiateWithFlags",
        }
    }
}

/// A runtime or driver version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    /// HIP's build number (`HIP_VERSION_PATCH`, e.g. 42131); 0 for CUDA.
    pub patch: u32,
}

impl Version {
    /// Decodes `HIP_VERSION`: `major * 10_000_000 + minor * 100_000 + patch`
    /// (what `hipRuntimeGetVersion` and `hipDriverGetVersion` report).
    pub fn from_hip(raw: i32) -> Version {
        let raw = raw.max(0) as u32;
        Version {
            major: raw / 10_000_000,
            minor: raw / 100_000 % 100,
            patch: raw % 100_000,
        }
    }

    /// Decodes `CUDA_VERSION`: `major * 1000 + minor * 10`.
    pub fn from_cuda(raw: i32) -> Version {
        let raw = raw.max(0) as u32;
        Version {
            major: raw / 1000,
            minor: raw % 1000 / 10,
            patch: 0,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)?;
        if self.patch != 0 {
            write!(f, ".{}", self.patch)?;
        }
        Ok(())
    }
}

/// A device address (`hipDeviceptr_t`, `CUdeviceptr`). Kernels receive it
/// by value, so `&mut ptr as *mut DevicePtr as *mut c_void` is a kernel
/// parameter for a pointer argument.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The address `bytes` further on. Panics on overflow in debug builds;
    /// staying inside the allocation is the caller's business.
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0 + bytes)
    }

    pub fn is_null(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn as_void(self) -> *mut c_void {
        self.0 as usize as *mut c_void
    }
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// An opaque driver handle: `Copy`, with no lifetime tracking. The
        /// `unsafe` methods of [`Runtime`](crate::Runtime) that take one
        /// require it to be live and to come from the same runtime.
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub(crate) *mut c_void);

        // SAFETY: the handle is a token the driver interprets; it points to
        // nothing Rust reads. HIP and the CUDA driver API are thread-safe and
        // take handles from any thread (CUDA needs the owning context
        // current, which `Runtime::set_device` provides per thread).
        unsafe impl Send for $name {}
        // SAFETY: as for `Send`; a shared handle offers no access at all.
        unsafe impl Sync for $name {}

        impl $name {
            /// The raw `hip*_t` / `CU*` handle.
            pub fn as_raw(self) -> *mut c_void {
                self.0
            }
        }
    };
}

handle!(
    /// A stream (`hipStream_t`, `CUstream`), always non-blocking.
    Stream
);
handle!(
    /// An event (`hipEvent_t`, `CUevent`), created without timing.
    Event
);
handle!(
    /// A loaded code object (`hipModule_t`, `CUmodule`).
    Module
);
handle!(
    /// A kernel of a module (`hipFunction_t`, `CUfunction`).
    Function
);
handle!(
    /// A captured graph (`hipGraph_t`, `CUgraph`).
    Graph
);
handle!(
    /// An instantiated graph (`hipGraphExec_t`, `CUgraphExec`).
    GraphExec
);

/// Device memory, from [`Runtime::mem_get_info`](crate::Runtime::mem_get_info).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes free now.
    pub free: u64,
    /// Bytes on the device.
    pub total: u64,
}

/// What [`Runtime::event_query`](crate::Runtime::event_query) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    /// All work recorded before the event has finished.
    Ready,
    /// Work is still pending (`hipErrorNotReady` / `CUDA_ERROR_NOT_READY`).
    NotReady,
}

/// The device facts a backend needs, from either runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProps {
    /// Marketing name ("AMD Radeon RX 7900 XTX", "NVIDIA H100 80GB HBM3").
    pub name: String,
    /// HIP: `gcnArchName` as reported, target features included
    /// ("gfx1100", "gfx90a:sramecc+:xnack-"). CUDA: "sm_90" style.
    pub arch: String,
    /// Compute capability; on HIP an approximation (11.0 for gfx1100).
    pub major: i32,
    pub minor: i32,
    /// Device memory in bytes.
    pub total_mem: u64,
    /// Compute units (HIP; WGPs in WGP mode) or SMs (CUDA).
    pub compute_units: u32,
    /// 32 on RDNA and NVIDIA, 64 on GCN/CDNA.
    pub warp_size: u32,
    /// Shared memory (LDS) per block in bytes.
    pub shared_mem_per_block: u64,
    /// An APU / integrated GPU sharing host memory (Strix Halo).
    pub integrated: bool,
}

impl DeviceProps {
    /// The code-object target: [`arch`](DeviceProps::arch) up to its first
    /// `:` ("gfx90a:sramecc+:xnack-" gives "gfx90a").
    pub fn arch_name(&self) -> &str {
        self.arch.split(':').next().unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavor_labels_cuda_mode_plainly() {
        assert_eq!(Flavor::Hip.to_string(), "hip");
        assert_eq!(Flavor::CudaDriver.to_string(), "hip via CUDA driver");
    }

    #[test]
    fn versions_decode() {
        let v = Version::from_hip(60_342_131);
        assert_eq!(
            v,
            Version {
                major: 6,
                minor: 3,
                patch: 42131
            }
        );
        assert_eq!(v.to_string(), "6.3.42131");
        assert_eq!(Version::from_hip(70_000_000).to_string(), "7.0");
        assert_eq!(Version::from_cuda(12_040).to_string(), "12.4");
        assert_eq!(Version::from_cuda(11_040), Version::from_cuda(11_049));
        assert_eq!(Version::from_cuda(-1).to_string(), "0.0");
    }

    #[test]
    fn arch_name_strips_target_features() {
        let mut p = DeviceProps {
            name: String::new(),
            arch: "gfx90a:sramecc+:xnack-".into(),
            major: 9,
            minor: 0,
            total_mem: 0,
            compute_units: 0,
            warp_size: 64,
            shared_mem_per_block: 0,
            integrated: false,
        };
        assert_eq!(p.arch_name(), "gfx90a");
        p.arch = "gfx1151".into();
        assert_eq!(p.arch_name(), "gfx1151");
    }

    #[test]
    fn handles_are_pointer_sized() {
        assert_eq!(size_of::<DevicePtr>(), 8);
        assert_eq!(size_of::<Stream>(), size_of::<*mut c_void>());
        assert_eq!(DevicePtr(0x1000).offset(0x20), DevicePtr(0x1020));
        assert!(DevicePtr::NULL.is_null());
    }
}
