//! HIP kernels for rocmforge: the toolchain side of the HIP backend.
//!
//! The kernels live in the workspace's top-level `kernels/` folder (`*.hip`
//! plus `prelude.h`, the device prelude used instead of the ROCm headers).
//! `build.rs` compiles them with any clang that has the AMDGPU target (ROCm's
//! or Debian's `clang-19`) into one code object per RDNA target, and into
//! PTX for the NVIDIA verification GPU, and embeds them:
//! [`code_objects::for_arch`] picks one by the device's `gcnArchName`, with
//! one clear error where there is none. [`metadata`] reads the registers,
//! spills and LDS the compiler gave each kernel; `tests/code_objects.rs`
//! holds every kernel to its budget on every target. [`shapes`] mirrors the
//! kernels' shape structs (`kernels/shapes.h`) with their launch geometry;
//! `tests/device_kernels.rs` runs every kernel on a real GPU through
//! `hip-sys` against host references in the CPU backend's numerics.
//!
//! The runtime side (device, memory, launches) is not here.

pub mod code_objects;
pub mod metadata;
pub mod shapes;

pub use code_objects::{
    base_arch, build_summary, built_targets, built_without_kernels, for_arch, ptx_for, KernelsError,
};
pub use metadata::{CodeObjectMetadata, KernelMetadata, MetadataError};
pub use shapes::{
    MatmulShape, MatvecShape, QuantizeShape, RmsNormShape, SpinShape, MATVEC_MAX_TOKENS,
};
