//! Float weights: F32 rows with f32 activations, F16 and BF16 rows with
//! activations rounded to the same type (ggml's choice, so the products see
//! the same inputs as the reference). Accumulation is always f32.

/// Scalar dot of two rows of `k` elements of `size` bytes, widened by `f`.
fn scalar_dot(k: usize, w: &[u8], a: &[u8], size: usize, f: impl Fn(&[u8]) -> f32) -> f32 {
    // Four partial sums: independent chains, and the same rounding pattern for
    // every k.
    let mut acc = [0.0f32; 4];
    for (i, (x, y)) in w
        .chunks_exact(size)
        .zip(a.chunks_exact(size))
        .take(k)
        .enumerate()
    {
        acc[i % 4] += f(x) * f(y);
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

pub(super) fn f32_scalar(k: usize, w: &[u8], a: &[u8]) -> f32 {
    scalar_dot(k, w, a, 4, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(super) fn f16_scalar(k: usize, w: &[u8], a: &[u8]) -> f32 {
    scalar_dot(k, w, a, 2, |b| {
        half::f16::from_le_bytes([b[0], b[1]]).to_f32()
    })
}

pub(super) fn bf16_scalar(k: usize, w: &[u8], a: &[u8]) -> f32 {
    scalar_dot(k, w, a, 2, |b| {
        f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)
    })
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use std::arch::x86_64::*;

    /// How each float type widens eight elements at `p` to f32.
    #[derive(Clone, Copy)]
    pub(in super::super) enum Elem {
        F32,
        F16,
        BF16,
    }

    /// # Safety
    /// AVX2/FMA/F16C available; eight elements of `e` readable at `p`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(e: Elem, p: *const u8) -> __m256 {
        // SAFETY: eight elements of `e` are readable at `p` (this fn's
        // contract); AVX2/F16C are enabled on this fn.
        unsafe {
            match e {
                Elem::F32 => _mm256_loadu_ps(p as *const f32),
                Elem::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
                Elem::BF16 => {
                    let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
                    _mm256_castsi256_ps(_mm256_slli_epi32(h, 16))
                }
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in super::super) unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// `R` weight rows against one activation row, each with a single FMA
    /// chain over 8-element steps and the same final reduction as
    /// llama.cpp's tinyBLAS (which serves F32/F16 matmuls there whenever
    /// `k % 8 == 0`), so each result is bit-identical to it. The rows'
    /// independent chains hide the FMA latency a single row would expose.
    ///
    /// # Safety
    /// AVX2/FMA/F16C available; every `w[r]` and `a` hold `k` elements of `e`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in super::super) unsafe fn dot_rows<const R: usize>(
        e: Elem,
        k: usize,
        w: [&[u8]; R],
        a: &[u8],
    ) -> [f32; R] {
        let size = match e {
            Elem::F32 => 4,
            _ => 2,
        };
        debug_assert!(w.iter().all(|r| r.len() >= k * size) && a.len() >= k * size);
        let (wp, ap) = (w.map(|r| r.as_ptr()), a.as_ptr());
        let mut acc = [_mm256_setzero_ps(); R];
        let mut i = 0;
        while i + 8 <= k {
            // SAFETY: `i + 8 <= k` and every row holds `k` elements (this
            // fn's contract); AVX2/FMA/F16C are enabled on this fn.
            unsafe {
                let y = load8(e, ap.add(i * size));
                for r in 0..R {
                    acc[r] = _mm256_fmadd_ps(load8(e, wp[r].add(i * size)), y, acc[r]);
                }
            }
            i += 8;
        }
        let value = |b: &[u8]| match e {
            Elem::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            Elem::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
            Elem::BF16 => f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16),
        };
        let mut out = [0.0f32; R];
        for r in 0..R {
            // SAFETY: AVX2/FMA/F16C are enabled on this fn.
            out[r] = unsafe { hsum(acc[r]) };
            for j in i..k {
                out[r] += value(&w[r][j * size..]) * value(&a[j * size..]);
            }
        }
        out
    }
}
