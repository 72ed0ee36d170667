//! AVX2 kernel for interleaved Q4_0 (see `q4_0x8`) against Q8_0 rows: eight
//! weight rows per pass, one to four tokens, for decode and prefill alike.
//!
//! Per 144-byte group (eight rows × one block) and token: eight broadcasts of
//! four activation quants, eight `maddubs` into i16 (sixteen products per
//! lane, at most 16 · 15 · 127 < 32768), one `madd`, one conversion and two
//! FMAs — about five instructions per (row, block) where a row-at-a-time
//! kernel needs twelve. Quants stay unsigned and the `-8` offset is applied
//! per block from the activation sums, as in `avx2_panel`.
//!
//! Safety contract of the `unsafe fn`s: the CPU has AVX2, FMA and F16C and
//! the caller (`q4_0x8::matmul_rows_strided`) checked every length.

use std::arch::x86_64::*;
use std::ops::Range;

use super::avx2_common::load256;
use super::avx2_legacy::{q8_0_side, SIDE_PER_BLOCK};
use super::q4_0x8::{GROUP_BYTES, ROWS};

const Q8_0_BLOCK: usize = 34;
/// Activation bytes one token chunk may span; see `tile::ACT_CHUNK_BYTES`.
const ACT_CHUNK_BYTES: usize = 256 * 1024;

thread_local! {
    static SIDE: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul(
    nb: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    n_tokens: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let ab = nb * Q8_0_BLOCK;
    let per_token = nb * SIDE_PER_BLOCK;
    let chunk = (ACT_CHUNK_BYTES / ab).max(1).next_multiple_of(4);
    let mut side = SIDE.take();
    side.resize(per_token * chunk.min(n_tokens), 0.0);
    for t0 in (0..n_tokens).step_by(chunk) {
        let t_end = (t0 + chunk).min(n_tokens);
        for t in t0..t_end {
            let s = &mut side[(t - t0) * per_token..(t - t0 + 1) * per_token];
            // SAFETY: `s` holds `nb * SIDE_PER_BLOCK` floats and the row `nb`
            // Q8_0 blocks; AVX2/FMA/F16C are enabled on this fn.
            unsafe { q8_0_side(nb, &acts[t * ab..(t + 1) * ab], s) };
        }
        // Row groups outside, tokens inside: a group's weights (a few KiB)
        // stay in L1 while the chunk's activations stream from L2.
        for g in (rows.start..rows.end).step_by(ROWS) {
            // SAFETY: the caller checked that `w` holds the row groups of
            // `rows`, `acts` `n_tokens` rows of `nb` blocks and `out` room for
            // `n_tokens` rows of `out_stride` (the module's contract); `side`
            // was filled for every token of the chunk. AVX2/FMA/F16C are
            // enabled on this fn.
            unsafe {
                let panel = w.as_ptr().add(g / ROWS * nb * GROUP_BYTES);
                let mut t = t0;
                while t < t_end {
                    let a = |i: usize| acts.as_ptr().add((t + i) * ab);
                    let s = |i: usize| side.as_ptr().add((t + i - t0) * per_token);
                    let dst = |i: usize| out.add((t + i) * out_stride + g - rows.start);
                    match t_end - t {
                        1 => store(pass::<1>(nb, panel, [a(0)], [s(0)]), [dst(0)]),
                        2 => store(
                            pass::<2>(nb, panel, [a(0), a(1)], [s(0), s(1)]),
                            [dst(0), dst(1)],
                        ),
                        3 => store(
                            pass::<3>(nb, panel, [a(0), a(1), a(2)], [s(0), s(1), s(2)]),
                            [dst(0), dst(1), dst(2)],
                        ),
                        _ => store(
                            pass::<4>(
                                nb,
                                panel,
                                [a(0), a(1), a(2), a(3)],
                                [s(0), s(1), s(2), s(3)],
                            ),
                            [dst(0), dst(1), dst(2), dst(3)],
                        ),
                    }
                    t += 4;
                }
            }
        }
    }
    SIDE.set(side);
}

/// Stores one vector at each of `dst`.
///
/// # Safety
/// AVX available; every `dst[t]` is valid for eight writes.
#[inline(always)]
unsafe fn store<const T: usize>(v: [__m256; T], dst: [*mut f32; T]) {
    for (v, d) in v.into_iter().zip(dst) {
        // SAFETY: `d` is valid for eight writes (this fn's contract).
        unsafe { _mm256_storeu_ps(d, v) };
    }
}

/// One interleaved panel (eight rows, `nb` groups) against `T` tokens: lane
/// `i` of result `t` is row `i` · token `t`.
///
/// # Safety
/// AVX2/FMA/F16C available; `panel` holds `nb` groups, every `a[t]` `nb`
/// Q8_0 blocks and every `side[t]` their side information.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<const T: usize>(
    nb: usize,
    panel: *const u8,
    a: [*const u8; T],
    side: [*const f32; T],
) -> [__m256; T] {
    let low4 = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let eight = _mm256_set1_ps(8.0);
    let mut acc = [_mm256_setzero_ps(); T];
    // SAFETY: `b < nb` keeps every read inside the `nb` groups of `panel`
    // and blocks of `a[t]` and `side[t]` (this fn's contract); AVX2/FMA/F16C
    // are enabled on this fn.
    unsafe {
        for b in 0..nb {
            let p = panel.add(b * GROUP_BYTES);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
            let mut sums = [_mm256_setzero_si256(); T];
            for c in 0..4 {
                let raw = load256(p.add(16 + 32 * c));
                let lo = _mm256_and_si256(raw, low4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
                for (t, sum) in sums.iter_mut().enumerate() {
                    let y = a[t].add(b * Q8_0_BLOCK + 2 + 4 * c);
                    let y_lo = _mm256_set1_epi32((y as *const i32).read_unaligned());
                    let y_hi = _mm256_set1_epi32((y.add(16) as *const i32).read_unaligned());
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, y_lo),
                        _mm256_maddubs_epi16(hi, y_hi),
                    );
                    *sum = _mm256_add_epi16(*sum, p);
                }
            }
            for (t, sum) in sums.into_iter().enumerate() {
                let s = side[t].add(b * SIDE_PER_BLOCK);
                let products = _mm256_cvtepi32_ps(_mm256_madd_epi16(sum, ones));
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(*s)), products, acc[t]);
                // The -8 offset: d_w · 8 · d_a Σy.
                let offset = _mm256_mul_ps(dw, _mm256_set1_ps(*s.add(1)));
                acc[t] = _mm256_fnmadd_ps(offset, eight, acc[t]);
            }
        }
    }
    acc
}
