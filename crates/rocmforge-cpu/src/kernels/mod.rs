//! Compute kernels over host slices.

pub mod activation;
pub mod attention;
mod isa;
pub mod moe;
pub mod norm;
pub mod quant_dot;
pub mod rope;

/// Deterministic pseudo-random values in [-scale, scale) for kernel tests.
#[cfg(test)]
pub(crate) fn test_noise(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}
