//! Deterministic inputs: noise, quantized weight matrices, activation rows
//! and f16 KV caches. The kernels' speed does not depend on the values, only
//! on the shapes and types, so fixed pseudo-random data is enough and keeps
//! runs comparable.

use half::f16;
use rocmforge_core::quant::{
    quantize_to_vec, quantize_to_vec_with_importance, QuantError, QuantType,
};
use rocmforge_cpu::kernels::quant_dot::quantize_activation;

/// Every weight type the CPU matmul kernels accept, in ggml id order.
pub const KERNEL_TYPES: [QuantType; 25] = [
    QuantType::F32,
    QuantType::F16,
    QuantType::Q4_0,
    QuantType::Q4_1,
    QuantType::Q5_0,
    QuantType::Q5_1,
    QuantType::Q8_0,
    QuantType::Q2K,
    QuantType::Q3K,
    QuantType::Q4K,
    QuantType::Q5K,
    QuantType::Q6K,
    QuantType::IQ2XXS,
    QuantType::IQ2XS,
    QuantType::IQ3XXS,
    QuantType::IQ1S,
    QuantType::IQ4NL,
    QuantType::IQ3S,
    QuantType::IQ2S,
    QuantType::IQ4XS,
    QuantType::IQ1M,
    QuantType::BF16,
    QuantType::MXFP4,
    QuantType::TQ1_0,
    QuantType::TQ2_0,
];

/// Distinct rows quantized for a matrix; the rest repeat them. K-quant
/// quantization runs at 5-8 million elements per second, so quantizing a
/// whole 4096 x 11008 matrix would cost 5-10 s per type; the kernels stream
/// every row from memory whether or not rows repeat, so the speed is the same.
const DISTINCT_ROWS: usize = 64;

/// `n` values in [-1, 1) from a xorshift generator seeded by `seed`.
pub fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A weight matrix of `rows` rows of `k` elements, stored as the GGUF file
/// stores it: row after row of `ty` blocks.
pub struct WeightMatrix {
    pub ty: QuantType,
    pub k: usize,
    pub rows: usize,
    pub bytes: Vec<u8>,
}

impl WeightMatrix {
    /// Bytes of a `k` x `rows` matrix of `ty`, known before building it so a
    /// benchmark can declare its throughput; `None` if `k` is not a whole
    /// number of blocks.
    pub fn byte_len(ty: QuantType, k: usize, rows: usize) -> Option<u64> {
        ty.bytes_for(k as u64)?.checked_mul(rows as u64)
    }

    /// Random rows quantized to `ty`, [`DISTINCT_ROWS`] of them repeated to
    /// fill the matrix.
    pub fn random(ty: QuantType, k: usize, rows: usize) -> Result<WeightMatrix, QuantError> {
        let mut pattern = Vec::new();
        for r in 0..DISTINCT_ROWS.min(rows) {
            let x = noise(k, r as u64);
            // The types ggml quantizes only with an importance get a flat one.
            let row = if ty.needs_importance() {
                quantize_to_vec_with_importance(ty, &x, &vec![1.0; k])?
            } else {
                quantize_to_vec(ty, &x)?
            };
            pattern.extend(row);
        }
        let row_bytes = pattern.len() / DISTINCT_ROWS.min(rows).max(1);
        let bytes = pattern
            .iter()
            .copied()
            .cycle()
            .take(row_bytes * rows)
            .collect();
        Ok(WeightMatrix { ty, k, rows, bytes })
    }
}

/// `n_tokens` random activation rows of `k` elements, quantized for weights
/// of type `weight` and laid back to back, as `matmul_tile` takes them.
pub fn activations(weight: QuantType, k: usize, n_tokens: usize) -> Vec<u8> {
    let mut all = Vec::new();
    let mut row = Vec::new();
    for t in 0..n_tokens {
        quantize_activation(weight, &noise(k, 1_000 + t as u64), &mut row);
        all.extend_from_slice(&row);
    }
    all
}

/// `n` random f16 values, a KV cache's worth.
pub fn f16_noise(n: usize, seed: u64) -> Vec<f16> {
    noise(n, seed).into_iter().map(f16::from_f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_in_range_and_seed_dependent() {
        let a = noise(10_000, 1);
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
        assert!(a.iter().any(|&v| v < -0.9) && a.iter().any(|&v| v > 0.9));
        assert_ne!(a, noise(10_000, 2));
        assert_eq!(a, noise(10_000, 1));
    }

    #[test]
    fn matrix_has_declared_size_and_repeats_its_pattern() {
        for ty in [QuantType::Q4_0, QuantType::Q4K, QuantType::F16] {
            let m = WeightMatrix::random(ty, 256, 130).unwrap();
            assert_eq!(
                Some(m.bytes.len() as u64),
                WeightMatrix::byte_len(ty, 256, 130)
            );
            let rb = m.bytes.len() / 130;
            assert_eq!(m.bytes[..rb], m.bytes[DISTINCT_ROWS * rb..][..rb]);
            assert_ne!(m.bytes[..rb], m.bytes[rb..2 * rb]);
        }
    }

    #[test]
    fn rejects_partial_blocks() {
        assert!(WeightMatrix::random(QuantType::Q4K, 100, 4).is_err());
        assert_eq!(WeightMatrix::byte_len(QuantType::Q4K, 100, 4), None);
    }
}
