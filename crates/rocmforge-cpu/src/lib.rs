//! rocmforge-cpu: the reference backend every GPU backend is tested against,
//! and the fallback of last resort.
//!
//! Weights are used in place from the mapped GGUF file; matrix products run
//! on the quantized blocks (activations quantized once per op, as ggml does),
//! multi-threaded with a barrier between ops and SIMD chosen at run time.

mod backend;
mod exec;
pub mod kernels;
mod memory;
mod team;
mod weights;

pub use backend::{CpuBackend, MAX_THREADS};
