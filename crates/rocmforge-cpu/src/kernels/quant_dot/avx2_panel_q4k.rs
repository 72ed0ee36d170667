//! The Q4_K panel format for `avx2_panel_kquant`.
//!
//! Per super-block of eight rows: the nibbles (lane `i` of `nibbles[p * 8 +
//! c]` holds bytes `32p + 4c ..+ 4` of row `i`: low nibbles are sub-block
//! `2p`, high ones `2p + 1`), each sub-block's 6-bit scales as (s, s) i16
//! pairs so one `madd` both widens and scales a sub-block's sums (at most
//! 16 · 15 · 127 per i16 lane before it), the mins as i16 pairs of
//! consecutive sub-blocks, and d and dmin as f32. A token then costs, per
//! super-block and eight rows, 64 broadcasts and `maddubs`, eight scaling
//! `madd`s, four `madd`s for the mins and two FMAs.

use std::arch::x86_64::*;

use half::f16;
use rocmforge_core::quant::unpack_k_scales_mins;

use super::avx2_common::load256;
use super::avx2_panel::transpose_u32;
use super::avx2_panel_kquant::{PanelFormat, A_BSUMS, A_BYTES, A_QS, PASS_TOKENS, ROWS};

pub(super) struct Q4K;

#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(super) struct Q4KBlock {
    nibbles: [__m256i; 32],
    scales: [__m256i; 8],
    mins: [__m256i; 4],
    d: [f32; ROWS],
    dmin: [f32; ROWS],
}

const W_BYTES: usize = 144;

impl PanelFormat for Q4K {
    type Block = Q4KBlock;
    const W_BYTES: usize = W_BYTES;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pack(w: *const u8, wb: usize, live: usize, panel: &mut [Q4KBlock]) {
        // SAFETY: `w` holds `live` rows `wb` bytes apart of `panel.len()`
        // super-blocks (the `PanelFormat` contract), and reads stop at row
        // `live`, so all are in bounds; AVX2/FMA/F16C are enabled on this fn.
        unsafe {
            for (b, pb) in panel.iter_mut().enumerate() {
                let mut sc = [[0i16; 16]; 8];
                let mut mn = [[0i16; 16]; 4];
                let (mut d, mut dmin) = ([0.0f32; ROWS], [0.0f32; ROWS]);
                for i in 0..live {
                    let p = w.add(i * wb + b * W_BYTES);
                    let f16_at =
                        |o: usize| f16::from_bits((p.add(o) as *const u16).read_unaligned());
                    d[i] = f16_at(0).to_f32();
                    dmin[i] = f16_at(2).to_f32();
                    let (s, m) = unpack_k_scales_mins(&*(p.add(4) as *const [u8; 12]));
                    for j in 0..8 {
                        sc[j][2 * i] = s[j] as i16;
                        sc[j][2 * i + 1] = s[j] as i16;
                    }
                    for q in 0..4 {
                        mn[q][2 * i] = m[2 * q] as i16;
                        mn[q][2 * i + 1] = m[2 * q + 1] as i16;
                    }
                }
                for p in 0..4 {
                    let rows8 = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| {
                        if i < live {
                            load256(w.add(i * wb + b * W_BYTES + 16 + 32 * p))
                        } else {
                            _mm256_setzero_si256()
                        }
                    });
                    pb.nibbles[p * 8..(p + 1) * 8].copy_from_slice(&transpose_u32(rows8));
                }
                pb.scales = sc.map(|v| _mm256_loadu_si256(v.as_ptr() as *const __m256i));
                pb.mins = mn.map(|v| _mm256_loadu_si256(v.as_ptr() as *const __m256i));
                pb.d = d;
                pb.dmin = dmin;
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pass(panel: &[Q4KBlock], a: [*const u8; PASS_TOKENS]) -> [__m256; PASS_TOKENS] {
        let low4 = _mm256_set1_epi8(0x0F);
        let mut acc = [_mm256_setzero_ps(); PASS_TOKENS];
        // SAFETY: every `a[t]` holds `panel.len()` Q8_K blocks (the
        // `PanelFormat` contract), so every read below is in bounds;
        // AVX2/FMA/F16C are enabled on this fn.
        unsafe {
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
                    let blk = a[t].add(b * A_BYTES);
                    // Each min covers two 16-element activation sums: adjacent
                    // sums added give the eight sub-block sums, and 32-bit lane
                    // p of that holds sub-blocks 2p and 2p + 1 as an i16 pair.
                    let bs = _mm256_loadu_si256(blk.add(A_BSUMS) as *const __m256i);
                    let lo = _mm256_castsi256_si128(bs);
                    let sub = _mm_hadd_epi16(lo, _mm256_extracti128_si256(bs, 1));
                    let pairs = [
                        sub,
                        _mm_shuffle_epi32::<0b01>(sub),
                        _mm_shuffle_epi32::<0b10>(sub),
                        _mm_shuffle_epi32::<0b11>(sub),
                    ];
                    let mut m = _mm256_setzero_si256();
                    for (mins, pair) in pb.mins.iter().zip(pairs) {
                        let pair = _mm256_broadcastd_epi32(pair);
                        m = _mm256_add_epi32(m, _mm256_madd_epi16(*mins, pair));
                    }
                    let da = _mm256_set1_ps((blk as *const f32).read_unaligned());
                    acc[t] =
                        _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(sums[t]), acc[t]);
                    acc[t] =
                        _mm256_fnmadd_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(m), acc[t]);
                }
            }
        }
        acc
    }
}
