//! The HIP function table, opened from `libamdhip64.so`, and the ROCm 6/7
//! device-properties struct.
//!
//! Prototypes and constants are those of ROCm's `hip/hip_runtime_api.h`
//! (ROCm/HIP `include/hip/hip_runtime_api.h`, HIP 6.3; unchanged in ROCm 7's
//! ROCm/rocm-systems `projects/hip/include/hip/hip_runtime_api.h`).
//! `hipError_t` is a 32-bit enum and travels as `i32`; every handle type is
//! a pointer to an opaque struct and travels as `*mut c_void`.

use std::env;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};

use crate::error::HipError;
use crate::loader::{self, Opened};
use crate::types::{Flavor, Version};

type Status = i32;
type Handle = *mut c_void;

/// `hipStreamNonBlocking`.
pub(crate) const STREAM_NON_BLOCKING: c_uint = 0x1;
/// `hipEventDisableTiming`.
pub(crate) const EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `hipHostMallocDefault`.
pub(crate) const HOST_MALLOC_DEFAULT: c_uint = 0x0;
/// `hipStreamCaptureModeThreadLocal`.
pub(crate) const CAPTURE_MODE_THREAD_LOCAL: c_int = 1;
/// `hipErrorNoDevice`.
pub(crate) const ERROR_NO_DEVICE: Status = 100;
/// `hipErrorNotReady`.
pub(crate) const ERROR_NOT_READY: Status = 600;

/// The oldest runtime accepted: `HIP_VERSION` of ROCm 6.0, the release that
/// introduced `hipDeviceProp_tR0600` and `hipGetDevicePropertiesR0600`.
const MIN_VERSION: i32 = 60_000_000;

/// `hipDeviceArch_t`: 21 one-bit `unsigned` bit-fields, so one 32-bit word.
#[allow(non_camel_case_types)]
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct hipDeviceArch_t(pub u32);

/// `hipDeviceProp_tR0600`, field for field as in ROCm 6.0 through 7.x
/// (`hipDeviceProp_t` when compiled with the default `HIP_FORCE_API_VERSION`).
/// It is what `hipGetDevicePropertiesR0600` fills; the pre-6.0
/// `hipDeviceProp_t` (R0000) has another layout and must never be passed.
#[allow(non_camel_case_types, non_snake_case)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hipDeviceProp_tR0600 {
    pub name: [c_char; 256],
    pub uuid: [c_char; 16],
    pub luid: [c_char; 8],
    pub luidDeviceNodeMask: c_uint,
    pub totalGlobalMem: usize,
    pub sharedMemPerBlock: usize,
    pub regsPerBlock: c_int,
    pub warpSize: c_int,
    pub memPitch: usize,
    pub maxThreadsPerBlock: c_int,
    pub maxThreadsDim: [c_int; 3],
    pub maxGridSize: [c_int; 3],
    pub clockRate: c_int,
    pub totalConstMem: usize,
    pub major: c_int,
    pub minor: c_int,
    pub textureAlignment: usize,
    pub texturePitchAlignment: usize,
    pub deviceOverlap: c_int,
    pub multiProcessorCount: c_int,
    pub kernelExecTimeoutEnabled: c_int,
    pub integrated: c_int,
    pub canMapHostMemory: c_int,
    pub computeMode: c_int,
    pub maxTexture1D: c_int,
    pub maxTexture1DMipmap: c_int,
    pub maxTexture1DLinear: c_int,
    pub maxTexture2D: [c_int; 2],
    pub maxTexture2DMipmap: [c_int; 2],
    pub maxTexture2DLinear: [c_int; 3],
    pub maxTexture2DGather: [c_int; 2],
    pub maxTexture3D: [c_int; 3],
    pub maxTexture3DAlt: [c_int; 3],
    pub maxTextureCubemap: c_int,
    pub maxTexture1DLayered: [c_int; 2],
    pub maxTexture2DLayered: [c_int; 3],
    pub maxTextureCubemapLayered: [c_int; 2],
    pub maxSurface1D: c_int,
    pub maxSurface2D: [c_int; 2],
    pub maxSurface3D: [c_int; 3],
    pub maxSurface1DLayered: [c_int; 2],
    pub maxSurface2DLayered: [c_int; 3],
    pub maxSurfaceCubemap: c_int,
    pub maxSurfaceCubemapLayered: [c_int; 2],
    pub surfaceAlignment: usize,
    pub concurrentKernels: c_int,
    pub ECCEnabled: c_int,
    pub pciBusID: c_int,
    pub pciDeviceID: c_int,
    pub pciDomainID: c_int,
    pub tccDriver: c_int,
    pub asyncEngineCount: c_int,
    pub unifiedAddressing: c_int,
    pub memoryClockRate: c_int,
    pub memoryBusWidth: c_int,
    pub l2CacheSize: c_int,
    pub persistingL2CacheMaxSize: c_int,
    pub maxThreadsPerMultiProcessor: c_int,
    pub streamPrioritiesSupported: c_int,
    pub globalL1CacheSupported: c_int,
    pub localL1CacheSupported: c_int,
    pub sharedMemPerMultiprocessor: usize,
    pub regsPerMultiprocessor: c_int,
    pub managedMemory: c_int,
    pub isMultiGpuBoard: c_int,
    pub multiGpuBoardGroupID: c_int,
    pub hostNativeAtomicSupported: c_int,
    pub singleToDoublePrecisionPerfRatio: c_int,
    pub pageableMemoryAccess: c_int,
    pub concurrentManagedAccess: c_int,
    pub computePreemptionSupported: c_int,
    pub canUseHostPointerForRegisteredMem: c_int,
    pub cooperativeLaunch: c_int,
    pub cooperativeMultiDeviceLaunch: c_int,
    pub sharedMemPerBlockOptin: usize,
    pub pageableMemoryAccessUsesHostPageTables: c_int,
    pub directManagedMemAccessFromHost: c_int,
    pub maxBlocksPerMultiProcessor: c_int,
    pub accessPolicyMaxWindowSize: c_int,
    pub reservedSharedMemPerBlock: usize,
    pub hostRegisterSupported: c_int,
    pub sparseHipArraySupported: c_int,
    pub hostRegisterReadOnlySupported: c_int,
    pub timelineSemaphoreInteropSupported: c_int,
    pub memoryPoolsSupported: c_int,
    pub gpuDirectRDMASupported: c_int,
    pub gpuDirectRDMAFlushWritesOptions: c_uint,
    pub gpuDirectRDMAWritesOrdering: c_int,
    pub memoryPoolSupportedHandleTypes: c_uint,
    pub deferredMappingHipArraySupported: c_int,
    pub ipcEventSupported: c_int,
    pub clusterLaunch: c_int,
    pub unifiedFunctionPointers: c_int,
    pub reserved: [c_int; 63],
    pub hipReserved: [c_int; 32],
    // HIP-only members.
    pub gcnArchName: [c_char; 256],
    pub maxSharedMemoryPerMultiProcessor: usize,
    pub clockInstructionRate: c_int,
    pub arch: hipDeviceArch_t,
    pub hdpMemFlushCntl: *mut c_uint,
    pub hdpRegFlushCntl: *mut c_uint,
    pub cooperativeMultiDeviceUnmatchedFunc: c_int,
    pub cooperativeMultiDeviceUnmatchedGridDim: c_int,
    pub cooperativeMultiDeviceUnmatchedBlockDim: c_int,
    pub cooperativeMultiDeviceUnmatchedSharedMem: c_int,
    pub isLargeBar: c_int,
    pub asicRevision: c_int,
}

// The layout checks that matter most, at compile time; `tests` checks more
// offsets. The numbers are gcc's `sizeof`/`offsetof` for the header's struct
// on x86_64 Linux (ROCm is 64-bit only).
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<hipDeviceProp_tR0600>() == 1472);
    assert!(offset_of!(hipDeviceProp_tR0600, totalGlobalMem) == 288);
    assert!(offset_of!(hipDeviceProp_tR0600, sharedMemPerBlock) == 296);
    assert!(offset_of!(hipDeviceProp_tR0600, warpSize) == 308);
    assert!(offset_of!(hipDeviceProp_tR0600, major) == 360);
    assert!(offset_of!(hipDeviceProp_tR0600, multiProcessorCount) == 388);
    assert!(offset_of!(hipDeviceProp_tR0600, integrated) == 396);
    assert!(offset_of!(hipDeviceProp_tR0600, gcnArchName) == 1160);
};

impl hipDeviceProp_tR0600 {
    /// All fields zero: the value to hand `hipGetDevicePropertiesR0600`.
    pub fn zeroed() -> hipDeviceProp_tR0600 {
        // SAFETY: every field is an integer, an array of integers or a raw
        // pointer, for all of which all-zero bits are a valid value.
        unsafe { std::mem::MaybeUninit::zeroed().assume_init() }
    }
}

/// The HIP functions this crate calls. Field names are the C names without
/// the `hip` prefix.
pub(crate) struct HipApi {
    /// Keeps the library mapped; it is never closed (see the crate docs).
    _lib: libloading::Library,
    pub path: String,
    pub get_error_string: unsafe extern "C" fn(Status) -> *const c_char,
    pub runtime_get_version: unsafe extern "C" fn(*mut c_int) -> Status,
    pub driver_get_version: unsafe extern "C" fn(*mut c_int) -> Status,
    pub init: unsafe extern "C" fn(c_uint) -> Status,
    pub get_device_count: unsafe extern "C" fn(*mut c_int) -> Status,
    pub set_device: unsafe extern "C" fn(c_int) -> Status,
    pub get_device_properties: unsafe extern "C" fn(*mut hipDeviceProp_tR0600, c_int) -> Status,
    pub mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> Status,
    pub malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> Status,
    pub free: unsafe extern "C" fn(*mut c_void) -> Status,
    pub host_malloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> Status,
    pub host_free: unsafe extern "C" fn(*mut c_void) -> Status,
    pub memcpy_htod_async: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, Handle) -> Status,
    pub memcpy_dtoh_async: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, Handle) -> Status,
    pub memset_d8_async: unsafe extern "C" fn(*mut c_void, u8, usize, Handle) -> Status,
    pub stream_create_with_flags: unsafe extern "C" fn(*mut Handle, c_uint) -> Status,
    pub stream_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub stream_synchronize: unsafe extern "C" fn(Handle) -> Status,
    pub module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> Status,
    pub module_unload: unsafe extern "C" fn(Handle) -> Status,
    pub module_get_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> Status,
    #[allow(clippy::type_complexity)]
    pub module_launch_kernel: unsafe extern "C" fn(
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
    pub event_create_with_flags: unsafe extern "C" fn(*mut Handle, c_uint) -> Status,
    pub event_record: unsafe extern "C" fn(Handle, Handle) -> Status,
    pub event_query: unsafe extern "C" fn(Handle) -> Status,
    pub event_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub stream_begin_capture: unsafe extern "C" fn(Handle, c_int) -> Status,
    pub stream_end_capture: unsafe extern "C" fn(Handle, *mut Handle) -> Status,
    pub graph_instantiate:
        unsafe extern "C" fn(*mut Handle, Handle, *mut Handle, *mut c_char, usize) -> Status,
    pub graph_launch: unsafe extern "C" fn(Handle, Handle) -> Status,
    pub graph_exec_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub graph_destroy: unsafe extern "C" fn(Handle) -> Status,
}

/// Where `libamdhip64` is looked for, in order: `$ROCM_PATH/lib` first (set
/// on purpose, it wins), then the loader's search path, then `/opt/rocm/lib`.
/// `.so` is the development symlink; `.so.7` and `.so.6` are the runtime
/// packages' sonames, present without the -dev package.
pub(crate) fn candidates() -> Vec<PathBuf> {
    const NAMES: [&str; 3] = ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"];
    let mut dirs: Vec<Option<PathBuf>> = Vec::new();
    if let Some(root) = env::var_os("ROCM_PATH").filter(|r| !r.is_empty()) {
        dirs.push(Some(Path::new(&root).join("lib")));
    }
    dirs.push(None);
    dirs.push(Some(PathBuf::from("/opt/rocm/lib")));
    let all = dirs
        .iter()
        .flat_map(|dir| {
            NAMES.iter().map(move |name| match dir {
                Some(dir) => dir.join(name),
                None => PathBuf::from(name),
            })
        })
        .collect();
    loader::dedup(all)
}

/// Checks a `hipRuntimeGetVersion` result against the minimum.
pub(crate) fn check_version(raw: c_int) -> Result<Version, HipError> {
    let version = Version::from_hip(raw);
    if raw < MIN_VERSION {
        return Err(HipError::TooOld {
            flavor: Flavor::Hip,
            found: version.to_string(),
        });
    }
    Ok(version)
}

impl HipApi {
    /// Opens the first loadable candidate, checks its version, resolves
    /// every function and calls `hipInit(0)`.
    pub fn open(candidates: &[PathBuf]) -> Result<HipApi, HipError> {
        let lib = loader::open_first(Flavor::Hip, candidates)?;
        // The version comes first so that a ROCm 5 runtime is reported as
        // too old rather than as missing hipGetDevicePropertiesR0600.
        // SAFETY: the prototype is `hipError_t hipRuntimeGetVersion(int*)`.
        let runtime_get_version: unsafe extern "C" fn(*mut c_int) -> Status =
            unsafe { loader::symbol(Flavor::Hip, &lib, "hipRuntimeGetVersion") }?;
        // SAFETY: the prototype is `const char* hipGetErrorString(hipError_t)`.
        let get_error_string: unsafe extern "C" fn(Status) -> *const c_char =
            unsafe { loader::symbol(Flavor::Hip, &lib, "hipGetErrorString") }?;
        let mut raw: c_int = 0;
        // SAFETY: the function writes one int through a valid pointer.
        let status = unsafe { runtime_get_version(&mut raw) };
        if status != 0 {
            // SAFETY: as above; the string is static in the runtime.
            let message = unsafe { message_from(get_error_string(status)) };
            return Err(crate::error::from_status(
                Flavor::Hip,
                "hipRuntimeGetVersion",
                status,
                message,
                None,
            ));
        }
        check_version(raw)?;
        let api = Self::resolve(lib, runtime_get_version, get_error_string)?;
        // SAFETY: hipInit takes flags, which must be 0.
        let status = unsafe { (api.init)(0) };
        api.check("hipInit", status)?;
        Ok(api)
    }

    fn resolve(
        lib: Opened,
        runtime_get_version: unsafe extern "C" fn(*mut c_int) -> Status,
        get_error_string: unsafe extern "C" fn(Status) -> *const c_char,
    ) -> Result<HipApi, HipError> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: each field's type is the C prototype of `$name`
                // in hip_runtime_api.h (see the field declarations), and the
                // library stays open as long as the table (never closed).
                unsafe { loader::symbol(Flavor::Hip, &lib, $name) }?
            };
        }
        Ok(HipApi {
            path: lib.path.clone(),
            get_error_string,
            runtime_get_version,
            driver_get_version: sym!("hipDriverGetVersion"),
            init: sym!("hipInit"),
            get_device_count: sym!("hipGetDeviceCount"),
            set_device: sym!("hipSetDevice"),
            get_device_properties: sym!("hipGetDevicePropertiesR0600"),
            mem_get_info: sym!("hipMemGetInfo"),
            malloc: sym!("hipMalloc"),
            free: sym!("hipFree"),
            host_malloc: sym!("hipHostMalloc"),
            host_free: sym!("hipHostFree"),
            memcpy_htod_async: sym!("hipMemcpyHtoDAsync"),
            memcpy_dtoh_async: sym!("hipMemcpyDtoHAsync"),
            memset_d8_async: sym!("hipMemsetD8Async"),
            stream_create_with_flags: sym!("hipStreamCreateWithFlags"),
            stream_destroy: sym!("hipStreamDestroy"),
            stream_synchronize: sym!("hipStreamSynchronize"),
            module_load_data: sym!("hipModuleLoadData"),
            module_unload: sym!("hipModuleUnload"),
            module_get_function: sym!("hipModuleGetFunction"),
            module_launch_kernel: sym!("hipModuleLaunchKernel"),
            event_create_with_flags: sym!("hipEventCreateWithFlags"),
            event_record: sym!("hipEventRecord"),
            event_query: sym!("hipEventQuery"),
            event_destroy: sym!("hipEventDestroy"),
            stream_begin_capture: sym!("hipStreamBeginCapture"),
            stream_end_capture: sym!("hipStreamEndCapture"),
            graph_instantiate: sym!("hipGraphInstantiate"),
            graph_launch: sym!("hipGraphLaunch"),
            graph_exec_destroy: sym!("hipGraphExecDestroy"),
            graph_destroy: sym!("hipGraphDestroy"),
            _lib: lib.lib,
        })
    }

    /// `Ok` for `hipSuccess`, else the error for `call`.
    pub fn check(&self, call: &'static str, status: Status) -> Result<(), HipError> {
        self.check_alloc(call, status, None)
    }

    /// As [`HipApi::check`], for an allocation of `bytes`.
    pub fn check_alloc(
        &self,
        call: &'static str,
        status: Status,
        bytes: Option<u64>,
    ) -> Result<(), HipError> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: hipGetErrorString accepts any code and returns a static
        // string (or null, which `message_from` handles).
        let message = unsafe { message_from((self.get_error_string)(status)) };
        Err(crate::error::from_status(
            Flavor::Hip,
            call,
            status,
            message,
            bytes,
        ))
    }
}

/// Copies a C string out of the runtime, "unknown error" for null.
///
/// # Safety
///
/// `s` is null or points to a NUL-terminated string that stays valid for
/// the duration of the call.
pub(crate) unsafe fn message_from(s: *const c_char) -> String {
    if s.is_null() {
        return "unknown error".to_string();
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(s) }
        .to_string_lossy()
        .into_owned()
}

/// A fixed-size C string field up to its first NUL (all of it if none).
pub(crate) fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// Offsets from gcc (`offsetof`) on the struct as the header declares
    /// it, x86_64 Linux; see the module docs for the header used.
    #[test]
    fn prop_struct_matches_the_header() {
        type P = hipDeviceProp_tR0600;
        assert_eq!(size_of::<P>(), 1472);
        assert_eq!(align_of::<P>(), 8);
        assert_eq!(size_of::<hipDeviceArch_t>(), 4);
        let expected = [
            ("name", offset_of!(P, name), 0),
            ("uuid", offset_of!(P, uuid), 256),
            ("luid", offset_of!(P, luid), 272),
            ("luidDeviceNodeMask", offset_of!(P, luidDeviceNodeMask), 280),
            ("totalGlobalMem", offset_of!(P, totalGlobalMem), 288),
            ("sharedMemPerBlock", offset_of!(P, sharedMemPerBlock), 296),
            ("regsPerBlock", offset_of!(P, regsPerBlock), 304),
            ("warpSize", offset_of!(P, warpSize), 308),
            ("memPitch", offset_of!(P, memPitch), 312),
            ("maxThreadsPerBlock", offset_of!(P, maxThreadsPerBlock), 320),
            ("clockRate", offset_of!(P, clockRate), 348),
            ("totalConstMem", offset_of!(P, totalConstMem), 352),
            ("major", offset_of!(P, major), 360),
            ("minor", offset_of!(P, minor), 364),
            ("textureAlignment", offset_of!(P, textureAlignment), 368),
            (
                "multiProcessorCount",
                offset_of!(P, multiProcessorCount),
                388,
            ),
            ("integrated", offset_of!(P, integrated), 396),
            ("surfaceAlignment", offset_of!(P, surfaceAlignment), 568),
            ("concurrentKernels", offset_of!(P, concurrentKernels), 576),
            ("pciBusID", offset_of!(P, pciBusID), 584),
            ("unifiedAddressing", offset_of!(P, unifiedAddressing), 604),
            ("l2CacheSize", offset_of!(P, l2CacheSize), 616),
            (
                "sharedMemPerMultiprocessor",
                offset_of!(P, sharedMemPerMultiprocessor),
                640,
            ),
            ("managedMemory", offset_of!(P, managedMemory), 652),
            (
                "sharedMemPerBlockOptin",
                offset_of!(P, sharedMemPerBlockOptin),
                696,
            ),
            (
                "reservedSharedMemPerBlock",
                offset_of!(P, reservedSharedMemPerBlock),
                720,
            ),
            (
                "unifiedFunctionPointers",
                offset_of!(P, unifiedFunctionPointers),
                776,
            ),
            ("reserved", offset_of!(P, reserved), 780),
            ("hipReserved", offset_of!(P, hipReserved), 1032),
            ("gcnArchName", offset_of!(P, gcnArchName), 1160),
            (
                "maxSharedMemoryPerMultiProcessor",
                offset_of!(P, maxSharedMemoryPerMultiProcessor),
                1416,
            ),
            (
                "clockInstructionRate",
                offset_of!(P, clockInstructionRate),
                1424,
            ),
            ("arch", offset_of!(P, arch), 1428),
            ("hdpMemFlushCntl", offset_of!(P, hdpMemFlushCntl), 1432),
            ("hdpRegFlushCntl", offset_of!(P, hdpRegFlushCntl), 1440),
            (
                "cooperativeMultiDeviceUnmatchedFunc",
                offset_of!(P, cooperativeMultiDeviceUnmatchedFunc),
                1448,
            ),
            ("isLargeBar", offset_of!(P, isLargeBar), 1464),
            ("asicRevision", offset_of!(P, asicRevision), 1468),
        ];
        for (field, got, want) in expected {
            assert_eq!(got, want, "offset of {field}");
        }
    }

    #[test]
    fn zeroed_props_read_as_empty() {
        let p = hipDeviceProp_tR0600::zeroed();
        assert_eq!(c_chars_to_string(&p.gcnArchName), "");
        assert!(p.hdpMemFlushCntl.is_null());
    }

    #[test]
    fn c_chars_stop_at_nul() {
        let mut buf = [0 as c_char; 16];
        for (d, s) in buf.iter_mut().zip(b"gfx1100\0junk") {
            *d = *s as c_char;
        }
        assert_eq!(c_chars_to_string(&buf), "gfx1100");
        let full = [b'a' as c_char; 4];
        assert_eq!(c_chars_to_string(&full), "aaaa");
    }

    #[test]
    fn runtimes_before_rocm_6_are_refused() {
        let e = check_version(50_731_921).unwrap_err();
        assert_eq!(
            e.to_string(),
            "HIP runtime 5.7.31921 is too old: rocmforge needs ROCm 6.0 or newer \
             (the hipDeviceProp_tR0600 ABI)"
        );
        assert_eq!(check_version(60_000_000).unwrap().to_string(), "6.0");
        assert_eq!(check_version(70_151_831).unwrap().major, 7);
    }

    #[test]
    fn candidates_cover_sonames_and_opt_rocm() {
        let c = candidates();
        for want in [
            "libamdhip64.so",
            "libamdhip64.so.7",
            "libamdhip64.so.6",
            "/opt/rocm/lib/libamdhip64.so",
            "/opt/rocm/lib/libamdhip64.so.6",
        ] {
            assert!(c.contains(&PathBuf::from(want)), "{want} in {c:?}");
        }
    }

    /// A library that exists but is not HIP: the first symbol looked up is
    /// reported missing, with the "too old" hint.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_library_without_hip_symbols_names_the_symbol() {
        let Err(e) = HipApi::open(&[PathBuf::from("libc.so.6")]) else {
            panic!("libc is not HIP");
        };
        assert_eq!(
            e.to_string(),
            "libc.so.6 has no symbol hipRuntimeGetVersion: the HIP runtime is too old \
             (rocmforge needs ROCm 6.0 or newer)"
        );
    }
}
