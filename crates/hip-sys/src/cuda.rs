//! The CUDA driver API table, opened from `libcuda.so.1`: the same module,
//! stream, event and graph calls as HIP's, one to one, so the HIP backend
//! can run its kernels (compiled to PTX) on an NVIDIA GPU for verification.
//!
//! Prototypes and constants are those of `cuda.h`. Where `cuda.h` maps a
//! name to a versioned symbol (`#define cuMemAlloc cuMemAlloc_v2`), the
//! versioned symbol is resolved, as a program compiled against `cuda.h`
//! would. The legacy (not per-thread) default-stream variants are used;
//! this crate never touches the default stream anyway. `CUresult` and the
//! enums travel as `i32`, `CUdevice` as `int`, `CUdeviceptr` as `u64`, and
//! every other handle as `*mut c_void`.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::PathBuf;

use crate::error::HipError;
use crate::hip::message_from;
use crate::loader::{self, Opened};
use crate::types::{Flavor, Version};

type Status = i32;
type Handle = *mut c_void;
type Device = c_int;

/// `CU_STREAM_NON_BLOCKING`.
pub(crate) const STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CU_EVENT_DISABLE_TIMING`.
pub(crate) const EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`.
pub(crate) const CAPTURE_MODE_THREAD_LOCAL: c_int = 1;
/// `CUDA_ERROR_NO_DEVICE`.
pub(crate) const ERROR_NO_DEVICE: Status = 100;
/// `CUDA_ERROR_NOT_READY`.
pub(crate) const ERROR_NOT_READY: Status = 600;

/// `CUdevice_attribute` values this crate reads.
pub(crate) mod attr {
    use std::ffi::c_int;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: c_int = 8;
    pub const WARP_SIZE: c_int = 10;
    pub const MULTIPROCESSOR_COUNT: c_int = 16;
    pub const INTEGRATED: c_int = 18;
    pub const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
    pub const COMPUTE_CAPABILITY_MINOR: c_int = 76;
}

/// The oldest driver accepted: CUDA 11.4, which added
/// `cuGraphInstantiateWithFlags` (the newest call in the table).
const MIN_VERSION: c_int = 11_040;

/// The CUDA driver functions this crate calls. Field names are the C names
/// without the `cu` prefix and version suffix.
pub(crate) struct CudaApi {
    /// Keeps the library mapped; it is never closed (see the crate docs).
    _lib: libloading::Library,
    pub path: String,
    pub get_error_string: unsafe extern "C" fn(Status, *mut *const c_char) -> Status,
    pub driver_get_version: unsafe extern "C" fn(*mut c_int) -> Status,
    pub init: unsafe extern "C" fn(c_uint) -> Status,
    pub device_get_count: unsafe extern "C" fn(*mut c_int) -> Status,
    pub device_get: unsafe extern "C" fn(*mut Device, c_int) -> Status,
    pub device_get_name: unsafe extern "C" fn(*mut c_char, c_int, Device) -> Status,
    pub device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, Device) -> Status,
    pub device_total_mem: unsafe extern "C" fn(*mut usize, Device) -> Status,
    pub device_primary_ctx_retain: unsafe extern "C" fn(*mut Handle, Device) -> Status,
    pub device_primary_ctx_release: unsafe extern "C" fn(Device) -> Status,
    pub ctx_set_current: unsafe extern "C" fn(Handle) -> Status,
    pub mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> Status,
    pub mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> Status,
    pub mem_free: unsafe extern "C" fn(u64) -> Status,
    pub mem_alloc_host: unsafe extern "C" fn(*mut *mut c_void, usize) -> Status,
    pub mem_free_host: unsafe extern "C" fn(*mut c_void) -> Status,
    pub memcpy_htod_async: unsafe extern "C" fn(u64, *const c_void, usize, Handle) -> Status,
    pub memcpy_dtoh_async: unsafe extern "C" fn(*mut c_void, u64, usize, Handle) -> Status,
    pub memset_d8_async: unsafe extern "C" fn(u64, u8, usize, Handle) -> Status,
    pub stream_create: unsafe extern "C" fn(*mut Handle, c_uint) -> Status,
    pub stream_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub stream_synchronize: unsafe extern "C" fn(Handle) -> Status,
    pub module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> Status,
    pub module_unload: unsafe extern "C" fn(Handle) -> Status,
    pub module_get_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> Status,
    #[allow(clippy::type_complexity)]
    pub launch_kernel: unsafe extern "C" fn(
        Handle,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Handle,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> Status,
    pub event_create: unsafe extern "C" fn(*mut Handle, c_uint) -> Status,
    pub event_record: unsafe extern "C" fn(Handle, Handle) -> Status,
    pub event_query: unsafe extern "C" fn(Handle) -> Status,
    pub event_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub stream_begin_capture: unsafe extern "C" fn(Handle, c_int) -> Status,
    pub stream_end_capture: unsafe extern "C" fn(Handle, *mut Handle) -> Status,
    pub graph_instantiate_with_flags: unsafe extern "C" fn(*mut Handle, Handle, u64) -> Status,
    pub graph_launch: unsafe extern "C" fn(Handle, Handle) -> Status,
    pub graph_exec_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub graph_destroy: unsafe extern "C" fn(Handle) -> Status,
}

/// Where the driver is looked for: the soname the driver package installs,
/// then the development symlink (absent without the toolkit).
pub(crate) fn candidates() -> Vec<PathBuf> {
    vec![PathBuf::from("libcuda.so.1"), PathBuf::from("libcuda.so")]
}

/// Checks a `cuDriverGetVersion` result against the minimum.
pub(crate) fn check_version(raw: c_int) -> Result<Version, HipError> {
    let version = Version::from_cuda(raw);
    if raw < MIN_VERSION {
        return Err(HipError::TooOld {
            flavor: Flavor::CudaDriver,
            found: version.to_string(),
        });
    }
    Ok(version)
}

impl CudaApi {
    /// Opens the first loadable candidate, checks the driver version,
    /// resolves every function and calls `cuInit(0)`.
    pub fn open(candidates: &[PathBuf]) -> Result<CudaApi, HipError> {
        let lib = loader::open_first(Flavor::CudaDriver, candidates)?;
        let api = Self::resolve(lib)?;
        let mut raw: c_int = 0;
        // SAFETY: writes one int through a valid pointer; needs no cuInit.
        let status = unsafe { (api.driver_get_version)(&mut raw) };
        api.check("cuDriverGetVersion", status)?;
        check_version(raw)?;
        // SAFETY: cuInit takes flags, which must be 0.
        let status = unsafe { (api.init)(0) };
        api.check("cuInit", status)?;
        Ok(api)
    }

    fn resolve(lib: Opened) -> Result<CudaApi, HipError> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: each field's type is the C prototype of `$name`
                // in cuda.h (see the field declarations), and the library
                // stays open as long as the table (never closed).
                unsafe { loader::symbol(Flavor::CudaDriver, &lib, $name) }?
            };
        }
        // Fields are evaluated in the order written: a library that is not
        // the CUDA driver at all is reported as lacking cuDriverGetVersion;
        // a driver older than 11.4 as lacking cuGraphInstantiateWithFlags.
        Ok(CudaApi {
            path: lib.path.clone(),
            driver_get_version: sym!("cuDriverGetVersion"),
            get_error_string: sym!("cuGetErrorString"),
            init: sym!("cuInit"),
            device_get_count: sym!("cuDeviceGetCount"),
            device_get: sym!("cuDeviceGet"),
            device_get_name: sym!("cuDeviceGetName"),
            device_get_attribute: sym!("cuDeviceGetAttribute"),
            device_total_mem: sym!("cuDeviceTotalMem_v2"),
            device_primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
            device_primary_ctx_release: sym!("cuDevicePrimaryCtxRelease_v2"),
            ctx_set_current: sym!("cuCtxSetCurrent"),
            mem_get_info: sym!("cuMemGetInfo_v2"),
            mem_alloc: sym!("cuMemAlloc_v2"),
            mem_free: sym!("cuMemFree_v2"),
            mem_alloc_host: sym!("cuMemAllocHost_v2"),
            mem_free_host: sym!("cuMemFreeHost"),
            memcpy_htod_async: sym!("cuMemcpyHtoDAsync_v2"),
            memcpy_dtoh_async: sym!("cuMemcpyDtoHAsync_v2"),
            memset_d8_async: sym!("cuMemsetD8Async"),
            stream_create: sym!("cuStreamCreate"),
            stream_destroy: sym!("cuStreamDestroy_v2"),
            stream_synchronize: sym!("cuStreamSynchronize"),
            module_load_data: sym!("cuModuleLoadData"),
            module_unload: sym!("cuModuleUnload"),
            module_get_function: sym!("cuModuleGetFunction"),
            launch_kernel: sym!("cuLaunchKernel"),
            event_create: sym!("cuEventCreate"),
            event_record: sym!("cuEventRecord"),
            event_query: sym!("cuEventQuery"),
            event_destroy: sym!("cuEventDestroy_v2"),
            stream_begin_capture: sym!("cuStreamBeginCapture_v2"),
            stream_end_capture: sym!("cuStreamEndCapture"),
            graph_instantiate_with_flags: sym!("cuGraphInstantiateWithFlags"),
            graph_launch: sym!("cuGraphLaunch"),
            graph_exec_destroy: sym!("cuGraphExecDestroy"),
            graph_destroy: sym!("cuGraphDestroy"),
            _lib: lib.lib,
        })
    }

    /// `Ok` for `CUDA_SUCCESS`, else the error for `call`.
    pub fn check(&self, call: &'static str, status: Status) -> Result<(), HipError> {
        self.check_alloc(call, status, None)
    }

    /// As [`CudaApi::check`], for an allocation of `bytes`.
    pub fn check_alloc(
        &self,
        call: &'static str,
        status: Status,
        bytes: Option<u64>,
    ) -> Result<(), HipError> {
        if status == 0 {
            return Ok(());
        }
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: writes a pointer to a static string through a valid
        // pointer, or fails for an unknown code (leaving `s` null).
        let found = unsafe { (self.get_error_string)(status, &mut s) };
        let message = if found == 0 {
            // SAFETY: on success `s` is null or a static NUL-terminated string.
            unsafe { message_from(s) }
        } else {
            "unrecognised error code".to_string()
        };
        Err(crate::error::from_status(
            Flavor::CudaDriver,
            call,
            status,
            message,
            bytes,
        ))
    }
}

/// The image `cuModuleLoadData` gets: a cubin (ELF) as is, anything else
/// (PTX text, a fatbin) with a NUL appended unless it ends in one, since the
/// driver reads PTX up to a NUL it would otherwise look for past the slice.
/// A NUL after a fatbin is harmless: its header carries its size.
pub(crate) fn nul_terminated_image(image: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if image.starts_with(b"\x7fELF") || image.last() == Some(&0) {
        std::borrow::Cow::Borrowed(image)
    } else {
        let mut owned = Vec::with_capacity(image.len() + 1);
        owned.extend_from_slice(image);
        owned.push(0);
        std::borrow::Cow::Owned(owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drivers_before_11_4_are_refused() {
        let e = check_version(11_020).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CUDA driver 11.2 is too old: rocmforge needs CUDA 11.4 or newer \
             (cuGraphInstantiateWithFlags)"
        );
        assert_eq!(check_version(12_080).unwrap().to_string(), "12.8");
    }

    #[test]
    fn ptx_gets_a_nul_and_cubins_do_not() {
        assert_eq!(&*nul_terminated_image(b".version 8.0"), b".version 8.0\0");
        assert_eq!(&*nul_terminated_image(b"ptx\0"), b"ptx\0");
        assert_eq!(&*nul_terminated_image(b"\x7fELF\x02"), b"\x7fELF\x02");
        assert_eq!(&*nul_terminated_image(b""), b"\0");
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_library_without_cuda_symbols_names_the_symbol() {
        let Err(e) = CudaApi::open(&[PathBuf::from("libc.so.6")]) else {
            panic!("libc is not the CUDA driver");
        };
        assert_eq!(
            e.to_string(),
            "libc.so.6 has no symbol cuDriverGetVersion: the CUDA driver is too old \
             (rocmforge needs CUDA 11.4 or newer)"
        );
    }
}
