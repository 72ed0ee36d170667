//! Compute kernels over host slices.

pub mod activation;
pub mod attention;
pub mod norm;
pub mod quant_dot;
pub mod rope;
