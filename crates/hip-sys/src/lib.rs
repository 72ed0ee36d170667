//! Raw bindings to the HIP runtime functions the HIP backend uses, opened at
//! run time.
//!
//! # Opened at run time, never linked
//!
//! The table is filled with `dlopen`/`dlsym` (through `libloading`) when a
//! [`Runtime`] is loaded, from `libamdhip64.so` (`$ROCM_PATH/lib`, the
//! loader's search path, `/opt/rocm/lib`; sonames `.so`, `.so.7`, `.so.6`).
//! Building needs no ROCm at all, so `cargo build --workspace` works on every
//! machine: CI, the CPU and Vulkan users, ours. A machine without ROCm, or
//! with one that is too old, gets one error at [`Runtime::load`] that says
//! what was tried and what to install, and the backend reports itself
//! unavailable like any other.
//!
//! That is why this is not the crates.io `hip-sys` (0.1.x): its build script
//! links `amdhip64` at build time from `HIP_PATH` (default `/opt/rocm/hip`),
//! so every build without ROCm fails at link time, and it predates ROCm 6's
//! `hipDeviceProp_tR0600` ABI. `cubecl-hip-sys` links at build time as well
//! and pins one ROCm release per feature. A path dependency of the same name
//! shadows the crates.io crate inside this workspace.
//!
//! # The ROCm 6/7 ABI
//!
//! ROCm 6.0 changed `hipDeviceProp_t` and renamed the entry point filling it
//! to `hipGetDevicePropertiesR0600`. This crate binds that symbol with
//! [`hipDeviceProp_tR0600`] laid out as ROCm 6.0-7.x declare it (size and
//! offsets checked at compile time and in tests), and refuses runtimes older
//! than 6.0 by version before resolving anything else. `hipMallocAsync` and
//! `hipFreeAsync` are deliberately absent: pool allocations have hang reports
//! on RDNA3 and gfx1151; the backend makes one `hipMalloc` per arena region.
//!
//! # Two flavors, one API
//!
//! HIP's module API maps one to one onto the CUDA driver API
//! (`hipModuleLoadData`/`cuModuleLoadData`, `hipModuleLaunchKernel`/
//! `cuLaunchKernel`, streams, events, graphs), so the same table can also be
//! filled from `libcuda.so.1`: [`Flavor::CudaDriver`], which runs the
//! backend's kernels (compiled to PTX) on an NVIDIA GPU to verify logic and
//! numerics where no AMD GPU exists. It displays as "hip via CUDA driver" and
//! its errors name the `cu*` functions, so it never passes for an AMD run.
//! [`Runtime::from_env`] picks the flavor from `ROCMFORGE_HIP_RUNTIME`.
//!
//! # Safety
//!
//! Each library is opened once per process and never closed: unloading a GPU
//! runtime with threads and queues of its own is a known source of crashes at
//! exit, and the function pointers must stay valid for `'static`. Handles
//! ([`Stream`], [`Event`], [`Module`], ...) are plain `Copy` tokens; the
//! methods that take one are `unsafe` and document, in a `# Safety` section,
//! the contract the caller keeps (the handle is live, memory stays valid until
//! the queued work completes, ...). Creating objects and querying the device
//! is safe.
//!
//! Every device-memory and pinned-host allocation call is counted
//! ([`Runtime::allocation_calls`]) here at the binding layer, so the
//! backend's "allocations do not grow with the tensor count" test cannot be
//! fooled by the code it checks.

mod cuda;
mod error;
mod exec;
mod hip;
mod loader;
mod memory;
mod runtime;
mod types;

pub use error::HipError;
pub use hip::{hipDeviceArch_t, hipDeviceProp_tR0600};
pub use runtime::{Runtime, RUNTIME_ENV};
pub use types::{
    DeviceProps, DevicePtr, Event, EventStatus, Flavor, Function, Graph, GraphExec, MemInfo,
    Module, Stream, Version,
};
