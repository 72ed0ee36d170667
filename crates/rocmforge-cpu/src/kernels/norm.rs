//! RMS normalisation, numerically as ggml's `rms_norm` followed by `mul`.
//!
//! The sum of squares is accumulated in **f64**, like ggml (`ggml_float`): a
//! hidden state of 4096–8192 elements with a few large outliers loses several
//! bits in an f32 running sum, and since the logits are compared against the
//! reference, the cheap way to agree with it is to accumulate the same way.
//! Each square is still rounded to f32 before widening, as ggml does.
//! Everything after the sum (mean, `1/sqrt`, the two products) is f32 in
//! ggml's order: `(x * scale) * weight`.

/// `out = x / sqrt(mean(x²) + eps) * weight`.
///
/// # Panics
/// If `weight` or `out` is not as long as `x` (a caller bug, not bad input).
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert_eq!(weight.len(), x.len(), "rms_norm: weight length");
    assert_eq!(out.len(), x.len(), "rms_norm: output length");
    let scale = inv_rms(x, eps);
    for ((o, &xi), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = xi * scale * w;
    }
}

/// [`rms_norm`] writing over its input.
///
/// # Panics
/// If `weight` is not as long as `x`.
pub fn rms_norm_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    assert_eq!(weight.len(), x.len(), "rms_norm: weight length");
    let scale = inv_rms(x, eps);
    for (xi, &w) in x.iter_mut().zip(weight) {
        *xi = *xi * scale * w;
    }
}

/// `1 / sqrt(mean(x²) + eps)` with ggml's precision at each step.
fn inv_rms(x: &[f32], eps: f32) -> f32 {
    if x.is_empty() {
        // Nothing will be scaled; avoid 0/0 for tidiness.
        return 1.0;
    }
    let mean = (sum_squares(x) / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

fn sum_squares(x: &[f32]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked at runtime just above).
        return unsafe { sum_squares_avx2(x) };
    }
    sum_squares_scalar(x)
}

/// The reference order: one sequential f64 sum.
fn sum_squares_scalar(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v * v)).sum()
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    super::isa::detected_isa() == super::isa::Isa::Avx2
}

/// Four lanes of four f64 partial sums. The order differs from the sequential
/// reference only at f64 rounding level (~1e-16 relative), which almost never
/// changes the f32 mean, while removing the add-latency chain that dominates
/// the scalar loop.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_squares_avx2(x: &[f32]) -> f64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_pd(); 4];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        // SAFETY: `c` has exactly 16 elements; each load reads 4 of them.
        unsafe {
            for (j, a) in acc.iter_mut().enumerate() {
                let v = _mm_loadu_ps(c.as_ptr().add(4 * j));
                let sq = _mm_mul_ps(v, v);
                *a = _mm256_add_pd(*a, _mm256_cvtps_pd(sq));
            }
        }
    }
    let pair0 = _mm256_add_pd(acc[0], acc[1]);
    let pair1 = _mm256_add_pd(acc[2], acc[3]);
    let mut lanes = [0.0f64; 4];
    // SAFETY: `lanes` holds exactly four f64.
    unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_add_pd(pair0, pair1)) };
    let mut sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for &v in tail {
        sum += f64::from(v * v);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_noise as noise;

    #[test]
    fn known_values() {
        // mean(1,4,9,16) = 7.5, so each x is divided by sqrt(7.5) ≈ 2.738613.
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let w = [1.0f32, 1.0, 2.0, -1.0];
        let mut out = [0.0f32; 4];
        rms_norm(&x, &w, 0.0, &mut out);
        let expect = [0.365_148_4, 0.730_296_7, 2.190_890_2, -1.460_593_5];
        for (o, e) in out.iter().zip(expect) {
            assert!((o - e).abs() < 1e-6, "{o} vs {e}");
        }
    }

    #[test]
    fn eps_is_added_to_the_mean() {
        // mean(x²) = 1, eps = 3 → divide by 2.
        let x = [1.0f32, -1.0];
        let mut out = [0.0f32; 2];
        rms_norm(&x, &[1.0, 1.0], 3.0, &mut out);
        assert_eq!(out, [0.5, -0.5]);
    }

    #[test]
    fn inplace_matches_out_of_place() {
        let x = noise(777, 1, 3.0);
        let w = noise(777, 2, 1.5);
        let mut out = vec![0.0; x.len()];
        rms_norm(&x, &w, 1e-6, &mut out);
        let mut y = x.clone();
        rms_norm_inplace(&mut y, &w, 1e-6);
        assert_eq!(out, y);
    }

    #[test]
    fn f64_sum_survives_cancellation_prone_rows() {
        // One huge outlier among many small values: an f32 running sum
        // would drop the small squares entirely once the big one is in.
        let mut x = vec![1e-3f32; 4096];
        x[0] = 1e4;
        let exact: f64 = 1e8 + 4095.0 * 1e-6_f64;
        let got = sum_squares(&x);
        assert!((got - exact).abs() / exact < 1e-9, "{got} vs {exact}");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_matches_scalar() {
        if !has_avx2() {
            return;
        }
        for n in [0usize, 1, 5, 15, 16, 17, 64, 4096, 5003] {
            let x = noise(n, n as u64 + 7, 20.0);
            let a = sum_squares_scalar(&x);
            // SAFETY: AVX2 checked above.
            let b = unsafe { sum_squares_avx2(&x) };
            assert!((a - b).abs() <= a * 1e-14, "n={n}: {a} vs {b}");
            // The f32 mean, the value that matters downstream, is identical.
            if n > 0 {
                assert_eq!((a / n as f64) as f32, (b / n as f64) as f32, "n={n}");
            }
        }
    }
}
