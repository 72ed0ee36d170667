//! The Q6_K panel format for `avx2_panel_kquant`.
//!
//! Per super-block of eight rows: the 6-bit quants unpacked to bytes (0..63,
//! stored +32), lane `i` of `quants[r * 8 + s]` holding elements `4s..4s + 4`
//! of 32-element run `r` of row `i`; each 16-element sub-block's i8 scale as
//! (s, s) i16 pairs, and as (s_2k, s_2k+1) pairs for the +32 correction;
//! d as f32. Two `maddubs` of 6-bit quants fit an i16 lane (2 · 2 · 63 ·
//! 127 < 32768), so a run costs eight `maddubs` and four scaling `madd`s per
//! token and eight rows.

use std::arch::x86_64::*;

use half::f16;

use super::avx2_kquant::q6_k_runs;
use super::avx2_panel::transpose_u32;
use super::avx2_panel_kquant::{PanelFormat, A_BSUMS, A_BYTES, A_QS, PASS_TOKENS, ROWS};

pub(super) struct Q6K;

#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(super) struct Q6KBlock {
    quants: [__m256i; 64],
    scales: [__m256i; 16],
    scale_pairs: [__m256i; 8],
    d: [f32; ROWS],
}

/// ql (128 bytes of low nibbles), qh (64 of high bit pairs), 16 i8 scales,
/// f16 d.
const W_BYTES: usize = 210;

impl PanelFormat for Q6K {
    type Block = Q6KBlock;
    const W_BYTES: usize = W_BYTES;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pack(w: *const u8, wb: usize, live: usize, panel: &mut [Q6KBlock]) {
        // SAFETY: `w` holds `live` rows `wb` bytes apart of `panel.len()`
        // super-blocks (the `PanelFormat` contract), and reads stop at row
        // `live`, so all are in bounds; AVX2/FMA/F16C are enabled on this fn.
        unsafe {
            for (b, pb) in panel.iter_mut().enumerate() {
                let mut row_runs = [[_mm256_setzero_si256(); 8]; ROWS];
                let mut sc = [[0i16; 16]; 16];
                let mut pairs = [[0i16; 16]; 8];
                let mut d = [0.0f32; ROWS];
                for i in 0..live {
                    let p = w.add(i * wb + b * W_BYTES);
                    row_runs[i] = q6_k_runs(p);
                    d[i] = f16::from_bits((p.add(208) as *const u16).read_unaligned()).to_f32();
                    for j in 0..16 {
                        let s = *p.add(192 + j) as i8 as i16;
                        sc[j][2 * i] = s;
                        sc[j][2 * i + 1] = s;
                        pairs[j / 2][2 * i + j % 2] = s;
                    }
                }
                for r in 0..8 {
                    let steps = transpose_u32(row_runs.map(|runs| runs[r]));
                    pb.quants[r * 8..(r + 1) * 8].copy_from_slice(&steps);
                }
                pb.scales = sc.map(|v| _mm256_loadu_si256(v.as_ptr() as *const __m256i));
                pb.scale_pairs = pairs.map(|v| _mm256_loadu_si256(v.as_ptr() as *const __m256i));
                pb.d = d;
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pass(panel: &[Q6KBlock], a: [*const u8; PASS_TOKENS]) -> [__m256; PASS_TOKENS] {
        let mut acc = [_mm256_setzero_ps(); PASS_TOKENS];
        // SAFETY: every `a[t]` holds `panel.len()` Q8_K blocks (the
        // `PanelFormat` contract), so every read below is in bounds;
        // AVX2/FMA/F16C are enabled on this fn.
        unsafe {
            for (b, pb) in panel.iter().enumerate() {
                let mut sums = [_mm256_setzero_si256(); PASS_TOKENS];
                for r in 0..8 {
                    // Four pairs of steps: two per 16-element sub-block.
                    for half in 0..4 {
                        let scale = pb.scales[2 * r + half / 2];
                        let (x0, x1) =
                            (pb.quants[r * 8 + 2 * half], pb.quants[r * 8 + 2 * half + 1]);
                        for (t, sum) in sums.iter_mut().enumerate() {
                            let y = a[t].add(b * A_BYTES + A_QS + 32 * r + 8 * half);
                            let y0 = _mm256_set1_epi32((y as *const i32).read_unaligned());
                            let y1 = _mm256_set1_epi32((y.add(4) as *const i32).read_unaligned());
                            let s16 = _mm256_add_epi16(
                                _mm256_maddubs_epi16(x0, y0),
                                _mm256_maddubs_epi16(x1, y1),
                            );
                            *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(s16, scale));
                        }
                    }
                }
                let d = _mm256_loadu_ps(pb.d.as_ptr());
                for t in 0..PASS_TOKENS {
                    let blk = a[t].add(b * A_BYTES);
                    // Quants are stored +32: subtract 32 · Σ scale · bsum, with
                    // bsums (one per 16 elements) read as i16 pairs.
                    let mut offset = _mm256_setzero_si256();
                    for (k, pairs) in pb.scale_pairs.iter().enumerate() {
                        let bs = (blk.add(A_BSUMS + 4 * k) as *const i32).read_unaligned();
                        offset = _mm256_add_epi32(
                            offset,
                            _mm256_madd_epi16(*pairs, _mm256_set1_epi32(bs)),
                        );
                    }
                    let total = _mm256_sub_epi32(sums[t], _mm256_slli_epi32::<5>(offset));
                    let da = _mm256_set1_ps((blk as *const f32).read_unaligned());
                    acc[t] =
                        _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(total), acc[t]);
                }
            }
        }
        acc
    }
}
