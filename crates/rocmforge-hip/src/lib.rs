//! The HIP backend (`--backend rocm`): kernels for every RDNA target, built
//! by any clang with the AMDGPU target, and the runtime that runs them.
//!
//! # Kernels
//!
//! The kernels live in the workspace's top-level `kernels/` folder (`*.hip`
//! plus `prelude.h`, the device prelude used instead of the ROCm headers).
//! `build.rs` compiles them with any clang that has the AMDGPU target (ROCm's
//! or Debian's `clang-19`) into one code object per RDNA target, and into
//! PTX for the NVIDIA verification GPU, and embeds them:
//! [`code_objects::for_arch`] picks one by the device's `gcnArchName`, with
//! one clear error where there is none. [`metadata`] reads the registers,
//! spills and LDS the compiler gave each kernel; `tests/code_objects.rs`
//! holds every kernel to its budget on every target.
//!
//! # The key choice: the Vulkan backend's kernels, launched the same way
//!
//! Which kernels compute a graph is decided once, in core
//! (`rocmforge_core::gpu`): fusion, kernel choice, argument blocks,
//! workgroup counts. Every HIP kernel has the name, the one by-value
//! argument block (`kernels/push.h`) and the workgroup size of the GLSL
//! kernel it ports and computes the same numbers, so the two GPU backends
//! cannot drift apart, and the conformance suite that checks one against
//! the CPU backend checks the other the same way.
//!
//! # Runtime
//!
//! [`HipBackend`] is the [`Backend`](rocmforge_core::backend::Backend) the
//! registry offers as `rocm`: core's `GpuBackend` over [`HipDevice`]
//! (docs/gpu-backend.md says who owns what). The device is built with the
//! failures of RDNA cards under ROCm in mind:
//!
//! - **One allocation per region** (`memory.rs`): weights, KV cache, arena
//!   (with scratch and the step inputs), one pinned staging buffer; weights
//!   are uploaded through it in chunks, never from the file mapping.
//! - **Recorded once, replayed per step** (`commands.rs`): core's shared
//!   GPU lowering turns a graph into launches at `prepare`; they are
//!   captured into a hipGraph and a step is one `hipGraphLaunch` (direct
//!   launches where capture fails or `ROCMFORGE_HIP_GRAPHS=0`). Per-step
//!   values (tokens, positions) reach the kernels as data, in the
//!   step-input region.
//! - **Every wait bounded**: an event polled against `--gpu-timeout`
//!   (default 60 s), never a blocking synchronize; a timeout names the
//!   launches in flight (breadcrumbs) and the likely causes, and stops the
//!   backend, whose drop then leaks rather than waits.
//!
//! The same code runs on the CUDA driver (`ROCMFORGE_HIP_RUNTIME=cuda`,
//! "hip via CUDA driver"), which verifies logic and numerics on NVIDIA GPUs,
//! never AMD speed; the device line says which mode runs.

mod backend;
pub mod code_objects;
mod commands;
mod device;
mod error;
mod memory;
pub mod metadata;
mod modules;
mod options;
mod spin;

pub use backend::{open, HipBackend, HipDevice};
pub use code_objects::{
    base_arch, build_summary, built_targets, built_without_kernels, for_arch, ptx_for, KernelsError,
};
pub use hip_sys::Flavor;
pub use metadata::{CodeObjectMetadata, KernelMetadata, MetadataError};
pub use options::{HipOptions, DEFAULT_STAGING_BYTES};
