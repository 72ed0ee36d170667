//! AVX2 kernels for the 32-element formats against Q8_0 / Q8_1 rows.
//!
//! Safety contract of every `pub(super)` kernel here: the CPU has AVX2, FMA
//! and F16C, `w` holds at least `nb` weight blocks and every `a[t]` at least
//! `nb` activation blocks (the dispatcher checks both).

use std::arch::x86_64::*;

use rocmforge_core::quant::{e8m0_to_f32_half, IQ4NL_VALUES, MXFP4_VALUES};

use super::avx2_common::*;

/// Weight formats dotted with Q8_0 activations.
pub(super) const Q4_0: u8 = 0;
pub(super) const Q5_0: u8 = 1;
pub(super) const Q8_0: u8 = 2;
pub(super) const IQ4_NL: u8 = 3;
pub(super) const MXFP4: u8 = 4;

pub(super) const fn block_bytes(kind: u8) -> usize {
    match kind {
        Q4_0 | IQ4_NL => 18,
        MXFP4 => 17,
        Q5_0 => 22,
        _ => 34,
    }
}

/// Q4_0 multiplies its unsigned nibbles and subtracts `8 * Σy` per block
/// afterwards, cheaper than the sign trick. The others use the sign trick and
/// ggml's accumulation order exactly (one FMA chain for Q8_0 and Q5_0, two
/// interleaved for IQ4_NL and MXFP4), so their results are bit-identical to ggml's AVX2
/// `vec_dot` (and llamafile's tinyBLAS, which sums the same way) on the
/// reference fixtures. llama.cpp repacks Q4_0 on AVX2 machines, so no order
/// would reproduce it there anyway.
const fn unsigned(kind: u8) -> bool {
    kind == Q4_0
}

const fn two_chains(kind: u8) -> bool {
    kind == Q4_0 || kind == IQ4_NL || kind == MXFP4
}

/// Per-block facts about a Q8_0 activation row that every weight row needs:
/// `side[2b]` is block `b`'s scale as f32 and `side[2b + 1]` its scale times
/// the sum of its quants. Computed once per row (see [`q8_0_side`]), they save
/// each weight block an f16 conversion, and let Q4_0 multiply its unsigned
/// quants directly and subtract `8 * Σy` per block afterwards.
pub(super) const SIDE_PER_BLOCK: usize = 2;

/// Fills `side` for the Q8_0 row `a` of `nb` blocks.
///
/// # Safety
/// AVX2/FMA/F16C available; `a` holds `nb` Q8_0 blocks and `side` at least
/// `nb * SIDE_PER_BLOCK` floats.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_0_side(nb: usize, a: &[u8], side: &mut [f32]) {
    debug_assert!(a.len() >= nb * 34 && side.len() >= nb * SIDE_PER_BLOCK);
    let (pa, ps) = (a.as_ptr(), side.as_mut_ptr());
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    // SAFETY: `a` holds `nb` blocks of 34 bytes and `side` `nb *
    // SIDE_PER_BLOCK` floats (this fn's contract), and every block index
    // below is under `nb`; AVX2/FMA/F16C are enabled on this fn.
    unsafe {
        // Eight i32 partial sums of block b's quants.
        let partial = |b: usize| {
            _mm256_madd_epi16(
                _mm256_maddubs_epi16(ones8, load256(pa.add(b * 34 + 2))),
                ones16,
            )
        };
        let mut b = 0;
        // Eight blocks at a time: horizontal adds turn eight partial-sum
        // vectors into one vector of eight sums, and one F16C op converts eight
        // scales.
        while b + 8 <= nb {
            let h01 = _mm256_hadd_epi32(partial(b), partial(b + 1));
            let h23 = _mm256_hadd_epi32(partial(b + 2), partial(b + 3));
            let h45 = _mm256_hadd_epi32(partial(b + 4), partial(b + 5));
            let h67 = _mm256_hadd_epi32(partial(b + 6), partial(b + 7));
            let h0123 = _mm256_hadd_epi32(h01, h23);
            let h4567 = _mm256_hadd_epi32(h45, h67);
            let sums = _mm256_add_epi32(
                _mm256_permute2x128_si256(h0123, h4567, 0x20),
                _mm256_permute2x128_si256(h0123, h4567, 0x31),
            );
            let bits = |j: usize| (pa.add((b + j) * 34) as *const i16).read_unaligned();
            let d16 = _mm_setr_epi16(
                bits(0),
                bits(1),
                bits(2),
                bits(3),
                bits(4),
                bits(5),
                bits(6),
                bits(7),
            );
            let d = _mm256_cvtph_ps(d16);
            let dsum = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sums));
            let lo = _mm256_unpacklo_ps(d, dsum);
            let hi = _mm256_unpackhi_ps(d, dsum);
            _mm256_storeu_ps(ps.add(2 * b), _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_storeu_ps(ps.add(2 * b + 8), _mm256_permute2f128_ps(lo, hi, 0x31));
            b += 8;
        }
        while b < nb {
            let s = partial(b);
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
            let d = f16_at(pa.add(b * 34));
            *ps.add(2 * b) = d;
            *ps.add(2 * b + 1) = d * _mm_cvtsi128_si32(s) as f32;
            b += 1;
        }
    }
}

/// The scale and 32 quants of the weight block at `p`: unsigned (offset not
/// yet subtracted) for Q4_0, signed for the others (MXFP4: the doubled E2M1
/// levels and half the E8M0 scale, as ggml pairs them).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn weight_block<const KIND: u8>(p: *const u8) -> (f32, __m256i) {
    // SAFETY: the caller guarantees a whole `KIND` block at `p` (the
    // module's contract) and `IQ4NL_VALUES` and `MXFP4_VALUES` are 16 bytes;
    // AVX2/FMA/F16C are enabled on this fn.
    unsafe {
        if KIND == MXFP4 {
            let table = _mm256_broadcastsi128_si256(load128(MXFP4_VALUES.as_ptr() as *const u8));
            return (
                e8m0_to_f32_half(*p),
                _mm256_shuffle_epi8(table, nibbles(p.add(1))),
            );
        }
        let d = f16_at(p);
        let q = match KIND {
            Q4_0 => nibbles(p.add(2)),
            Q5_0 => {
                // (nibble | fifth bit << 4) - 16 as i8: set the top four bits
                // where the fifth bit is clear.
                let clear =
                    _mm256_andnot_si256(bits_to_bytes(p.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
                _mm256_or_si256(nibbles(p.add(6)), clear)
            }
            IQ4_NL => {
                let table =
                    _mm256_broadcastsi128_si256(load128(IQ4NL_VALUES.as_ptr() as *const u8));
                _mm256_shuffle_epi8(table, nibbles(p.add(2)))
            }
            _ => load256(p.add(2)),
        };
        (d, q)
    }
}

/// Running sums for `T` tokens: the vector part and, for offset formats, the
/// scalar `Σ d_w * d_a * Σy` to subtract at the end.
struct Acc<const T: usize> {
    v: [__m256; T],
    offset: [f32; T],
}

/// Weight block `i` against `T` tokens.
///
/// # Safety
/// As for the kernels, with block `i` (< `nb`) of the weight row at `w`, of
/// every activation row `a[t]` and of every side row `side[t]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn step<const KIND: u8, const T: usize>(
    w: *const u8,
    a: &[*const u8; T],
    side: &[*const f32; T],
    i: usize,
    acc: &mut Acc<T>,
) {
    // SAFETY: block `i` of the weight row, of every `a[t]` and of every
    // `side[t]` is readable (this fn's contract); AVX2/FMA/F16C are enabled on
    // this fn.
    unsafe {
        let (dw, x) = weight_block::<KIND>(w.add(i * block_bytes(KIND)));
        let ax = _mm256_sign_epi8(x, x);
        for t in 0..T {
            let y = load256(a[t].add(i * 34 + 2));
            let p = if unsigned(KIND) {
                dot_unsigned(x, y)
            } else {
                dot_signed(ax, x, y)
            };
            let s = side[t].add(i * SIDE_PER_BLOCK);
            acc.v[t] = fma_i32(acc.v[t], dw * *s, p);
            if unsigned(KIND) {
                acc.offset[t] += dw * *s.add(1);
            }
        }
    }
}

/// `side[t]` holds [`q8_0_side`] of `a[t]`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn with_q8_0<const KIND: u8, const T: usize>(
    nb: usize,
    w: &[u8],
    a: [&[u8]; T],
    side: [&[f32]; T],
) -> [f32; T] {
    debug_assert!(w.len() >= nb * block_bytes(KIND));
    debug_assert!(a.iter().all(|r| r.len() >= nb * 34));
    debug_assert!(side.iter().all(|s| s.len() >= nb * SIDE_PER_BLOCK));
    let (wp, ap, sp) = (w.as_ptr(), a.map(|r| r.as_ptr()), side.map(|s| s.as_ptr()));
    // Two accumulator sets so consecutive blocks do not wait on each other.
    let mut even = Acc {
        v: [_mm256_setzero_ps(); T],
        offset: [0.0; T],
    };
    let mut odd = Acc {
        v: [_mm256_setzero_ps(); T],
        offset: [0.0; T],
    };
    let mut i = 0;
    // SAFETY: `w` holds `nb` weight blocks, every `a[t]` `nb` Q8_0 blocks and
    // every `side[t]` their side information (the module's contract and this
    // fn's), so each `step` reads in bounds; AVX2/FMA/F16C are enabled on this
    // fn.
    unsafe {
        if two_chains(KIND) {
            while i + 1 < nb {
                step::<KIND, T>(wp, &ap, &sp, i, &mut even);
                step::<KIND, T>(wp, &ap, &sp, i + 1, &mut odd);
                i += 2;
            }
        }
        while i < nb {
            step::<KIND, T>(wp, &ap, &sp, i, &mut even);
            i += 1;
        }
        let mut out = [0.0f32; T];
        for (t, o) in out.iter_mut().enumerate() {
            let sum = if two_chains(KIND) {
                hsum(_mm256_add_ps(even.v[t], odd.v[t]))
            } else {
                hsum(even.v[t])
            };
            *o = sum - 8.0 * (even.offset[t] + odd.offset[t]);
        }
        out
    }
}

/// Q4_1 / Q5_1 (unsigned quants plus an offset) against Q8_1 rows, whose
/// stored `d * Σq` applies the offset with one multiply per block. One FMA
/// chain and a fused scalar offset sum, as ggml's AVX2 code compiles.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn offset_q8_1<const FIVE: bool, const T: usize>(
    nb: usize,
    w: &[u8],
    a: [&[u8]; T],
) -> [f32; T] {
    let bytes = if FIVE { 24 } else { 20 };
    debug_assert!(w.len() >= nb * bytes);
    debug_assert!(a.iter().all(|r| r.len() >= nb * 36));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    let mut acc = [_mm256_setzero_ps(); T];
    let mut offsets = [0.0f32; T];
    // SAFETY: `w` holds `nb` weight blocks and every `a[t]` `nb` Q8_1 blocks
    // (the module's contract), which bounds every offset below; AVX2/FMA/F16C
    // are enabled on this fn.
    unsafe {
        for i in 0..nb {
            let pw = wp.add(i * bytes);
            let (dw, mw) = f16x2_at(pw);
            let x = if FIVE {
                let fifth = _mm256_and_si256(bits_to_bytes(pw.add(4)), _mm256_set1_epi8(0x10));
                _mm256_or_si256(nibbles(pw.add(8)), fifth)
            } else {
                nibbles(pw.add(4))
            };
            for t in 0..T {
                let pa = ap[t].add(i * 36);
                let (da, sa) = f16x2_at(pa);
                offsets[t] = mw.mul_add(sa, offsets[t]);
                acc[t] = fma_i32(acc[t], dw * da, dot_unsigned(x, load256(pa.add(4))));
            }
        }
        let mut out = [0.0f32; T];
        for t in 0..T {
            out[t] = hsum(acc[t]) + offsets[t];
        }
        out
    }
}
