//! Vulkan results become [`BackendError`]s in exactly one place: the `From`
//! impl below. Every fallible Vulkan call goes through [`Check::check`],
//! which names the call, so an error reads "vkAllocateMemory: ...".

use ash::vk;
use rocmforge_core::backend::BackendError;

/// A failed Vulkan call.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {result}")]
pub struct VkError {
    pub call: &'static str,
    pub result: vk::Result,
    /// Bytes being allocated, for out-of-memory errors (0 otherwise).
    pub bytes: u64,
}

/// Names the call a `VkResult` came from.
pub trait Check<T> {
    fn check(self, call: &'static str) -> Result<T, VkError>;
    /// As `check`, for an allocation of `bytes`.
    fn check_alloc(self, call: &'static str, bytes: u64) -> Result<T, VkError>;
}

impl<T> Check<T> for Result<T, vk::Result> {
    fn check(self, call: &'static str) -> Result<T, VkError> {
        self.check_alloc(call, 0)
    }

    fn check_alloc(self, call: &'static str, bytes: u64) -> Result<T, VkError> {
        self.map_err(|result| VkError {
            call,
            result,
            bytes,
        })
    }
}

impl From<VkError> for BackendError {
    fn from(e: VkError) -> BackendError {
        match e.result {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                BackendError::OutOfMemory {
                    what: e.call,
                    bytes: e.bytes,
                }
            }
            vk::Result::ERROR_DEVICE_LOST => BackendError::device_lost_from("", e),
            vk::Result::ERROR_INITIALIZATION_FAILED
            | vk::Result::ERROR_INCOMPATIBLE_DRIVER
            | vk::Result::ERROR_EXTENSION_NOT_PRESENT
            | vk::Result::ERROR_FEATURE_NOT_PRESENT => BackendError::unavailable_from("", e),
            _ => BackendError::Device(e.to_string()),
        }
    }
}
