//! AVX2 kernels for Q4_K, Q5_K and Q6_K against Q8_K rows.
//!
//! Safety contract of every `pub(super)` kernel here: the CPU has AVX2, FMA
//! and F16C, `w` holds at least `nb` weight super-blocks and every `a[t]` at
//! least `nb` Q8_K blocks (the dispatcher checks both).

use std::arch::x86_64::*;

use super::avx2_common::*;

/// Q8_K field offsets.
const A_BYTES: usize = 292;
const A_QS: usize = 4;
const A_BSUMS: usize = 260;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bsums(pa: *const u8) -> __m256i {
    // SAFETY: callers pass a whole Q8_K block at `pa` (inside the rows the
    // kernels' contract covers); its 32 bsum bytes start at A_BSUMS.
    unsafe { load256(pa.add(A_BSUMS)) }
}

/// The eight 6-bit scales and eight 6-bit mins of a Q4_K/Q5_K block (12
/// packed bytes at `p`) as sixteen i16 lanes: scales in the low half, mins in
/// the high half. Same unpacking as `rocmforge_core::quant::unpack_k_scales_mins`,
/// done four bytes at a time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_scales_mins(p: *const u8) -> __m256i {
    // SAFETY: callers pass the 12 scale bytes of a weight super-block the
    // kernels' contract covers, and `i` < 3.
    let word = |i: usize| unsafe { (p.add(4 * i) as *const u32).read_unaligned() };
    let (a0, a1, a2) = (word(0), word(1), word(2));
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let sc_lo = a0 & LOW6;
    let mn_lo = a1 & LOW6;
    let sc_hi = (a2 & LOW4) | (((a0 >> 6) & TOP2) << 4);
    let mn_hi = ((a2 >> 4) & LOW4) | (((a1 >> 6) & TOP2) << 4);
    let bytes = _mm_set_epi32(mn_hi as i32, mn_lo as i32, sc_hi as i32, sc_lo as i32);
    _mm256_cvtepu8_epi16(bytes)
}

/// Shuffle controls broadcasting i16 lane `s` (of eight, in each 128-bit half).
const LANE_PICK: [[u8; 32]; 8] = {
    let mut t = [[0u8; 32]; 8];
    let mut s = 0;
    while s < 8 {
        let mut i = 0;
        while i < 32 {
            t[s][i] = (2 * s + i % 2) as u8;
            i += 1;
        }
        s += 1;
    }
    t
};

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_i32_128(v: __m128i) -> i32 {
    let s = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Q4_K (`FIVE = false`) and Q5_K (`FIVE = true`).
///
/// The float steps follow ggml's AVX2 `vec_dot` (per-lane sums; Q4_K's min
/// term kept in four lanes, Q5_K's summed to a scalar) so results are
/// bit-identical to it.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q45_k<const FIVE: bool, const T: usize>(
    nb: usize,
    w: &[u8],
    a: [&[u8]; T],
) -> [f32; T] {
    let (bytes, qs_at) = if FIVE { (176, 48) } else { (144, 16) };
    debug_assert!(w.len() >= nb * bytes);
    debug_assert!(a.iter().all(|r| r.len() >= nb * A_BYTES));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    // SAFETY: `w` holds `nb` super-blocks and every `a[t]` `nb` Q8_K blocks
    // (the module's contract), which bounds every offset below; AVX2/FMA/F16C
    // are enabled on this fn.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let m16 = _mm256_set1_epi8(0x10);
        // Opaque to the optimiser on purpose: seeing constant controls, LLVM
        // rewrites each one-uop byte shuffle as a shift plus a broadcast.
        let lane_pick = std::hint::black_box(&LANE_PICK);
        let mut acc = [_mm256_setzero_ps(); T];
        let mut acc_min = [_mm_setzero_ps(); T];
        let mut min_sums = [0.0f32; T];
        for i in 0..nb {
            let pw = wp.add(i * bytes);
            let (dw, dminw) = (f16_at(pw), f16_at(pw.add(2)));
            let scales_mins = k_scales_mins(pw.add(4));
            let mins = _mm256_extracti128_si256(scales_mins, 1);
            let scales = _mm256_permute2x128_si256(scales_mins, scales_mins, 0x00);
            let mut qh = if FIVE {
                load256(pw.add(16))
            } else {
                _mm256_setzero_si256()
            };
            let mut sums = [_mm256_setzero_si256(); T];
            for j in 0..4 {
                let q = load256(pw.add(qs_at + 32 * j));
                let mut lo = _mm256_and_si256(q, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if FIVE {
                    // Bit s of qh byte l is the fifth bit of sub-block s;
                    // shifting qh right once per sub-block brings it to bit 0.
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), m16));
                    qh = _mm256_srli_epi16(qh, 1);
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 4), m16));
                    qh = _mm256_srli_epi16(qh, 1);
                }
                let s_lo = _mm256_shuffle_epi8(scales, load256(lane_pick[2 * j].as_ptr()));
                let s_hi = _mm256_shuffle_epi8(scales, load256(lane_pick[2 * j + 1].as_ptr()));
                for t in 0..T {
                    let pa = ap[t].add(i * A_BYTES + A_QS + 64 * j);
                    let p_lo = dot_scaled(lo, load256(pa), s_lo);
                    let p_hi = dot_scaled(hi, load256(pa.add(32)), s_hi);
                    sums[t] = _mm256_add_epi32(sums[t], _mm256_add_epi32(p_lo, p_hi));
                }
            }
            for t in 0..T {
                let pa = ap[t].add(i * A_BYTES);
                let da = f32_at(pa);
                // Each min covers two 16-element bsums.
                let b = bsums(pa);
                let pairs =
                    _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
                let prod = _mm_madd_epi16(mins, pairs);
                acc[t] = fma_i32(acc[t], da * dw, sums[t]);
                if FIVE {
                    let m = hsum_i32_128(prod) as f32;
                    min_sums[t] = (-da * dminw).mul_add(m, min_sums[t]);
                } else {
                    let m = _mm_cvtepi32_ps(prod);
                    acc_min[t] = _mm_fmadd_ps(_mm_set1_ps(-da * dminw), m, acc_min[t]);
                }
            }
        }
        let mut out = [0.0f32; T];
        for t in 0..T {
            out[t] = if FIVE {
                hsum(acc[t]) + min_sums[t]
            } else {
                hsum(acc[t]) + hsum128(acc_min[t])
            };
        }
        out
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k<const T: usize>(nb: usize, w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    debug_assert!(w.len() >= nb * 210);
    debug_assert!(a.iter().all(|r| r.len() >= nb * A_BYTES));
    let (wp, ap) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    // SAFETY: `w` holds `nb` super-blocks and every `a[t]` `nb` Q8_K blocks
    // (the module's contract), which bounds every offset below; AVX2/FMA/F16C
    // are enabled on this fn.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); T];
        for i in 0..nb {
            let pw = wp.add(i * 210);
            let dw = f16_at(pw.add(208));
            let scales = load128(pw.add(192));
            let mut sums = [_mm256_setzero_si256(); T];
            for (r, q) in q6_k_runs(pw).into_iter().enumerate() {
                let sc = run_scales(scales, r);
                for t in 0..T {
                    let pa = ap[t].add(i * A_BYTES + A_QS + 32 * r);
                    sums[t] = _mm256_add_epi32(sums[t], dot_scaled(q, load256(pa), sc));
                }
            }
            // Quants are stored +32: subtract 32 * Σ scale * bsum.
            let all_scales = _mm256_cvtepi8_epi16(scales);
            for t in 0..T {
                let pa = ap[t].add(i * A_BYTES);
                let offset = _mm256_madd_epi16(all_scales, bsums(pa));
                let total = _mm256_sub_epi32(sums[t], _mm256_slli_epi32(offset, 5));
                acc[t] = fma_i32(acc[t], f32_at(pa) * dw, total);
            }
        }
        let mut out = [0.0f32; T];
        for t in 0..T {
            out[t] = hsum(acc[t]);
        }
        out
    }
}

/// The eight 32-element runs of one Q6_K super-block at `p`, in element
/// order, as bytes 0..63.
///
/// # Safety
/// AVX2/FMA/F16C available; `p` points to a whole Q6_K super-block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_runs(p: *const u8) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(0x30);
    let mut out = [_mm256_setzero_si256(); 8];
    // SAFETY: the caller guarantees a whole Q6_K super-block (210 bytes) at
    // `p`; AVX2 is enabled on this fn.
    unsafe {
        for h in 0..2 {
            let ql0 = load256(p.add(64 * h));
            let ql1 = load256(p.add(64 * h + 32));
            let qh = load256(p.add(128 + 32 * h));
            // Run s of this half: low nibble from ql0/ql1, top bits from qh
            // bits 2s..2s + 2, moved to bits 4..6 of each byte.
            let parts = [
                (_mm256_and_si256(ql0, m4), _mm256_slli_epi16(qh, 4)),
                (_mm256_and_si256(ql1, m4), _mm256_slli_epi16(qh, 2)),
                (_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), qh),
                (
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_srli_epi16(qh, 2),
                ),
            ];
            for (s, (low, high)) in parts.into_iter().enumerate() {
                out[4 * h + s] = _mm256_or_si256(low, _mm256_and_si256(high, m3));
            }
        }
    }
    out
}
