//! Prefill's matrix × matrix kernel for Q4_K weights: eight rows at a time,
//! the K-quant counterpart of `avx2_panel`.
//!
//! Per call, eight weight rows are copied into a per-thread panel: nibbles
//! with lane `i` of a vector holding four consecutive quants of row `i`,
//! each 32-element sub-block's 6-bit scale of the eight rows as a vector of
//! i16 pairs (so one `madd` both widens and scales a sub-block's sums), the
//! mins as i16 pairs of consecutive sub-blocks, and the super-block scales
//! as f32. A token then costs per super-block and eight rows: 64 broadcasts
//! and `maddubs` (sixteen products per i16 lane, at most 16 · 15 · 127),
//! eight scaling `madd`s, four `madd`s for the mins and two FMAs. Integer
//! sums are exact, so only the float order differs from ggml's.
//!
//! Safety contract of the `unsafe fn`s: the CPU has AVX2, FMA and F16C and
//! the caller checked every length.

use std::arch::x86_64::*;
use std::ops::Range;

use rocmforge_core::quant::unpack_k_scales_mins;

use super::avx2_common::load256;
use super::avx2_panel::transpose_u32;
use super::tile::OutRows;

const ROWS: usize = 8;
const PASS_TOKENS: usize = 4;
/// Q4_K super-block: d, dmin (f16), 12 bytes of scales, 128 of nibbles.
const W_BYTES: usize = 144;
/// Q8_K: d (f32), 256 quants, 16 i16 sums of 16.
const A_BYTES: usize = 292;
const A_QS: usize = 4;
const A_BSUMS: usize = 260;

/// One super-block of a packed panel.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct PackedBlock {
    /// `nibbles[p * 8 + c]`: lane `i` holds bytes `32p + 4c ..+ 4` of row
    /// `i`'s quants: low nibbles are sub-block `2p`, high ones `2p + 1`.
    nibbles: [__m256i; 32],
    /// Per sub-block, the eight rows' scales as (s, s) i16 pairs.
    scales: [__m256i; 8],
    /// Per sub-block pair `p`, the rows' mins as (m_2p, m_2p+1) i16 pairs.
    mins: [__m256i; 4],
    d: [f32; ROWS],
    dmin: [f32; ROWS],
}

/// Per token and super-block: the activation scale and, per sub-block pair,
/// the two sub-block sums as an i16 pair (|Σ| ≤ 32 · 127 fits).
#[derive(Clone, Copy, Default)]
struct TokenSide {
    d: f32,
    pair_sums: [i32; 4],
}

thread_local! {
    static BUFFERS: std::cell::Cell<(Vec<PackedBlock>, Vec<TokenSide>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// `out` entry (`t`, `r - rows.start`) = Q4_K row `r` · Q8_K row `t`, for
/// `t < n`; `acts` holds the `n` rows back to back (`nb` blocks each).
///
/// # Safety
/// AVX2/FMA/F16C available; `w` holds rows `rows` of `nb` super-blocks,
/// `acts` `n` rows, and `out` has room for `n` rows of `rows.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_times_tokens(
    nb: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    n: usize,
    out: OutRows,
) {
    let wb = nb * W_BYTES;
    let ab = nb * A_BYTES;
    debug_assert!(n > 0 && rows.end * wb <= w.len() && n * ab <= acts.len());
    let (mut panel, mut side) = BUFFERS.take();
    panel.resize(nb, std::mem::zeroed());
    side.resize(n * nb, TokenSide::default());
    for (t, s) in side.chunks_exact_mut(nb).enumerate() {
        token_side(&acts[t * ab..(t + 1) * ab], s);
    }
    let mut r0 = rows.start;
    while r0 < rows.end {
        let live = (rows.end - r0).min(ROWS);
        pack(nb, w.as_ptr().add(r0 * wb), wb, live, &mut panel);
        let mut t = 0;
        while t < n {
            // A short last pass repeats its last token; the extra results
            // are dropped.
            let pick = |i: usize| (t + i).min(n - 1);
            let a = [0, 1, 2, 3].map(|i| acts.as_ptr().add(pick(i) * ab));
            let s = [0, 1, 2, 3].map(|i| side.as_ptr().add(pick(i) * nb));
            let res = pass(&panel, a, s);
            for (i, v) in res.iter().enumerate().take(n - t) {
                let dst = out.at(t + i, r0 - rows.start);
                if live == ROWS {
                    _mm256_storeu_ps(dst, *v);
                } else {
                    let mut lanes = [0.0f32; ROWS];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), *v);
                    std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, live);
                }
            }
            t += PASS_TOKENS;
        }
        r0 += live;
    }
    BUFFERS.set((panel, side));
}

fn token_side(a: &[u8], side: &mut [TokenSide]) {
    for (blk, s) in a.chunks_exact(A_BYTES).zip(side) {
        s.d = f32::from_le_bytes(blk[..4].try_into().expect("4 bytes"));
        let bsum = |k: usize| i16::from_le_bytes([blk[A_BSUMS + 2 * k], blk[A_BSUMS + 2 * k + 1]]);
        for p in 0..4 {
            let lo = bsum(4 * p) as i32 + bsum(4 * p + 1) as i32;
            let hi = bsum(4 * p + 2) as i32 + bsum(4 * p + 3) as i32;
            s.pair_sums[p] = (lo & 0xFFFF) | (hi << 16);
        }
    }
}

/// Copies `live` (at most eight) rows of Q4_K super-blocks into `panel`;
/// rows past `live` are zero.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack(nb: usize, w: *const u8, wb: usize, live: usize, panel: &mut [PackedBlock]) {
    for (b, pb) in panel.iter_mut().enumerate().take(nb) {
        let mut sc = [[0i16; 16]; 8];
        let mut mn = [[0i16; 16]; 4];
        let mut d = [0.0f32; ROWS];
        let mut dmin = [0.0f32; ROWS];
        for i in 0..live {
            let p = w.add(i * wb + b * W_BYTES);
            let bits = |o: usize| half::f16::from_bits((p.add(o) as *const u16).read_unaligned());
            d[i] = bits(0).to_f32();
            dmin[i] = bits(2).to_f32();
            let packed: &[u8; 12] = &*(p.add(4) as *const [u8; 12]);
            let (s, m) = unpack_k_scales_mins(packed);
            for j in 0..8 {
                sc[j][2 * i] = s[j] as i16;
                sc[j][2 * i + 1] = s[j] as i16;
            }
            for q in 0..4 {
                mn[q][2 * i] = m[2 * q] as i16;
                mn[q][2 * i + 1] = m[2 * q + 1] as i16;
            }
        }
        for c in 0..4 {
            let rows8 = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| {
                if i < live {
                    load256(w.add(i * wb + b * W_BYTES + 16 + 32 * c))
                } else {
                    _mm256_setzero_si256()
                }
            });
            pb.nibbles[c * 8..(c + 1) * 8].copy_from_slice(&transpose_u32(rows8));
        }
        pb.scales = sc.map(|v| _mm256_loadu_si256(v.as_ptr() as *const __m256i));
        pb.mins = mn.map(|v| _mm256_loadu_si256(v.as_ptr() as *const __m256i));
        pb.d = d;
        pb.dmin = dmin;
    }
}

/// One panel against four tokens: lane `i` of result `t` is row `i` · token
/// `t`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass(
    panel: &[PackedBlock],
    a: [*const u8; PASS_TOKENS],
    side: [*const TokenSide; PASS_TOKENS],
) -> [__m256; PASS_TOKENS] {
    let low4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); PASS_TOKENS];
    for (b, pb) in panel.iter().enumerate() {
        let mut sums = [_mm256_setzero_si256(); PASS_TOKENS];
        for j in 0..8 {
            let (p, high) = (j / 2, j % 2 == 1);
            let mut s16 = [_mm256_setzero_si256(); PASS_TOKENS];
            for c in 0..8 {
                let raw = pb.nibbles[p * 8 + c];
                let x = if high {
                    _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4)
                } else {
                    _mm256_and_si256(raw, low4)
                };
                for (t, s) in s16.iter_mut().enumerate() {
                    let y = a[t].add(b * A_BYTES + A_QS + 32 * j + 4 * c);
                    let y = _mm256_set1_epi32((y as *const i32).read_unaligned());
                    *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(x, y));
                }
            }
            for (sum, s) in sums.iter_mut().zip(s16) {
                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(s, pb.scales[j]));
            }
        }
        let d = _mm256_loadu_ps(pb.d.as_ptr());
        let dmin = _mm256_loadu_ps(pb.dmin.as_ptr());
        for t in 0..PASS_TOKENS {
            let ts = &*side[t].add(b);
            let mut m = _mm256_setzero_si256();
            for p in 0..4 {
                let pair = _mm256_set1_epi32(ts.pair_sums[p]);
                m = _mm256_add_epi32(m, _mm256_madd_epi16(pb.mins[p], pair));
            }
            let da = _mm256_set1_ps(ts.d);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(sums[t]), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(m), acc[t]);
        }
    }
    acc
}
