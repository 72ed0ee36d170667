//! AVX2 kernels for the 32-element formats against Q8_0 / Q8_1 rows.
//!
//! Safety contract of every `pub(super)` kernel here: the CPU has AVX2, FMA
//! and F16C, `w` holds at least `nb` weight blocks and every `a[t]` at least
//! `nb` activation blocks (the dispatcher checks both).

use std::arch::x86_64::*;

use rocmforge_core::quant::IQ4NL_VALUES;

use super::avx2_common::*;

/// Weight formats whose blocks decode to 32 signed bytes and a scale, dotted
/// with Q8_0 activations.
pub(super) const Q4_0: u8 = 0;
pub(super) const Q5_0: u8 = 1;
pub(super) const Q8_0: u8 = 2;
pub(super) const IQ4_NL: u8 = 3;

const fn signed_block_bytes(kind: u8) -> usize {
    match kind {
        Q4_0 | IQ4_NL => 18,
        Q5_0 => 22,
        _ => 34,
    }
}

/// The scale and 32 signed quants of the weight block at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn signed_block<const KIND: u8>(p: *const u8) -> (f32, __m256i) {
    let d = f16_at(p);
    let q = match KIND {
        Q4_0 => _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8)),
        Q5_0 => {
            // (nibble | fifth bit << 4) - 16 == nibble - 16 where the bit is clear.
            let clear = _mm256_andnot_si256(bits_to_bytes(p.add(2)), _mm256_set1_epi8(0x10));
            _mm256_sub_epi8(nibbles(p.add(6)), clear)
        }
        IQ4_NL => {
            let table = _mm256_broadcastsi128_si256(load128(IQ4NL_VALUES.as_ptr() as *const u8));
            _mm256_shuffle_epi8(table, nibbles(p.add(2)))
        }
        _ => load256(p.add(2)),
    };
    (d, q)
}

/// One weight block `i` against `T` tokens, into `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn signed_step<const KIND: u8, const T: usize>(
    w: *const u8,
    a: &[*const u8; T],
    i: usize,
    acc: &mut [__m256; T],
) {
    let (dw, x) = signed_block::<KIND>(w.add(i * signed_block_bytes(KIND)));
    let ax = _mm256_sign_epi8(x, x);
    for t in 0..T {
        let pa = a[t].add(i * 34);
        let p = dot_signed(ax, x, load256(pa.add(2)));
        acc[t] = fma_i32(acc[t], dw * f16_at(pa), p);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn signed_q8_0<const KIND: u8, const T: usize>(
    nb: usize,
    w: &[u8],
    a: [&[u8]; T],
) -> [f32; T] {
    debug_assert!(w.len() >= nb * signed_block_bytes(KIND));
    debug_assert!(a.iter().all(|r| r.len() >= nb * 34));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    // Two accumulator sets so consecutive blocks do not wait on each other's FMA.
    let mut even = [_mm256_setzero_ps(); T];
    let mut odd = [_mm256_setzero_ps(); T];
    let mut i = 0;
    while i + 1 < nb {
        signed_step::<KIND, T>(wp, &ap, i, &mut even);
        signed_step::<KIND, T>(wp, &ap, i + 1, &mut odd);
        i += 2;
    }
    if i < nb {
        signed_step::<KIND, T>(wp, &ap, i, &mut even);
    }
    let mut out = [0.0f32; T];
    for t in 0..T {
        out[t] = hsum(_mm256_add_ps(even[t], odd[t]));
    }
    out
}

/// Q4_1 / Q5_1 (unsigned quants plus an offset) against Q8_1 rows, whose
/// stored `d * Σq` applies the offset with one multiply per block.
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
    for i in 0..nb {
        let pw = wp.add(i * bytes);
        let (dw, mw) = (f16_at(pw), f16_at(pw.add(2)));
        let x = if FIVE {
            let fifth = _mm256_and_si256(bits_to_bytes(pw.add(4)), _mm256_set1_epi8(0x10));
            _mm256_or_si256(nibbles(pw.add(8)), fifth)
        } else {
            nibbles(pw.add(4))
        };
        for t in 0..T {
            let pa = ap[t].add(i * 36);
            let p = dot_unsigned(x, load256(pa.add(4)));
            acc[t] = fma_i32(acc[t], dw * f16_at(pa), p);
            offsets[t] += mw * f16_at(pa.add(2));
        }
    }
    let mut out = [0.0f32; T];
    for t in 0..T {
        out[t] = hsum(acc[t]) + offsets[t];
    }
    out
}
