//! The Vulkan compute backend.
//!
//! # The key choice: buffer device addresses, recorded once
//!
//! Every kernel receives 64-bit device addresses in its push constants
//! (`VK_KHR_buffer_device_address`, core in Vulkan 1.2) and reads through
//! `GL_EXT_buffer_reference` types; there are no descriptor sets at all.
//! That buys three things at once:
//!
//! - **No per-tensor bindings.** A tensor is an address: a weight's region
//!   base plus its offset, an arena offset from the core planner, a KV layer
//!   block. So the backend makes a constant number of allocations (weights,
//!   KV cache, arena, one host-visible buffer) whatever the model's tensor
//!   count, and nothing is bound per dispatch.
//! - **No `maxStorageBufferRange` ceiling.** Descriptor-based backends must
//!   split any tensor region larger than the storage-buffer range (128 MiB
//!   on lavapipe, 4 GiB on most GPUs); pointers are limited only by
//!   `maxMemoryAllocationSize`, where the weights are split with the core's
//!   `split_regions` so no tensor straddles two allocations.
//! - **Record once, replay every token.** With addresses frozen into push
//!   constants and the per-step values (token ids, `pos0`, `n_kv`) read by
//!   the kernels from the step-input region, a graph is recorded into one
//!   command buffer at `prepare`; a step is one host write, one
//!   `vkQueueSubmit` and one bounded fence wait. Grid sizes depend only on
//!   the graph's shape.
//!
//! The cost is a Vulkan 1.2 device with `bufferDeviceAddress`, `shaderInt64`
//! and 8/16-bit storage, which every desktop driver of the last years has
//! (RADV, AMDVLK, NVIDIA, ANV, lavapipe).
//!
//! Waits are bounded (`ROCMFORGE_GPU_TIMEOUT`, default 60 s). A breadcrumb
//! written after each dispatch lets a timeout name the op in flight; after a
//! timeout or a lost device the backend refuses every call and leaks its
//! objects on drop instead of blocking on a hung queue.
//!
//! [`VulkanBackend`] is core's `GpuBackend` over [`VulkanDevice`]
//! (docs/gpu-backend.md says who owns what). See `docs/vulkan.md` for the
//! kernels and their costs.

mod backend;
mod commands;
mod device;
mod error;
mod memory;
mod options;
mod pipelines;
mod profile;
mod upload;

pub use backend::{open, VulkanBackend, VulkanDevice, VulkanPart};
pub use device::SubgroupSize;
pub use error::VkError;
pub use options::VulkanOptions;
