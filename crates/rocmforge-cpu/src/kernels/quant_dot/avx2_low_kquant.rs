//! AVX2 kernels for Q2_K, Q3_K and IQ4_XS against Q8_K rows.
//!
//! Safety contract of every `pub(super)` kernel here: the CPU has AVX2, FMA
//! and F16C, `w` holds at least `nb` weight super-blocks and every `a[t]` at
//! least `nb` Q8_K blocks (the dispatcher checks both).

use std::arch::x86_64::*;

use rocmforge_core::quant::IQ4NL_VALUES;

use super::avx2_common::*;

const A_BYTES: usize = 292;
const A_QS: usize = 4;
const A_BSUMS: usize = 260;

/// `Σ scale_g * bsum_g` over the 16 groups, as eight i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scaled_bsums(scales16: __m256i, pa: *const u8) -> __m256i {
    // SAFETY: callers pass a whole Q8_K block at `pa` (inside the rows the
    // kernels' contract covers); its 32 bsum bytes start at A_BSUMS.
    _mm256_madd_epi16(scales16, unsafe { load256(pa.add(A_BSUMS)) })
}

/// The sixteen signed Q3_K scales (12 packed bytes at `p`) as i8, four bytes
/// at a time; same unpacking as `rocmforge_core::quant::unpack_q3k_scales`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3k_scales(p: *const u8) -> __m128i {
    // SAFETY: callers pass the 12 scale bytes of a weight super-block the
    // kernels' contract covers, and `i` < 3.
    let word = |i: usize| unsafe { (p.add(4 * i) as *const u32).read_unaligned() };
    let (a0, a1, a2) = (word(0), word(1), word(2));
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let v = _mm_setr_epi32(
        ((a0 & LOW4) | ((a2 & TOP2) << 4)) as i32,
        ((a1 & LOW4) | (((a2 >> 2) & TOP2) << 4)) as i32,
        (((a0 >> 4) & LOW4) | (((a2 >> 4) & TOP2) << 4)) as i32,
        (((a1 >> 4) & LOW4) | (((a2 >> 6) & TOP2) << 4)) as i32,
    );
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

/// Both formats keep 2-bit planes (`qs`, 64 bytes at `qs_at`); Q3_K adds a
/// third bit from `hmask` (32 bytes at offset 0) and signed scales, Q2_K has
/// 4-bit scales and mins. Integer sums are distributed over lanes and the
/// float steps ordered as in ggml's AVX2 code, so results are bit-identical.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q23_k<const THREE: bool, const T: usize>(
    nb: usize,
    w: &[u8],
    a: [&[u8]; T],
) -> [f32; T] {
    let (bytes, qs_at) = if THREE { (110, 32) } else { (84, 16) };
    debug_assert!(w.len() >= nb * bytes);
    debug_assert!(a.iter().all(|r| r.len() >= nb * A_BYTES));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    // SAFETY: `w` holds `nb` super-blocks and every `a[t]` `nb` Q8_K blocks
    // (the module's contract), which bounds every offset below; AVX2/FMA/F16C
    // are enabled on this fn.
    unsafe {
        let m2 = _mm256_set1_epi8(3);
        let one = _mm256_set1_epi8(1);
        let mut acc = [_mm256_setzero_ps(); T];
        for i in 0..nb {
            let pw = wp.add(i * bytes);
            let (scales, mins, dw, dminw) = if THREE {
                (
                    q3k_scales(pw.add(96)),
                    _mm_setzero_si128(),
                    f16_at(pw.add(108)),
                    0.0,
                )
            } else {
                let packed = load128(pw);
                let low = _mm_and_si128(packed, _mm_set1_epi8(0x0F));
                let high = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F));
                (low, high, f16_at(pw.add(80)), f16_at(pw.add(82)))
            };
            let mut hmask = if THREE {
                load256(pw)
            } else {
                _mm256_setzero_si256()
            };
            let mut sums = [_mm256_setzero_si256(); T];
            for h in 0..2 {
                let mut q = load256(pw.add(qs_at + 32 * h));
                for s in 0..4 {
                    let x = _mm256_and_si256(q, m2);
                    q = _mm256_srli_epi16(q, 2);
                    // Q3_K: 4 where the third bit is clear, subtracted product
                    // by product (ggml's per-lane sums, hence its exact
                    // rounding).
                    let minus = if THREE {
                        let clear = _mm256_andnot_si256(hmask, one);
                        hmask = _mm256_srli_epi16(hmask, 1);
                        _mm256_slli_epi16(clear, 2)
                    } else {
                        _mm256_setzero_si256()
                    };
                    let sc = run_scales(scales, 4 * h + s);
                    for t in 0..T {
                        let y = load256(ap[t].add(i * A_BYTES + A_QS + 128 * h + 32 * s));
                        let mut p = _mm256_maddubs_epi16(x, y);
                        if THREE {
                            p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(minus, y));
                        }
                        sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(p, sc));
                    }
                }
            }
            for t in 0..T {
                let pa = ap[t].add(i * A_BYTES);
                let da = f32_at(pa);
                if !THREE {
                    // Mins first, as ggml orders the two FMAs.
                    let m = scaled_bsums(_mm256_cvtepu8_epi16(mins), pa);
                    acc[t] = fma_i32(acc[t], -da * dminw, m);
                }
                acc[t] = fma_i32(acc[t], da * dw, sums[t]);
            }
        }
        let mut out = [0.0f32; T];
        for t in 0..T {
            out[t] = hsum(acc[t]);
        }
        out
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_xs<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    debug_assert!(w.len() >= nb * 136);
    debug_assert!(a.iter().all(|r| r.len() >= nb * A_BYTES));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    // SAFETY: `w` holds `nb` super-blocks and every `a[t]` `nb` Q8_K blocks
    // (the module's contract), which bounds every offset below; AVX2/FMA/F16C
    // are enabled on this fn, and `IQ4NL_VALUES` is 16 bytes.
    unsafe {
        let table = _mm256_broadcastsi128_si256(load128(IQ4NL_VALUES.as_ptr() as *const u8));
        let mut acc = [_mm256_setzero_ps(); T];
        for i in 0..nb {
            let pw = wp.add(i * 136);
            let dw = f16_at(pw);
            let scales_h = (pw.add(2) as *const u16).read_unaligned();
            let mut sums = [_mm256_setzero_si256(); T];
            for ib in 0..8 {
                let low = (*pw.add(4 + ib / 2) >> (4 * (ib % 2))) & 0x0F;
                let high = ((scales_h >> (2 * ib)) & 3) as u8;
                let ls = _mm256_set1_epi16((low | (high << 4)) as i16 - 32);
                let x = _mm256_shuffle_epi8(table, nibbles(pw.add(8 + 16 * ib)));
                let ax = _mm256_sign_epi8(x, x);
                for t in 0..T {
                    let y = load256(ap[t].add(i * A_BYTES + A_QS + 32 * ib));
                    let p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x));
                    sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(p, ls));
                }
            }
            for t in 0..T {
                let da = f32_at(ap[t].add(i * A_BYTES));
                acc[t] = fma_i32(acc[t], da * dw, sums[t]);
            }
        }
        let mut out = [0.0f32; T];
        for t in 0..T {
            out[t] = hsum(acc[t]);
        }
        out
    }
}
