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
            HipError::DeviceLost { .. } => BackendError::DeviceLost(e.to_string()),
            // No runtime, a runtime too old, no device, or kernels that do
            // not fit it: this backend cannot run here, another can.
            HipError::NotFound { .. }
            | HipError::LoadFailed { .. }
            | HipError::MissingSymbol { .. }
            | HipError::TooOld { .. }
            | HipError::BadRuntimeName { .. }
            | HipError::Unavailable { .. }
            | HipError::CodeObject { .. } => BackendError::Unavailable(e.to_string()),
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
