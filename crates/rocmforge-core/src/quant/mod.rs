//! Tensor element types and their exact ggml block layouts.

mod types;

pub use types::QuantType;
