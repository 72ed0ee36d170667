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
//! The same arithmetic also runs on Q4_0 rows in file order
//! ([`matmul_file_order`]): each pass loads block `b` of eight rows and
//! transposes their nibble words in registers into the interleaved lanes
//! (eight unpacks), so a mixture-of-experts model's experts, which stay
//! file pages read on demand, decode almost as fast as repacked matrices.
//!
//! Safety contract of the `unsafe fn`s: the CPU has AVX2, FMA and F16C and
//! the caller (`q4_0x8::matmul_rows_strided` or `tile::tile_with`) checked
//! every length.

use std::arch::x86_64::*;
use std::ops::Range;

use super::avx2_common::load256;
use super::avx2_legacy::{q8_0_side, SIDE_PER_BLOCK};
use super::q4_0x8::{GROUP_BYTES, ROWS};
use super::tile::OutRows;

const Q8_0_BLOCK: usize = 34;
const Q4_0_BLOCK: usize = 18;
/// Bytes of the next eight file-order rows a pass prefetches per block: at
/// least the 144 it reads, so the next group is in L1 when its pass starts
/// (eight interleaved row streams defeat the hardware prefetcher: 10 t/s
/// against 13.5 for the row-at-a-time kernel without this).
const PREFETCH_PER_BLOCK: usize = 192;
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
                let panel = Src {
                    base: w.as_ptr().add(g / ROWS * nb * GROUP_BYTES),
                    row_bytes: 0,
                };
                let dst = OutRows::new(out.add(g - rows.start), out_stride);
                tokens::<false>(nb, panel, acts, ab, &side, t0..t_end, dst);
            }
        }
    }
    SIDE.set(side);
}

/// [`matmul`] over Q4_0 rows in file order (`row_bytes` apart): the rows of
/// `rows` must be whole groups of eight; `side` holds [`q8_0_side`] of
/// every token of `acts`, and token `t`'s result for row `r` goes to
/// `out.at(t, r - rows.start)`.
///
/// # Safety
/// AVX2/FMA/F16C available; `w` holds the rows of `rows`, `acts` and `side`
/// `n_tokens` rows of `nb` blocks, and `out` room for `n_tokens` rows of
/// `rows.len()`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul_file_order(
    nb: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    side: &[f32],
    n_tokens: usize,
    out: OutRows,
) {
    debug_assert!(rows.len().is_multiple_of(ROWS));
    let row_bytes = nb * Q4_0_BLOCK;
    debug_assert!(rows.end * row_bytes <= w.len());
    debug_assert!(acts.len() >= n_tokens * nb * Q8_0_BLOCK);
    debug_assert!(side.len() >= n_tokens * nb * SIDE_PER_BLOCK);
    for g in (rows.start..rows.end).step_by(ROWS) {
        // SAFETY: rows `g..g + 8` lie in `w` and the output columns `g -
        // rows.start ..+ 8` in `out` for every token (this fn's contract);
        // AVX2/FMA/F16C are enabled on this fn.
        unsafe {
            let src = Src {
                base: w.as_ptr().add(g * row_bytes),
                row_bytes,
            };
            let dst = OutRows::new(out.at(0, g - rows.start), out.stride());
            tokens::<true>(nb, src, acts, nb * Q8_0_BLOCK, side, 0..n_tokens, dst);
        }
    }
}

/// Where a pass reads its eight rows: an interleaved panel at `base`
/// (`FILE` false), or file-order rows at `base + i * row_bytes`.
#[derive(Clone, Copy)]
struct Src {
    base: *const u8,
    row_bytes: usize,
}

/// One pass of eight rows over the tokens `ts`, four at a time; token `t`'s
/// eight results go to `dst.at(t, 0)`. `acts` holds the activation rows from
/// token 0 on, `side` the side rows from token `ts.start` on.
///
/// # Safety
/// As [`pass`], for every token of `ts`; `dst` has room for eight results
/// of each.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tokens<const FILE: bool>(
    nb: usize,
    src: Src,
    acts: &[u8],
    ab: usize,
    side: &[f32],
    ts: Range<usize>,
    dst: OutRows,
) {
    let per_token = nb * SIDE_PER_BLOCK;
    let mut t = ts.start;
    // SAFETY: tokens below `ts.end` have activation and side rows and
    // output room (this fn's contract); AVX2/FMA/F16C are enabled on this fn.
    unsafe {
        while t < ts.end {
            let a = |i: usize| acts.as_ptr().add((t + i) * ab);
            let s = |i: usize| side.as_ptr().add((t + i - ts.start) * per_token);
            let d = |i: usize| dst.at(t + i, 0);
            match ts.end - t {
                1 => store(pass::<1, FILE>(nb, src, [a(0)], [s(0)]), [d(0)]),
                2 => store(
                    pass::<2, FILE>(nb, src, [a(0), a(1)], [s(0), s(1)]),
                    [d(0), d(1)],
                ),
                3 => store(
                    pass::<3, FILE>(nb, src, [a(0), a(1), a(2)], [s(0), s(1), s(2)]),
                    [d(0), d(1), d(2)],
                ),
                _ => store(
                    pass::<4, FILE>(nb, src, [a(0), a(1), a(2), a(3)], [s(0), s(1), s(2), s(3)]),
                    [d(0), d(1), d(2), d(3)],
                ),
            }
            t += 4;
        }
    }
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

/// Block `b` of the eight rows of `src`: their scales, and the four 32-byte
/// chunks whose lane `i` holds row `i`'s nibble bytes `4c..4c + 4`.
///
/// # Safety
/// AVX2/F16C available; `src` holds `b + 1` blocks of eight rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group<const FILE: bool>(src: Src, b: usize) -> (__m256, [__m256i; 4]) {
    // SAFETY: block `b` of every row of `src` is readable (this fn's
    // contract); AVX2/F16C are enabled on this fn.
    unsafe {
        if !FILE {
            let p = src.base.add(b * GROUP_BYTES);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
            return (dw, std::array::from_fn(|c| load256(p.add(16 + 32 * c))));
        }
        let blk = |i: usize| src.base.add(i * src.row_bytes + b * Q4_0_BLOCK);
        let d = |i: usize| (blk(i) as *const i16).read_unaligned();
        let dw = _mm256_cvtph_ps(_mm_setr_epi16(
            d(0),
            d(1),
            d(2),
            d(3),
            d(4),
            d(5),
            d(6),
            d(7),
        ));
        // Rows i and i + 4 side by side, then a 4 × 4 transpose of 32-bit
        // words in each half: word c of rows 0..3 | 4..7.
        let q = |i: usize| {
            _mm256_loadu2_m128i(
                blk(i + 4).add(2) as *const __m128i,
                blk(i).add(2) as *const __m128i,
            )
        };
        let (q0, q1, q2, q3) = (q(0), q(1), q(2), q(3));
        let t0 = _mm256_unpacklo_epi32(q0, q1);
        let t1 = _mm256_unpackhi_epi32(q0, q1);
        let t2 = _mm256_unpacklo_epi32(q2, q3);
        let t3 = _mm256_unpackhi_epi32(q2, q3);
        (
            dw,
            [
                _mm256_unpacklo_epi64(t0, t2),
                _mm256_unpackhi_epi64(t0, t2),
                _mm256_unpacklo_epi64(t1, t3),
                _mm256_unpackhi_epi64(t1, t3),
            ],
        )
    }
}

/// Eight rows (`src`, `nb` blocks) against `T` tokens: lane `i` of result
/// `t` is row `i` · token `t`.
///
/// # Safety
/// AVX2/FMA/F16C available; `src` holds `nb` blocks of eight rows, every
/// `a[t]` `nb` Q8_0 blocks and every `side[t]` their side information.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<const T: usize, const FILE: bool>(
    nb: usize,
    src: Src,
    a: [*const u8; T],
    side: [*const f32; T],
) -> [__m256; T] {
    let low4 = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let eight = _mm256_set1_ps(8.0);
    let mut acc = [_mm256_setzero_ps(); T];
    // SAFETY: `b < nb` keeps every read inside the `nb` blocks of `src`
    // and of `a[t]` and `side[t]` (this fn's contract); AVX2/FMA/F16C are
    // enabled on this fn.
    unsafe {
        for b in 0..nb {
            if FILE {
                // The next eight rows follow these: one contiguous stream.
                let next = src
                    .base
                    .wrapping_add(ROWS * src.row_bytes + b * PREFETCH_PER_BLOCK);
                for line in (0..PREFETCH_PER_BLOCK).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line) as *const i8);
                }
            }
            let (dw, chunks) = group::<FILE>(src, b);
            let mut sums = [_mm256_setzero_si256(); T];
            for (c, raw) in chunks.into_iter().enumerate() {
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
