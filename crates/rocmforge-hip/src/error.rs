//! HIP failures become [`BackendError`]s in exactly one place: the `From`
//! impl below. Call sites write `.map_err(Hip)?`; the [`HipError`] already
//! names the C function that failed ("hipMalloc of 4096 bytes failed: ..."),
//! and in CUDA-driver mode the `cu*` one, so the message never passes for
//! an AMD run.
//!
//! Timeouts are not here: a wait that expires is not a failed call, and its
//! message is built where the graph and the launch in flight are known
//! (`commands.rs`).

use hip_sys::HipError;
use rocmforge_core::backend::BackendError;

/// A failed HIP call, on its way to becoming a [`BackendError`]. (A local
/// type because neither `HipError` nor `BackendError` is this crate's.)
#[derive(Debug)]
pub(crate) struct Hip(pub HipError);

impl From<Hip> for BackendError {
    fn from(Hip(e): Hip) -> BackendError {
        match e {
            HipError::OutOfMemory { call, bytes, .. } => {
                BackendError::OutOfMemory { what: call, bytes }
            }
            // A faulted kernel or a reset: sticky, every later call fails.
            HipError::DeviceLost { .. } => BackendError::device_lost_from("", e),
            // A setting, not the machine: another value runs.
            HipError::BadRuntimeName { ref value } => BackendError::bad_option(
                "ROCMFORGE_HIP_RUNTIME",
                format!("{value:?}"),
                "names no runtime; use hip (the default) or cuda",
            ),
            // No runtime, a runtime too old, no device, or kernels that do
            // not fit it: this backend cannot run here, another can.
            HipError::NotFound { .. }
            | HipError::LoadFailed { .. }
            | HipError::MissingSymbol { .. }
            | HipError::TooOld { .. }
            | HipError::Unavailable { .. }
            | HipError::CodeObject { .. } => BackendError::unavailable_from("", e),
            HipError::Call { .. } => BackendError::Device(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_keep_their_meaning() {
        let lost = BackendError::from(Hip(HipError::DeviceLost {
            call: "hipEventQuery",
            code: 700,
            message: "an illegal memory access was encountered".into(),
        }));
        assert!(lost.is_fatal(), "{lost}");
        assert!(lost.to_string().contains("hipEventQuery"), "{lost}");
        let source = std::error::Error::source(&lost).expect("the HipError");
        assert!(
            matches!(
                source.downcast_ref::<HipError>(),
                Some(HipError::DeviceLost { code: 700, .. })
            ),
            "{source:?}"
        );
        let none = BackendError::from(Hip(HipError::Unavailable {
            call: "hipInit",
            code: 100,
            message: "no ROCm-capable device is detected".into(),
        }));
        assert!(matches!(none, BackendError::Unavailable { .. }), "{none:?}");
        assert!(std::error::Error::source(&none).unwrap().is::<HipError>());
        let name = BackendError::from(Hip(HipError::BadRuntimeName {
            value: "rocm".into(),
        }));
        assert_eq!(
            name.to_string(),
            "ROCMFORGE_HIP_RUNTIME=\"rocm\": names no runtime; use hip (the default) or cuda"
        );
        let oom = BackendError::from(Hip(HipError::OutOfMemory {
            call: "hipMalloc",
            bytes: 1 << 30,
            code: 2,
            message: "out of memory".into(),
        }));
        assert!(
            matches!(
                oom,
                BackendError::OutOfMemory {
                    what: "hipMalloc",
                    bytes: 1073741824
                }
            ),
            "{oom:?}"
        );
        let call = BackendError::from(Hip(HipError::Call {
            call: "hipModuleGetFunction",
            code: 500,
            message: "named symbol not found".into(),
        }));
        assert!(matches!(call, BackendError::Device(_)), "{call:?}");
        assert!(!call.is_fatal());
    }
}
