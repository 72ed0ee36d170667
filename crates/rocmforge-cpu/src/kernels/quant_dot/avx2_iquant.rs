//! AVX2 kernels for the lattice i-quants and the ternary types against
//! Q8_K rows.
//!
//! Per 32 elements a kernel builds the weights' magnitudes from the lattice
//! tables (four 64-bit IQ2/IQ1 entries or eight 32-bit IQ3 entries, as
//! ggml's AVX2 code does), moves the weight signs onto the activations
//! (`sign_epi8`), and sums `maddubs` products per 4-element lane weighted by
//! the group's odd scale `2s + 1`. IQ1's ±1/8 shift is folded into the
//! weights (`8 * coordinate ± 1`, exact in a byte) and removed with the
//! final factor; the ternary types subtract the activation sums (`bsums`)
//! for their `- 1` offset. Integer sums are exact, so results differ from
//! the scalar kernels only in float summation order.
//!
//! The register-only helpers are safe `#[target_feature]` functions (only
//! callable where AVX2 is enabled). Safety contract of every `pub(super)`
//! kernel here: the CPU has AVX2, FMA
//! and F16C, `w` holds at least `nb` weight super-blocks and every `a[t]` at
//! least `nb` Q8_K blocks (the dispatcher checks both).

use std::arch::x86_64::*;

use rocmforge_core::quant::iq_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};

use super::avx2_common::*;

const A_BYTES: usize = 292;
const A_QS: usize = 4;
const A_BSUMS: usize = 260;

/// ±1 bytes: -1 in byte `i` where bit `i` of `bits` is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sign_bytes(bits: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_setr_epi64x(
            0x0000_0000_0000_0000,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
    _mm256_or_si256(negative, _mm256_set1_epi8(1))
}

/// The 32 sign bits of four 7-bit fields at bits `7k` of `aux` (eighth bit
/// of each from parity, `KSIGNS_IQ2XS`).
#[inline(always)]
fn signs_of_fields(aux: u32) -> u32 {
    let sign = |k: u32| KSIGNS_IQ2XS[((aux >> (7 * k)) & 127) as usize] as u32;
    sign(0) | sign(1) << 8 | sign(2) << 16 | sign(3) << 24
}

/// Four IQ2/IQ1 lattice entries as one vector (entry `k` in bytes
/// 8k..8k+8).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn grid4(g: [u64; 4]) -> __m256i {
    _mm256_set_epi64x(g[3] as i64, g[2] as i64, g[1] as i64, g[0] as i64)
}

/// Eight IQ3 lattice entries as one vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn grid8(g: [u32; 8]) -> __m256i {
    _mm256_setr_epi32(
        g[0] as i32,
        g[1] as i32,
        g[2] as i32,
        g[3] as i32,
        g[4] as i32,
        g[5] as i32,
        g[6] as i32,
        g[7] as i32,
    )
}

/// i16 scale lanes: `lo` for elements 0..16 of a 32-element run, `hi` for
/// 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales2(lo: i32, hi: i32) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16))
}

/// What one 32-element run of a super-block contributes: unsigned weight
/// magnitudes, ±1 signs, i16 scale lanes.
struct Run {
    mag: __m256i,
    signs: __m256i,
    scales: __m256i,
}

/// The shared loop: `run(pw, r)` describes run `r` of the super-block at
/// `pw`, `d(pw)` its scale; returns `factor * Σ blocks d_w d_a Σ runs`.
///
/// # Safety
/// The module's contract, with `bytes` per weight super-block and `run` and
/// `d` reading only within the super-block they are given.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn over_runs<const T: usize>(
    nb: usize,
    bytes: usize,
    w: &[u8],
    a: [&[u8]; T],
    factor: f32,
    d: impl Fn(*const u8) -> f32,
    run: impl Fn(*const u8, usize) -> Run,
) -> [f32; T] {
    debug_assert!(w.len() >= nb * bytes);
    debug_assert!(a.iter().all(|r| r.len() >= nb * A_BYTES));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    // SAFETY: `w` holds `nb` super-blocks of `bytes` and every `a[t]` `nb`
    // Q8_K blocks (this fn's contract), which bounds every offset below;
    // AVX2/FMA/F16C are enabled on this fn.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); T];
        for i in 0..nb {
            let pw = wp.add(i * bytes);
            let mut sums = [_mm256_setzero_si256(); T];
            for r in 0..8 {
                let Run { mag, signs, scales } = run(pw, r);
                for t in 0..T {
                    let y = load256(ap[t].add(i * A_BYTES + A_QS + 32 * r));
                    let p = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(y, signs));
                    sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(p, scales));
                }
            }
            let dw = d(pw);
            for t in 0..T {
                acc[t] = fma_i32(acc[t], dw * f32_at(ap[t].add(i * A_BYTES)), sums[t]);
            }
        }
        let mut out = [0.0f32; T];
        for t in 0..T {
            out[t] = factor * hsum(acc[t]);
        }
        out
    }
}

/// The little-endian u32 at `p`.
///
/// # Safety
/// Four readable bytes at `p`.
#[inline(always)]
unsafe fn u32_at(p: *const u8) -> u32 {
    // SAFETY: the caller guarantees four readable bytes.
    unsafe { (p as *const u32).read_unaligned() }
}

/// The little-endian u16 at `p`.
///
/// # Safety
/// Two readable bytes at `p`.
#[inline(always)]
unsafe fn u16_at(p: *const u8) -> u16 {
    // SAFETY: the caller guarantees two readable bytes.
    unsafe { (p as *const u16).read_unaligned() }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq2_xxs<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    // SAFETY: the module's contract; runs read bytes 2..66 of a block.
    unsafe {
        over_runs(
            nb,
            66,
            w,
            a,
            0.125,
            |pw| f16_at(pw),
            |pw, r| {
                let idx = u32_at(pw.add(2 + 8 * r));
                let aux = u32_at(pw.add(6 + 8 * r));
                let g = std::array::from_fn(|k| IQ2XXS_GRID[(idx >> (8 * k)) as u8 as usize]);
                let ls = 2 * (aux >> 28) as i32 + 1;
                Run {
                    mag: grid4(g),
                    signs: sign_bytes(signs_of_fields(aux)),
                    scales: _mm256_set1_epi16(ls as i16),
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq2_xs<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    // SAFETY: the module's contract; runs read bytes 2..74 of a block.
    unsafe {
        over_runs(
            nb,
            74,
            w,
            a,
            0.125,
            |pw| f16_at(pw),
            |pw, r| {
                let q: [u16; 4] = std::array::from_fn(|k| u16_at(pw.add(2 + 8 * r + 2 * k)));
                let g = std::array::from_fn(|k| IQ2XS_GRID[(q[k] & 511) as usize]);
                let sign = |k: usize| KSIGNS_IQ2XS[(q[k] >> 9) as usize] as u32;
                let bits = sign(0) | sign(1) << 8 | sign(2) << 16 | sign(3) << 24;
                let sc = *pw.add(66 + r);
                Run {
                    mag: grid4(g),
                    signs: sign_bytes(bits),
                    scales: scales2(2 * (sc & 0xF) as i32 + 1, 2 * (sc >> 4) as i32 + 1),
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq2_s<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    // SAFETY: the module's contract; runs read bytes 2..82 of a block.
    unsafe {
        over_runs(
            nb,
            82,
            w,
            a,
            0.125,
            |pw| f16_at(pw),
            |pw, r| {
                let qh = *pw.add(66 + r) as usize;
                let g = std::array::from_fn(|k| {
                    let index = *pw.add(2 + 4 * r + k) as usize | ((qh >> (2 * k)) & 3) << 8;
                    IQ2S_GRID[index]
                });
                let sc = *pw.add(74 + r);
                Run {
                    mag: grid4(g),
                    signs: sign_bytes(u32_at(pw.add(34 + 4 * r))),
                    scales: scales2(2 * (sc & 0xF) as i32 + 1, 2 * (sc >> 4) as i32 + 1),
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq3_xxs<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    // SAFETY: the module's contract; runs read bytes 2..98 of a block.
    unsafe {
        over_runs(
            nb,
            98,
            w,
            a,
            0.25,
            |pw| f16_at(pw),
            |pw, r| {
                let g = std::array::from_fn(|k| IQ3XXS_GRID[*pw.add(2 + 8 * r + k) as usize]);
                let aux = u32_at(pw.add(66 + 4 * r));
                Run {
                    mag: grid8(g),
                    signs: sign_bytes(signs_of_fields(aux)),
                    scales: _mm256_set1_epi16((2 * (aux >> 28) + 1) as i16),
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq3_s<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    // SAFETY: the module's contract; runs read bytes 2..110 of a block.
    unsafe {
        over_runs(
            nb,
            110,
            w,
            a,
            1.0,
            |pw| f16_at(pw),
            |pw, r| {
                let qh = *pw.add(66 + r) as usize;
                let g = std::array::from_fn(|k| {
                    IQ3S_GRID[*pw.add(2 + 8 * r + k) as usize | ((qh >> k) & 1) << 8]
                });
                let s = (*pw.add(106 + r / 2) >> (4 * (r % 2))) & 0xF;
                Run {
                    mag: grid8(g),
                    signs: sign_bytes(u32_at(pw.add(74 + 4 * r))),
                    scales: _mm256_set1_epi16(2 * s as i16 + 1),
                }
            },
        )
    }
}

/// `8 * coordinate + shift` for four IQ1 lattice entries, `shift[k]` (±1)
/// for entry `k`: the value times 8, exact in a signed byte.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn iq1_values(index: [usize; 4], shift: [i8; 4]) -> (__m256i, __m256i) {
    let g = grid4(index.map(|i| IQ1S_GRID[i]));
    let shifts = _mm256_setr_epi64x(
        i64::from_ne_bytes([shift[0] as u8; 8]),
        i64::from_ne_bytes([shift[1] as u8; 8]),
        i64::from_ne_bytes([shift[2] as u8; 8]),
        i64::from_ne_bytes([shift[3] as u8; 8]),
    );
    // 8g + s: coordinates -1, 0, 1 give -8 ± 1, ±1, 8 ± 1. The shift runs
    // on 16-bit lanes and carries each low byte's top bits into its
    // neighbour; 8g has its low three bits clear, so masking them drops
    // exactly the carried-in bits.
    let eight_g = _mm256_and_si256(_mm256_slli_epi16(g, 3), _mm256_set1_epi8(-8));
    let mag_sign = _mm256_add_epi8(eight_g, shifts);
    (_mm256_abs_epi8(mag_sign), mag_sign)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq1_s<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    // SAFETY: the module's contract; runs read bytes 2..50 of a block.
    unsafe {
        over_runs(
            nb,
            50,
            w,
            a,
            0.125,
            |pw| f16_at(pw),
            |pw, r| {
                let qh = u16_at(pw.add(34 + 2 * r)) as usize;
                let index = std::array::from_fn(|k| {
                    *pw.add(2 + 4 * r + k) as usize | ((qh >> (3 * k)) & 7) << 8
                });
                let s = if qh & 0x8000 != 0 { -1 } else { 1 };
                let (mag, signed) = iq1_values(index, [s; 4]);
                Run {
                    mag,
                    signs: signed,
                    scales: _mm256_set1_epi16(2 * ((qh >> 12) & 7) as i16 + 1),
                }
            },
        )
    }
}

/// The IQ1_M super-block scale from the top nibbles of its four scale
/// halves at `p`.
///
/// # Safety
/// Eight readable bytes at `p`.
#[inline(always)]
unsafe fn iq1m_scale(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees eight readable bytes.
    let sc: [u16; 4] = std::array::from_fn(|i| unsafe { u16_at(p.add(2 * i)) });
    let bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    half::f16::from_bits(bits).to_f32()
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq1_m<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    // SAFETY: the module's contract; runs read bytes 0..56 of a block.
    unsafe {
        over_runs(
            nb,
            56,
            w,
            a,
            0.125,
            |pw| iq1m_scale(pw.add(48)),
            |pw, r| {
                // Run r: 16-element groups 2r and 2r + 1 (scales in the
                // scale half r / 2), four lattice points.
                let sc = u16_at(pw.add(48 + 2 * (r / 2)));
                let nib: [usize; 4] = std::array::from_fn(|k| {
                    (*pw.add(32 + 2 * r + k / 2) as usize >> (4 * (k % 2))) & 0xF
                });
                let index =
                    std::array::from_fn(|k| *pw.add(4 * r + k) as usize | (nib[k] & 7) << 8);
                let shift = nib.map(|n| if n & 8 != 0 { -1 } else { 1 });
                let (mag, signed) = iq1_values(index, shift);
                let ls = |h: usize| 2 * ((sc >> (3 * (h % 4))) & 7) as i32 + 1;
                Run {
                    mag,
                    signs: signed,
                    scales: scales2(ls(2 * r), ls(2 * r + 1)),
                }
            },
        )
    }
}

/// Trits (0, 1, 2) of the bytes of `v`: byte `i` holds
/// `ceil(t * 256 / 243)` of a base-3 number `t`, and multiplying it by
/// `mult` byte `i` (a power of 3, mod 256) brings the wanted trit to the top,
/// which `(q * 3) >> 8` reads (see `rocmforge_core::quant`'s TQ1_0).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn trits(v: __m256i, mult: __m256i) -> __m256i {
    let low = _mm256_set1_epi16(0x00FF);
    // Byte products mod 256, even and odd bytes apart (16-bit multiplies).
    let even = _mm256_and_si256(
        _mm256_mullo_epi16(_mm256_and_si256(v, low), _mm256_and_si256(mult, low)),
        low,
    );
    let odd = _mm256_andnot_si256(
        low,
        _mm256_mullo_epi16(_mm256_andnot_si256(low, v), _mm256_srli_epi16(mult, 8)),
    );
    // (q * 3) >> 8: even bytes sit in the low half of a lane, odd ones in
    // the high half (so their product's top half is already shifted).
    let t_even = _mm256_mulhi_epu16(even, _mm256_set1_epi16(0x300));
    let t_odd = _mm256_slli_epi16(_mm256_mulhi_epu16(odd, _mm256_set1_epi16(3)), 8);
    _mm256_or_si256(t_even, t_odd)
}

/// `Σ t (q_t - 1) y_t` for a 256-element block whose stored values `q`
/// (0, 1, 2) come in eight 32-element runs, as eight i32 lanes per token.
///
/// # Safety
/// Every `ap[t]` holds at least `i + 1` Q8_K blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ternary_sums<const T: usize>(
    runs: [__m256i; 8],
    ap: [*const u8; T],
    i: usize,
) -> [__m256i; T] {
    // SAFETY: every `ap[t]` holds block `i` (this fn's contract); AVX2 is
    // enabled on this fn.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut out = [_mm256_setzero_si256(); T];
        for t in 0..T {
            let pa = ap[t].add(i * A_BYTES);
            let mut s = _mm256_setzero_si256();
            for (r, &q) in runs.iter().enumerate() {
                let y = load256(pa.add(A_QS + 32 * r));
                s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), ones));
            }
            // The - 1 of every stored value: minus the activation sums.
            let bsums = _mm256_madd_epi16(load256(pa.add(A_BSUMS)), ones);
            out[t] = _mm256_sub_epi32(s, bsums);
        }
        out
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tq2_0<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    debug_assert!(w.len() >= nb * 66);
    debug_assert!(a.iter().all(|r| r.len() >= nb * A_BYTES));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    // SAFETY: `w` holds `nb` super-blocks and every `a[t]` `nb` Q8_K blocks
    // (the module's contract), which bounds every offset below; AVX2/FMA/F16C
    // are enabled on this fn.
    unsafe {
        let m3 = _mm256_set1_epi8(3);
        let mut acc = [_mm256_setzero_ps(); T];
        for i in 0..nb {
            let pw = wp.add(i * 66);
            // Run 4h + n: bits 2n of bytes 32h..32h + 32.
            let mut runs = [_mm256_setzero_si256(); 8];
            for (r, run) in runs.iter_mut().enumerate() {
                let q = load256(pw.add(32 * (r / 4)));
                let shift = _mm256_set1_epi32(2 * (r % 4) as i32);
                *run = _mm256_and_si256(_mm256_srlv_epi32(q, shift), m3);
            }
            let sums = ternary_sums(runs, ap, i);
            let dw = f16_at(pw.add(64));
            for t in 0..T {
                acc[t] = fma_i32(acc[t], dw * f32_at(ap[t].add(i * A_BYTES)), sums[t]);
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
pub(super) unsafe fn tq1_0<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    debug_assert!(w.len() >= nb * 54);
    debug_assert!(a.iter().all(|r| r.len() >= nb * A_BYTES));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    // SAFETY: `w` holds `nb` super-blocks and every `a[t]` `nb` Q8_K blocks
    // (the module's contract), which bounds every offset below (`qh` is read
    // as the last four bytes before the block's scale); AVX2/FMA/F16C are
    // enabled on this fn.
    unsafe {
        let pow = |n: u32| _mm256_set1_epi8(3u8.pow(n) as i8);
        let pair = |lo: u32, hi: u32| {
            _mm256_set_m128i(
                _mm_set1_epi8(3u8.pow(hi) as i8),
                _mm_set1_epi8(3u8.pow(lo) as i8),
            )
        };
        // Elements 224..256: trit 4 of qs[32..48], then trit n of qh[j] at
        // 240 + 4n + j.
        let last = _mm256_set_m128i(
            _mm_setr_epi32(0x0101_0101, 0x0303_0303, 0x0909_0909, 0x1b1b_1b1b),
            _mm_set1_epi8(81),
        );
        let mut acc = [_mm256_setzero_ps(); T];
        for i in 0..nb {
            let pw = wp.add(i * 54);
            let head = load256(pw);
            let tail = _mm256_broadcastsi128_si256(load128(pw.add(32)));
            let qh = _mm256_set_m128i(
                _mm_set1_epi32(u32_at(pw.add(48)) as i32),
                load128(pw.add(32)),
            );
            let runs = [
                trits(head, pow(0)),
                trits(head, pow(1)),
                trits(head, pow(2)),
                trits(head, pow(3)),
                trits(head, pow(4)),
                trits(tail, pair(0, 1)),
                trits(tail, pair(2, 3)),
                trits(qh, last),
            ];
            let sums = ternary_sums(runs, ap, i);
            let dw = f16_at(pw.add(52));
            for t in 0..T {
                acc[t] = fma_i32(acc[t], dw * f32_at(ap[t].add(i * A_BYTES)), sums[t]);
            }
        }
        let mut out = [0.0f32; T];
        for t in 0..T {
            out[t] = hsum(acc[t]);
        }
        out
    }
}
