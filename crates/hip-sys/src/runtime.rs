//! [`Runtime`]: one API with HIP's names over either function table. Every
//! method dispatches on the flavor and names the C function it called in its
//! error. This module loads the runtime and handles devices; `memory.rs`
//! and `exec.rs` hold the methods for memory and for queued work.

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::cuda::{self, CudaApi};
use crate::error::HipError;
use crate::hip::{self, c_chars_to_string, hipDeviceProp_tR0600, HipApi};
use crate::types::{DeviceProps, Flavor, Version};

/// The environment variable [`Runtime::from_env`] reads: `hip` or unset
/// (the HIP runtime), or `cuda` (the CUDA driver, for verification only: it
/// is never picked unasked, so `--backend auto` on an NVIDIA machine does not
/// mistake a verification mode for an AMD GPU).
pub const RUNTIME_ENV: &str = "ROCMFORGE_HIP_RUNTIME";

/// Each library is opened at most once per process and never closed. The
/// outcome, failure included, is kept: a process does not gain ROCm midway.
static HIP: OnceLock<Result<HipApi, HipError>> = OnceLock::new();
static CUDA: OnceLock<Result<CudaApi, HipError>> = OnceLock::new();

#[derive(Clone, Copy)]
pub(crate) enum Api {
    Hip(&'static HipApi),
    Cuda(&'static CudaApi),
}

/// A retained CUDA primary context.
struct Ctx(*mut c_void);

// SAFETY: a CUcontext is a driver handle usable from any thread (that is
// what cuCtxSetCurrent is for); Rust never dereferences it.
unsafe impl Send for Ctx {}

/// The HIP runtime, or the CUDA driver standing in for it.
///
/// Like HIP itself, the current device is per thread: call
/// [`set_device`](Runtime::set_device) on each thread before it allocates,
/// creates streams or loads modules (in CUDA mode that makes the device's
/// primary context current on the thread).
pub struct Runtime {
    pub(crate) api: Api,
    pub(crate) allocation_calls: AtomicUsize,
    /// CUDA primary contexts this runtime retained, by `CUdevice`.
    contexts: Mutex<Vec<(c_int, Ctx)>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("flavor", &self.flavor())
            .field("library", &self.library_path())
            .field("allocation_calls", &self.allocation_calls())
            .finish()
    }
}

/// Reads a `ROCMFORGE_HIP_RUNTIME` value; unset means HIP.
pub(crate) fn parse_runtime_name(value: Option<&str>) -> Result<Flavor, HipError> {
    match value.map(str::trim) {
        None | Some("") | Some("hip") => Ok(Flavor::Hip),
        Some("cuda") => Ok(Flavor::CudaDriver),
        Some(other) => Err(HipError::BadRuntimeName {
            value: other.to_string(),
        }),
    }
}

/// A device index as the C APIs take it; out-of-range values become an
/// index no device has, which the runtime rejects.
fn ordinal(index: u32) -> c_int {
    c_int::try_from(index).unwrap_or(c_int::MAX)
}

impl Runtime {
    /// Opens `flavor`'s library from its usual places (the first call in the
    /// process does the work; later calls reuse the table or the error),
    /// checks its version, and initialises it.
    pub fn load(flavor: Flavor) -> Result<Runtime, HipError> {
        let api = match flavor {
            Flavor::Hip => Api::Hip(
                HIP.get_or_init(|| HipApi::open(&hip::candidates()))
                    .as_ref()
                    .map_err(Clone::clone)?,
            ),
            Flavor::CudaDriver => Api::Cuda(
                CUDA.get_or_init(|| CudaApi::open(&cuda::candidates()))
                    .as_ref()
                    .map_err(Clone::clone)?,
            ),
        };
        Ok(Runtime::new(api))
    }

    /// As [`load`](Runtime::load), from the given candidates (paths, or
    /// bare names for the loader's search), bypassing the per-process
    /// table. A table opened this way is leaked: its library stays open.
    pub fn load_from(flavor: Flavor, candidates: &[PathBuf]) -> Result<Runtime, HipError> {
        let api = match flavor {
            Flavor::Hip => Api::Hip(Box::leak(Box::new(HipApi::open(candidates)?))),
            Flavor::CudaDriver => Api::Cuda(Box::leak(Box::new(CudaApi::open(candidates)?))),
        };
        Ok(Runtime::new(api))
    }

    /// The runtime `ROCMFORGE_HIP_RUNTIME` asks for: `hip` (also when
    /// unset) or `cuda` (the CUDA driver). Callers should print
    /// [`flavor`](Runtime::flavor) so CUDA mode is never mistaken for an AMD
    /// run.
    pub fn from_env() -> Result<Runtime, HipError> {
        let value = std::env::var_os(RUNTIME_ENV).map(|v| v.to_string_lossy().into_owned());
        Runtime::load(parse_runtime_name(value.as_deref())?)
    }

    fn new(api: Api) -> Runtime {
        Runtime {
            api,
            allocation_calls: AtomicUsize::new(0),
            contexts: Mutex::new(Vec::new()),
        }
    }

    pub fn flavor(&self) -> Flavor {
        match self.api {
            Api::Hip(_) => Flavor::Hip,
            Api::Cuda(_) => Flavor::CudaDriver,
        }
    }

    /// The library the table was filled from, as found.
    pub fn library_path(&self) -> &str {
        match self.api {
            Api::Hip(h) => &h.path,
            Api::Cuda(c) => &c.path,
        }
    }

    /// How many device-memory ([`malloc`](Runtime::malloc)) and pinned-host
    /// ([`host_malloc`](Runtime::host_malloc)) allocation calls this runtime
    /// has made, failed ones included. Counted here, at the only place that
    /// calls the allocators, so a backend cannot under-report.
    pub fn allocation_calls(&self) -> usize {
        self.allocation_calls.load(Ordering::Relaxed)
    }

    /// `hipRuntimeGetVersion`; in CUDA mode the driver's version, since the
    /// driver API is the runtime there.
    pub fn runtime_version(&self) -> Result<Version, HipError> {
        let mut raw: c_int = 0;
        match self.api {
            Api::Hip(h) => {
                // SAFETY: writes one int through a valid pointer.
                let status = unsafe { (h.runtime_get_version)(&mut raw) };
                h.check("hipRuntimeGetVersion", status)?;
                Ok(Version::from_hip(raw))
            }
            Api::Cuda(_) => self.driver_version(),
        }
    }

    /// `hipDriverGetVersion` / `cuDriverGetVersion`.
    pub fn driver_version(&self) -> Result<Version, HipError> {
        let mut raw: c_int = 0;
        match self.api {
            Api::Hip(h) => {
                // SAFETY: writes one int through a valid pointer.
                let status = unsafe { (h.driver_get_version)(&mut raw) };
                h.check("hipDriverGetVersion", status)?;
                Ok(Version::from_hip(raw))
            }
            Api::Cuda(c) => {
                // SAFETY: writes one int through a valid pointer.
                let status = unsafe { (c.driver_get_version)(&mut raw) };
                c.check("cuDriverGetVersion", status)?;
                Ok(Version::from_cuda(raw))
            }
        }
    }

    /// The number of devices; 0 where the runtime reports "no device".
    pub fn device_count(&self) -> Result<u32, HipError> {
        let mut n: c_int = 0;
        match self.api {
            Api::Hip(h) => {
                // SAFETY: writes one int through a valid pointer.
                let status = unsafe { (h.get_device_count)(&mut n) };
                if status == hip::ERROR_NO_DEVICE {
                    return Ok(0);
                }
                h.check("hipGetDeviceCount", status)?;
            }
            Api::Cuda(c) => {
                // SAFETY: writes one int through a valid pointer.
                let status = unsafe { (c.device_get_count)(&mut n) };
                if status == cuda::ERROR_NO_DEVICE {
                    return Ok(0);
                }
                c.check("cuDeviceGetCount", status)?;
            }
        }
        Ok(n.max(0) as u32)
    }

    /// The raw `hipDeviceProp_tR0600` of device `index`, for fields that
    /// [`DeviceProps`] lacks; `None` in CUDA mode.
    pub fn hip_device_properties(
        &self,
        index: u32,
    ) -> Result<Option<hipDeviceProp_tR0600>, HipError> {
        let Api::Hip(h) = self.api else {
            return Ok(None);
        };
        let mut p = hipDeviceProp_tR0600::zeroed();
        // SAFETY: `p` is the R0600 struct, which is what the R0600 entry
        // point fills; its layout is checked against the header in hip.rs.
        let status = unsafe { (h.get_device_properties)(&mut p, ordinal(index)) };
        h.check("hipGetDevicePropertiesR0600", status)?;
        Ok(Some(p))
    }

    /// Name, architecture and sizes of device `index`.
    pub fn device_properties(&self, index: u32) -> Result<DeviceProps, HipError> {
        match self.api {
            Api::Hip(_) => {
                let p = self
                    .hip_device_properties(index)?
                    .expect("a HIP runtime returns HIP properties");
                Ok(DeviceProps {
                    name: c_chars_to_string(&p.name),
                    arch: c_chars_to_string(&p.gcnArchName),
                    major: p.major,
                    minor: p.minor,
                    total_mem: p.totalGlobalMem as u64,
                    compute_units: p.multiProcessorCount.max(0) as u32,
                    warp_size: p.warpSize.max(0) as u32,
                    shared_mem_per_block: p.sharedMemPerBlock as u64,
                    integrated: p.integrated != 0,
                })
            }
            Api::Cuda(c) => {
                let dev = cu_device(c, index)?;
                let mut name = [0 as c_char; 256];
                // SAFETY: the buffer holds the 256 bytes the call may write.
                let status = unsafe { (c.device_get_name)(name.as_mut_ptr(), 256, dev) };
                c.check("cuDeviceGetName", status)?;
                let attr = |attribute: c_int| -> Result<c_int, HipError> {
                    let mut v: c_int = 0;
                    // SAFETY: writes one int through a valid pointer;
                    // `attribute` is a CUdevice_attribute value.
                    let status = unsafe { (c.device_get_attribute)(&mut v, attribute, dev) };
                    c.check("cuDeviceGetAttribute", status)?;
                    Ok(v)
                };
                let major = attr(cuda::attr::COMPUTE_CAPABILITY_MAJOR)?;
                let minor = attr(cuda::attr::COMPUTE_CAPABILITY_MINOR)?;
                let mut total: usize = 0;
                // SAFETY: writes one size_t through a valid pointer.
                let status = unsafe { (c.device_total_mem)(&mut total, dev) };
                c.check("cuDeviceTotalMem_v2", status)?;
                Ok(DeviceProps {
                    name: c_chars_to_string(&name),
                    arch: format!("sm_{major}{minor}"),
                    major,
                    minor,
                    total_mem: total as u64,
                    compute_units: attr(cuda::attr::MULTIPROCESSOR_COUNT)?.max(0) as u32,
                    warp_size: attr(cuda::attr::WARP_SIZE)?.max(0) as u32,
                    shared_mem_per_block: attr(cuda::attr::MAX_SHARED_MEMORY_PER_BLOCK)?.max(0)
                        as u64,
                    integrated: attr(cuda::attr::INTEGRATED)? != 0,
                })
            }
        }
    }

    /// Makes device `index` current on the calling thread: `hipSetDevice`,
    /// or in CUDA mode the device's primary context (retained once per
    /// runtime, on first use) made current with `cuCtxSetCurrent`.
    pub fn set_device(&self, index: u32) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: takes a plain int; a bad index is an error code.
                let status = unsafe { (h.set_device)(ordinal(index)) };
                h.check("hipSetDevice", status)
            }
            Api::Cuda(c) => {
                let dev = cu_device(c, index)?;
                let mut contexts = self.contexts.lock().unwrap_or_else(PoisonError::into_inner);
                let ctx = match contexts.iter().find(|(d, _)| *d == dev) {
                    Some((_, ctx)) => ctx.0,
                    None => {
                        let mut ctx = null_mut();
                        // SAFETY: writes one handle through a valid pointer.
                        let status = unsafe { (c.device_primary_ctx_retain)(&mut ctx, dev) };
                        c.check("cuDevicePrimaryCtxRetain", status)?;
                        contexts.push((dev, Ctx(ctx)));
                        ctx
                    }
                };
                // SAFETY: `ctx` is a primary context this runtime retained
                // and has not released (release_device removes it first).
                let status = unsafe { (c.ctx_set_current)(ctx) };
                c.check("cuCtxSetCurrent", status)
            }
        }
    }

    /// CUDA mode: releases the primary context [`set_device`] retained for
    /// device `index` (`cuDevicePrimaryCtxRelease`); a no-op for HIP, which
    /// has no per-device context to release, and for a device never set.
    /// Without it the context lives until the process exits, as with the
    /// CUDA runtime API; dropping a [`Runtime`] releases nothing, so a hung
    /// GPU cannot block a drop.
    ///
    /// [`set_device`]: Runtime::set_device
    ///
    /// # Safety
    ///
    /// - Nothing created on the device through this runtime (memory,
    ///   streams, events, modules, functions, graphs) is used afterwards:
    ///   when the last holder releases the primary context, all of it is
    ///   destroyed.
    /// - No work is pending on the device.
    pub unsafe fn release_device(&self, index: u32) -> Result<(), HipError> {
        let Api::Cuda(c) = self.api else {
            return Ok(());
        };
        let dev = cu_device(c, index)?;
        let mut contexts = self.contexts.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(at) = contexts.iter().position(|(d, _)| *d == dev) else {
            return Ok(());
        };
        contexts.remove(at);
        // SAFETY: this runtime holds one retain on the device's primary
        // context (just forgotten above); the caller guarantees nothing of
        // it is used again.
        let status = unsafe { (c.device_primary_ctx_release)(dev) };
        c.check("cuDevicePrimaryCtxRelease_v2", status)
    }
}

/// The `CUdevice` of ordinal `index`.
fn cu_device(c: &CudaApi, index: u32) -> Result<c_int, HipError> {
    let mut dev: c_int = 0;
    // SAFETY: writes one CUdevice through a valid pointer; a bad ordinal is
    // an error code.
    let status = unsafe { (c.device_get)(&mut dev, ordinal(index)) };
    c.check("cuDeviceGet", status)?;
    Ok(dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_names_parse() {
        // Unset is HIP: the CUDA driver is only ever used when asked for.
        assert_eq!(parse_runtime_name(None).unwrap(), Flavor::Hip);
        assert_eq!(parse_runtime_name(Some("")).unwrap(), Flavor::Hip);
        assert_eq!(parse_runtime_name(Some("hip")).unwrap(), Flavor::Hip);
        assert_eq!(
            parse_runtime_name(Some(" cuda ")).unwrap(),
            Flavor::CudaDriver
        );
        let e = parse_runtime_name(Some("vulkan")).unwrap_err();
        assert_eq!(
            e,
            HipError::BadRuntimeName {
                value: "vulkan".into()
            }
        );
    }

    #[test]
    fn load_from_missing_candidates_is_one_error() {
        let e = Runtime::load_from(
            Flavor::Hip,
            &[
                PathBuf::from("/nonexistent/rocm/lib/libamdhip64.so"),
                PathBuf::from("libamdhip64-rocmforge-test-absent.so.7"),
            ],
        )
        .unwrap_err();
        assert_eq!(
            e,
            HipError::NotFound {
                flavor: Flavor::Hip,
                tried: vec![
                    "/nonexistent/rocm/lib/libamdhip64.so".into(),
                    "libamdhip64-rocmforge-test-absent.so.7".into()
                ],
            }
        );
        let e = Runtime::load_from(
            Flavor::CudaDriver,
            &[PathBuf::from("libcuda-rocmforge-test-absent.so.1")],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "CUDA driver not found (tried libcuda-rocmforge-test-absent.so.1): \
             install the NVIDIA driver, which provides libcuda.so.1"
        );
    }

    /// The no-ROCm, no-NVIDIA case this crate must survive: loading fails
    /// with the one-line error, never a panic. Where a runtime is installed
    /// the test only checks that the outcome is coherent.
    #[test]
    fn load_without_a_gpu_stack_is_an_error_not_a_crash() {
        for flavor in [Flavor::Hip, Flavor::CudaDriver] {
            match Runtime::load(flavor) {
                Ok(rt) => assert_eq!(rt.flavor(), flavor),
                Err(e) => {
                    let text = e.to_string();
                    assert!(!text.contains('\n'), "{text}");
                    // Twice gives the same answer: the outcome is kept.
                    assert_eq!(Runtime::load(flavor).unwrap_err(), e);
                }
            }
        }
    }

    #[test]
    fn runtime_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Runtime>();
        check::<crate::Stream>();
    }
}
