//! Prefill's matrix × matrix kernel for the formats dotted with Q8_0
//! activations (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4): eight weight rows at a
//! time.
//!
//! The row kernels reduce every (row, token) pair on its own: per 32-element
//! block they spend a `madd`, a conversion and a scale multiply-add on 32
//! products, which caps them far below the `maddubs` throughput. Here eight
//! weight rows are first copied into a *packed panel* in which lane `i` of a
//! vector holds four consecutive quants of row `i`; one broadcast of four
//! activation quants then feeds all eight rows, and one vector FMA applies
//! eight rows' block scales at once. Where the quants are small (Q4_0, Q5_0, MXFP4)
//! all 32 products of a block add up in i16 before a single `madd`. A panel is packed once per call and reused by
//! every token, so the copy costs little once a few tokens share it; decode
//! keeps the row kernels, which read the weights in place.
//!
//! Q4_0's quants stay unsigned (0..15) and its `-8` offset is applied per
//! block from the activation sums of [`super::avx2_legacy::q8_0_side`], so
//! its i16 sums stay below 16 · 15 · 127 < 32768; Q5_0 (|q| ≤ 16) and MXFP4
//! (|q| ≤ 12) use the sign trick and stay below 16 · 16 · 127. The integer block sums are
//! exact, but summing blocks per row rather than per 4-element lane changes
//! the float rounding from ggml's `vec_dot` by an ulp or so of partial sums
//! (the reference tests bound the effect on logits).
//!
//! Safety contract of the `unsafe fn`s: the CPU has AVX2, FMA and F16C, and
//! the pointers cover what the parameters describe.

use std::arch::x86_64::*;
use std::ops::Range;

use super::avx2_panel_kquant::store_lanes;
use super::tile::OutRows;

use super::avx2_legacy::{
    block_bytes, weight_block, IQ4_NL, MXFP4, Q4_0, Q5_0, Q8_0, SIDE_PER_BLOCK,
};

/// Weight rows in one panel: one per 32-bit lane of a vector.
pub(super) const PANEL_ROWS: usize = 8;
/// Tokens one pass over a panel serves: four i16 and four f32 accumulators
/// plus the shared weights and constants fill the sixteen vector registers.
const PASS_TOKENS: usize = 4;
/// Packed bytes of one block of a panel: eight steps of eight lanes × four
/// quants.
const PACKED_BLOCK: usize = 256;
const Q8_0_BLOCK: usize = 34;

/// Whether `kind`'s 32 products per lane can add up in i16 (see the module
/// comment).
const fn small_quants(kind: u8) -> bool {
    kind == Q4_0 || kind == Q5_0 || kind == MXFP4
}

thread_local! {
    static PANEL: std::cell::Cell<(Vec<__m256i>, Vec<f32>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// The panel kernel for weight format `kind` (an `avx2_legacy` kind), if
/// there is one.
pub(super) fn kind_of(ty: rocmforge_core::quant::QuantType) -> Option<u8> {
    use rocmforge_core::quant::QuantType as Q;
    match ty {
        Q::Q4_0 => Some(Q4_0),
        Q::Q5_0 => Some(Q5_0),
        Q::Q8_0 => Some(Q8_0),
        Q::IQ4NL => Some(IQ4_NL),
        Q::MXFP4 => Some(MXFP4),
        _ => None,
    }
}

/// Runs [`rows_times_tokens`] for `kind` (from [`kind_of`]).
///
/// # Safety
/// As for [`rows_times_tokens`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run(
    kind: u8,
    nb: usize,
    wb: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    ab: usize,
    side: &[f32],
    n: usize,
    out: OutRows,
) {
    let f = match kind {
        Q4_0 => rows_times_tokens::<Q4_0>,
        Q5_0 => rows_times_tokens::<Q5_0>,
        IQ4_NL => rows_times_tokens::<IQ4_NL>,
        MXFP4 => rows_times_tokens::<MXFP4>,
        _ => rows_times_tokens::<Q8_0>,
    };
    // SAFETY: this fn's contract is `rows_times_tokens`'s.
    unsafe { f(nb, wb, w, rows, acts, ab, side, n, out) }
}

/// `out` entry (`t`, `r - rows.start`) = weight row `r` · Q8_0 row `t`,
/// for `t < n`; `acts` holds the `n` rows back to back (`ab` bytes each) and
/// `side` their [`super::avx2_legacy::q8_0_side`] (`nb * SIDE_PER_BLOCK`
/// floats each).
///
/// # Safety
/// AVX2/FMA/F16C available; `w` holds rows `rows` of `wb` bytes (`nb`
/// blocks of `KIND`), `acts` and `side` are at least as long as described
/// and `out` has room for `n` rows of `rows.len()`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_times_tokens<const KIND: u8>(
    nb: usize,
    wb: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    ab: usize,
    side: &[f32],
    n: usize,
    out: OutRows,
) {
    debug_assert!(n > 0 && rows.end * wb <= w.len() && n * ab <= acts.len());
    debug_assert!(side.len() >= n * nb * SIDE_PER_BLOCK);
    let (mut quants, mut scales) = PANEL.take();
    quants.resize(nb * PACKED_BLOCK / 32, _mm256_setzero_si256());
    scales.resize(nb * PANEL_ROWS, 0.0);
    let mut r0 = rows.start;
    // SAFETY: rows `rows` of `w`, the `n` rows of `acts` and `side` and the
    // `n` rows of `out` are as large as this fn's contract says, so every
    // offset and store below stays in them; AVX2/FMA/F16C are enabled on this
    // fn.
    unsafe {
        while r0 < rows.end {
            let live = (rows.end - r0).min(PANEL_ROWS);
            pack::<KIND>(
                nb,
                w.as_ptr().add(r0 * wb),
                wb,
                live,
                &mut quants,
                &mut scales,
            );
            let mut t = 0;
            while t < n {
                // A short last pass repeats its last token; the extra results
                // are dropped.
                let pick = |i: usize| (t + i).min(n - 1);
                let a = [0, 1, 2, 3].map(|i| acts.as_ptr().add(pick(i) * ab));
                let s = [0, 1, 2, 3].map(|i| side.as_ptr().add(pick(i) * nb * SIDE_PER_BLOCK));
                let res = panel_pass::<KIND>(nb, &quants, &scales, a, s);
                for (i, v) in res.iter().enumerate().take(n - t) {
                    store_lanes(*v, out.at(t + i, r0 - rows.start), live);
                }
                t += PASS_TOKENS;
            }
            r0 += live;
        }
    }
    PANEL.set((quants, scales));
}

/// Copies `live` (at most eight) rows of `KIND` blocks into panel form: for
/// block `b` and step `s`, `quants[b * 8 + s]` holds quants `4s..4s + 4` of
/// each row in its lane; `scales[b * 8 + i]` is row `i`'s block scale. Rows
/// past `live` are zero.
///
/// # Safety
/// AVX2/FMA/F16C available; `w` holds `live` rows `wb` bytes apart of `nb`
/// `KIND` blocks each, and `quants` and `scales` hold `nb * PANEL_ROWS`
/// entries.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack<const KIND: u8>(
    nb: usize,
    w: *const u8,
    wb: usize,
    live: usize,
    quants: &mut [__m256i],
    scales: &mut [f32],
) {
    // SAFETY: `i < live` and `b < nb` keep every block read inside the rows
    // this fn's contract covers; AVX2/FMA/F16C are enabled on this fn.
    unsafe {
        for b in 0..nb {
            let mut q = [_mm256_setzero_si256(); PANEL_ROWS];
            let mut d = [0.0f32; PANEL_ROWS];
            for i in 0..live {
                (d[i], q[i]) = weight_block::<KIND>(w.add(i * wb + b * block_bytes(KIND)));
            }
            let steps = transpose_u32(q);
            quants[b * PANEL_ROWS..(b + 1) * PANEL_ROWS].copy_from_slice(&steps);
            scales[b * PANEL_ROWS..(b + 1) * PANEL_ROWS].copy_from_slice(&d);
        }
    }
}

/// Transposes an 8 × 8 matrix of 32-bit elements held one row per vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn transpose_u32(r: [__m256i; 8]) -> [__m256i; 8] {
    // Pairs of rows interleaved, then pairs of pairs, then 128-bit halves
    // swapped into place.
    let t = [
        _mm256_unpacklo_epi32(r[0], r[1]),
        _mm256_unpackhi_epi32(r[0], r[1]),
        _mm256_unpacklo_epi32(r[2], r[3]),
        _mm256_unpackhi_epi32(r[2], r[3]),
        _mm256_unpacklo_epi32(r[4], r[5]),
        _mm256_unpackhi_epi32(r[4], r[5]),
        _mm256_unpacklo_epi32(r[6], r[7]),
        _mm256_unpackhi_epi32(r[6], r[7]),
    ];
    let u = [
        _mm256_unpacklo_epi64(t[0], t[2]),
        _mm256_unpackhi_epi64(t[0], t[2]),
        _mm256_unpacklo_epi64(t[1], t[3]),
        _mm256_unpackhi_epi64(t[1], t[3]),
        _mm256_unpacklo_epi64(t[4], t[6]),
        _mm256_unpackhi_epi64(t[4], t[6]),
        _mm256_unpacklo_epi64(t[5], t[7]),
        _mm256_unpackhi_epi64(t[5], t[7]),
    ];
    [
        _mm256_permute2x128_si256(u[0], u[4], 0x20),
        _mm256_permute2x128_si256(u[1], u[5], 0x20),
        _mm256_permute2x128_si256(u[2], u[6], 0x20),
        _mm256_permute2x128_si256(u[3], u[7], 0x20),
        _mm256_permute2x128_si256(u[0], u[4], 0x31),
        _mm256_permute2x128_si256(u[1], u[5], 0x31),
        _mm256_permute2x128_si256(u[2], u[6], 0x31),
        _mm256_permute2x128_si256(u[3], u[7], 0x31),
    ]
}

/// One packed panel against four tokens: lane `i` of result `t` is row `i` ·
/// token `t`.
///
/// # Safety
/// AVX2/FMA/F16C available; `quants` and `scales` hold `nb` packed blocks,
/// every `a[t]` `nb` Q8_0 blocks and every `side[t]` their side information.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_pass<const KIND: u8>(
    nb: usize,
    quants: &[__m256i],
    scales: &[f32],
    a: [*const u8; PASS_TOKENS],
    side: [*const f32; PASS_TOKENS],
) -> [__m256; PASS_TOKENS] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); PASS_TOKENS];
    let (qp, sp) = (quants.as_ptr(), scales.as_ptr());
    // SAFETY: `b < nb` and `s < 8` keep every read inside the `nb` blocks of
    // `quants`, `scales`, `a[t]` and `side[t]` (this fn's contract);
    // AVX2/FMA/F16C are enabled on this fn.
    unsafe {
        for b in 0..nb {
            // i16 lanes for small quants, i32 lanes otherwise.
            let mut sums = [_mm256_setzero_si256(); PASS_TOKENS];
            let q = qp.add(b * PANEL_ROWS);
            let y_at = |t: usize, s: usize| {
                let p = a[t].add(b * Q8_0_BLOCK + 2 + 4 * s);
                _mm256_set1_epi32((p as *const i32).read_unaligned())
            };
            for s in 0..8 {
                let x = *q.add(s);
                let ax = _mm256_sign_epi8(x, x);
                for (t, sum) in sums.iter_mut().enumerate() {
                    let y = y_at(t, s);
                    let p = if KIND == Q4_0 {
                        _mm256_maddubs_epi16(x, y)
                    } else {
                        _mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x))
                    };
                    *sum = if small_quants(KIND) {
                        _mm256_add_epi16(*sum, p)
                    } else {
                        _mm256_add_epi32(*sum, _mm256_madd_epi16(p, ones))
                    };
                }
            }
            let dw = _mm256_loadu_ps(sp.add(b * PANEL_ROWS));
            let dw8 = _mm256_mul_ps(dw, _mm256_set1_ps(8.0));
            for (t, sum) in sums.into_iter().enumerate() {
                let s = side[t].add(b * SIDE_PER_BLOCK);
                let sum = if small_quants(KIND) {
                    _mm256_madd_epi16(sum, ones)
                } else {
                    sum
                };
                let scale = _mm256_mul_ps(dw, _mm256_set1_ps(*s));
                acc[t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sum), acc[t]);
                if KIND == Q4_0 {
                    // The -8 offset: d_w · 8 · d_a Σy.
                    acc[t] = _mm256_fnmadd_ps(dw8, _mm256_set1_ps(*s.add(1)), acc[t]);
                }
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_moves_element_ij_to_ji() {
        if !super::super::detected_isa().eq(&super::super::Isa::Avx2) {
            return;
        }
        let mut m = [[0u32; 8]; 8];
        for (i, row) in m.iter_mut().enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                *v = (i * 8 + j) as u32;
            }
        }
        // SAFETY: AVX2 detected above.
        let out = unsafe {
            let r = m.map(|row| _mm256_loadu_si256(row.as_ptr() as *const __m256i));
            transpose_u32(r).map(|v| {
                let mut row = [0u32; 8];
                _mm256_storeu_si256(row.as_mut_ptr() as *mut __m256i, v);
                row
            })
        };
        for (i, row) in out.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                assert_eq!(v, (j * 8 + i) as u32, "element ({i}, {j})");
            }
        }
    }
}
