//! The reference CPU backend: the baseline every GPU backend is tested against.
pub mod kernels;
