//! Every failure of this crate is a [`HipError`]. Status codes become errors
//! in exactly one place, [`from_status`], which also decides which failures
//! a backend can act on (a lost device, exhausted memory, a code object that
//! does not fit the GPU, no usable GPU) and which are plain call failures.
//!
//! Each message names the C function that failed, so an error in CUDA-driver
//! mode reads "cuMemAlloc_v2 failed: ..." and never passes for HIP.

use crate::types::Flavor;

/// A failed load or call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HipError {
    /// No candidate library exists.
    #[error("{} not found (tried {}): {}", .flavor.library_kind(), .tried.join(", "), .flavor.install_hint())]
    NotFound { flavor: Flavor, tried: Vec<String> },

    /// A candidate library exists but the dynamic loader refused it (a
    /// missing dependency such as libhsa-runtime64, a wrong ELF class).
    #[error("{} {path} could not be loaded: {message}", .flavor.library_kind())]
    LoadFailed {
        flavor: Flavor,
        path: String,
        message: String,
    },

    /// The library lacks a function this crate needs.
    #[error(
        "{library} has no symbol {symbol}: the {} is too old (rocmforge needs {} or newer)",
        .flavor.library_kind(),
        .flavor.minimum()
    )]
    MissingSymbol {
        flavor: Flavor,
        library: String,
        symbol: &'static str,
    },

    /// The library reports a version below the minimum.
    #[error(
        "{} {found} is too old: rocmforge needs {} or newer ({})",
        .flavor.library_kind(),
        .flavor.minimum(),
        .flavor.minimum_reason()
    )]
    TooOld { flavor: Flavor, found: String },

    /// `ROCMFORGE_HIP_RUNTIME` holds something other than `hip` or `cuda`.
    #[error("ROCMFORGE_HIP_RUNTIME={value:?} names no runtime: use hip (the default) or cuda")]
    BadRuntimeName { value: String },

    /// A call failed in a way that says nothing about the device's health.
    #[error("{call} failed: {message} (error {code})")]
    Call {
        call: &'static str,
        code: i32,
        message: String,
    },

    /// A kernel faulted or the device stopped answering. HIP and CUDA
    /// contexts do not recover from these ("sticky" errors): every later
    /// call on the device fails, so the backend should stop using it.
    #[error("{call} failed: {message} (error {code}); the device is lost and every later call on it fails")]
    DeviceLost {
        call: &'static str,
        code: i32,
        message: String,
    },

    /// A device or pinned-host allocation failed for lack of memory.
    #[error("{call} of {bytes} bytes failed: {message} (error {code})")]
    OutOfMemory {
        call: &'static str,
        bytes: u64,
        code: i32,
        message: String,
    },

    /// The code object cannot run on this device: built for another target,
    /// malformed, or PTX newer than the driver.
    #[error("{call} failed: {message} (error {code}); the code object does not fit this device")]
    CodeObject {
        call: &'static str,
        code: i32,
        message: String,
    },

    /// The runtime loaded but has no usable device (none present, driver
    /// mismatch, the CUDA stub library).
    #[error("{call} failed: {message} (error {code}); no usable GPU")]
    Unavailable {
        call: &'static str,
        code: i32,
        message: String,
    },
}

/// What a failure means to a caller; see the variants of the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Call,
    DeviceLost,
    OutOfMemory,
    CodeObject,
    Unavailable,
}

/// Sorts a status code. The HIP codes come from `hipError_t` in ROCm's
/// `hip_runtime_api.h`, the CUDA codes from `CUresult` in `cuda.h`; most of
/// them coincide, since hipError_t was modelled on CUDA's numbering.
fn kind(flavor: Flavor, code: i32) -> Kind {
    match flavor {
        Flavor::Hip => match code {
            2 => Kind::OutOfMemory, // hipErrorOutOfMemory
            // hipErrorPriorLaunchFailure, hipErrorECCNotCorrectable,
            // hipErrorIllegalAddress, hipErrorLaunchTimeOut,
            // hipErrorContextIsDestroyed, hipErrorAssert, hipErrorLaunchFailure
            53 | 214 | 700 | 702 | 709 | 710 | 719 => Kind::DeviceLost,
            // hipErrorInvalidDeviceFunction, hipErrorInvalidImage,
            // hipErrorNoBinaryForGpu, hipErrorInvalidKernelFile
            98 | 200 | 209 | 218 => Kind::CodeObject,
            // hipErrorInsufficientDriver, hipErrorNoDevice
            35 | 100 => Kind::Unavailable,
            _ => Kind::Call,
        },
        Flavor::CudaDriver => match code {
            2 => Kind::OutOfMemory, // CUDA_ERROR_OUT_OF_MEMORY
            // ECC_UNCORRECTABLE, NVLINK_UNCORRECTABLE, ILLEGAL_ADDRESS,
            // LAUNCH_TIMEOUT, CONTEXT_IS_DESTROYED, ASSERT,
            // HARDWARE_STACK_ERROR, ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS,
            // INVALID_ADDRESS_SPACE, INVALID_PC, LAUNCH_FAILED
            214 | 220 | 700 | 702 | 709 | 710 | 714..=719 => Kind::DeviceLost,
            // INVALID_IMAGE, NO_BINARY_FOR_GPU, INVALID_PTX,
            // JIT_COMPILER_NOT_FOUND, UNSUPPORTED_PTX_VERSION,
            // JIT_COMPILATION_DISABLED
            200 | 209 | 218 | 221..=223 => Kind::CodeObject,
            // STUB_LIBRARY, DEVICE_UNAVAILABLE, NO_DEVICE,
            // SYSTEM_DRIVER_MISMATCH, COMPAT_NOT_SUPPORTED_ON_DEVICE
            34 | 46 | 100 | 803 | 804 => Kind::Unavailable,
            _ => Kind::Call,
        },
    }
}

/// The error for a failed `call` that returned `code` (never 0), with the
/// runtime's own text for it. `bytes` is the size of an allocation call, so
/// an out-of-memory status of any other call stays a plain [`HipError::Call`].
pub(crate) fn from_status(
    flavor: Flavor,
    call: &'static str,
    code: i32,
    message: String,
    bytes: Option<u64>,
) -> HipError {
    match (kind(flavor, code), bytes) {
        (Kind::OutOfMemory, Some(bytes)) => HipError::OutOfMemory {
            call,
            bytes,
            code,
            message,
        },
        (Kind::DeviceLost, _) => HipError::DeviceLost {
            call,
            code,
            message,
        },
        (Kind::CodeObject, _) => HipError::CodeObject {
            call,
            code,
            message,
        },
        (Kind::Unavailable, _) => HipError::Unavailable {
            call,
            code,
            message,
        },
        (Kind::Call | Kind::OutOfMemory, _) => HipError::Call {
            call,
            code,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_devices_are_their_own_variant() {
        let e = from_status(
            Flavor::Hip,
            "hipStreamSynchronize",
            700,
            "an illegal memory access was encountered".into(),
            None,
        );
        assert!(matches!(e, HipError::DeviceLost { code: 700, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "hipStreamSynchronize failed: an illegal memory access was encountered (error 700); \
             the device is lost and every later call on it fails"
        );
        for code in [714, 715, 716, 717, 718, 719] {
            let e = from_status(Flavor::CudaDriver, "cuEventQuery", code, "x".into(), None);
            assert!(matches!(e, HipError::DeviceLost { .. }), "{code}: {e:?}");
        }
        // 714..718 are not HIP codes and must not be taken for lost devices.
        let e = from_status(Flavor::Hip, "hipEventQuery", 714, "x".into(), None);
        assert!(matches!(e, HipError::Call { .. }), "{e:?}");
    }

    #[test]
    fn out_of_memory_only_for_allocations() {
        let e = from_status(
            Flavor::CudaDriver,
            "cuMemAlloc_v2",
            2,
            "out of memory".into(),
            Some(1 << 30),
        );
        assert_eq!(
            e.to_string(),
            "cuMemAlloc_v2 of 1073741824 bytes failed: out of memory (error 2)"
        );
        let e = from_status(
            Flavor::Hip,
            "hipModuleLoadData",
            2,
            "out of memory".into(),
            None,
        );
        assert!(matches!(e, HipError::Call { code: 2, .. }), "{e:?}");
    }

    #[test]
    fn code_object_and_unavailable() {
        let e = from_status(
            Flavor::Hip,
            "hipModuleLaunchKernel",
            98,
            "invalid device function".into(),
            None,
        );
        assert!(matches!(e, HipError::CodeObject { .. }), "{e:?}");
        assert!(e
            .to_string()
            .ends_with("the code object does not fit this device"));
        let e = from_status(
            Flavor::CudaDriver,
            "cuModuleLoadData",
            222,
            "x".into(),
            None,
        );
        assert!(matches!(e, HipError::CodeObject { .. }), "{e:?}");
        let e = from_status(Flavor::CudaDriver, "cuInit", 34, "stub".into(), None);
        assert!(matches!(e, HipError::Unavailable { .. }), "{e:?}");
        let e = from_status(
            Flavor::Hip,
            "hipInit",
            100,
            "no ROCm-capable device".into(),
            None,
        );
        assert_eq!(
            e.to_string(),
            "hipInit failed: no ROCm-capable device (error 100); no usable GPU"
        );
    }

    #[test]
    fn plain_calls_name_the_call() {
        let e = from_status(
            Flavor::Hip,
            "hipModuleGetFunction",
            500,
            "named symbol not found".into(),
            None,
        );
        assert_eq!(
            e,
            HipError::Call {
                call: "hipModuleGetFunction",
                code: 500,
                message: "named symbol not found".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "hipModuleGetFunction failed: named symbol not found (error 500)"
        );
    }

    #[test]
    fn load_errors_read_as_one_line() {
        let e = HipError::MissingSymbol {
            flavor: Flavor::Hip,
            library: "/opt/rocm/lib/libamdhip64.so".into(),
            symbol: "hipGetDevicePropertiesR0600",
        };
        assert_eq!(
            e.to_string(),
            "/opt/rocm/lib/libamdhip64.so has no symbol hipGetDevicePropertiesR0600: \
             the HIP runtime is too old (rocmforge needs ROCm 6.0 or newer)"
        );
        let e = HipError::TooOld {
            flavor: Flavor::Hip,
            found: "5.7.31921".into(),
        };
        assert_eq!(
            e.to_string(),
            "HIP runtime 5.7.31921 is too old: rocmforge needs ROCm 6.0 or newer \
             (the hipDeviceProp_tR0600 ABI)"
        );
        let e = HipError::BadRuntimeName {
            value: "rocm".into(),
        };
        assert_eq!(
            e.to_string(),
            "ROCMFORGE_HIP_RUNTIME=\"rocm\" names no runtime: use hip (the default) or cuda"
        );
        for e in [
            HipError::NotFound {
                flavor: Flavor::CudaDriver,
                tried: vec!["libcuda.so.1".into(), "libcuda.so".into()],
            },
            e,
        ] {
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }
}
