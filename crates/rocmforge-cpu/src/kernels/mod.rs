//! Compute kernels over host slices.
