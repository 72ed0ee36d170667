//! Quantizing activation rows to the weight type's activation type.
//!
//! Q8_0 and Q8_1 follow ggml's x86 SIMD quantizer rather than its scalar
//! reference: the inverse scale is `127 / amax` (not `1 / d`) and rounding is
//! half-to-even. That is what the llama.cpp reference run computed, and it
//! decides the last bit of a few quants per row. Q8_K uses ggml's reference
//! quantizer, as ggml's x86 build does.

use half::{bf16, f16};
use rocmforge_core::quant::{quantize, QuantType};

use super::{activation_type, row_bytes};

/// Quantizes the activation row `x` for weights of type `weight` into `out`,
/// resized to the activation type's row size.
///
/// # Panics
/// If `x.len()` is not a whole number of activation blocks.
pub fn quantize_activation(weight: QuantType, x: &[f32], out: &mut Vec<u8>) {
    out.resize(row_bytes(activation_type(weight), x.len()), 0);
    quantize_activation_into(weight, x, out);
}

/// [`quantize_activation`] into a caller-sized buffer of exactly
/// `activation_type(weight).bytes_for(x.len())` bytes.
///
/// # Panics
/// If `out` has the wrong size or `x.len()` is not a whole number of blocks.
pub fn quantize_activation_into(weight: QuantType, x: &[f32], out: &mut [u8]) {
    let act = activation_type(weight);
    let bytes = row_bytes(act, x.len());
    assert_eq!(
        out.len(),
        bytes,
        "{act} activation row of {} elements",
        x.len()
    );
    match act {
        QuantType::Q8_0 => {
            for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
                let (d, _) = q8_block(xb, &mut ob[2..]);
                ob[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            }
        }
        QuantType::Q8_1 => {
            for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(36)) {
                let (d, sum) = q8_block(xb, &mut ob[4..]);
                ob[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                ob[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
            }
        }
        QuantType::Q8K => {
            // Lengths were checked above, so this cannot fail.
            quantize(QuantType::Q8K, x, out).expect("Q8_K row length checked");
        }
        QuantType::F16 => {
            for (v, ob) in x.iter().zip(out.chunks_exact_mut(2)) {
                ob.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        QuantType::BF16 => {
            for (v, ob) in x.iter().zip(out.chunks_exact_mut(2)) {
                ob.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
            }
        }
        _ => {
            for (v, ob) in x.iter().zip(out.chunks_exact_mut(4)) {
                ob.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// One 32-element 8-bit block: writes the quants, returns the f32 scale
/// (before its f16 rounding, which the Q8_1 sum uses) and the sum of quants.
fn q8_block(x: &[f32], q: &mut [u8]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    if super::detected_isa() == super::Isa::Avx2 && x.len() == 32 && q.len() >= 32 {
        // SAFETY: AVX2 detected, 32 inputs and 32 outputs checked.
        return unsafe { q8_block_avx2(x, q) };
    }
    q8_block_scalar(x, q)
}

/// [`q8_block`] with vector rounding: without SSE4.1 in the baseline target,
/// `round_ties_even` is a call to `rintf` per element, which cost more than
/// the matmul it feeds at prefill. Same operations, same bits.
///
/// # Safety
/// AVX2/FMA/F16C available; `x` holds at least 32 floats and `q` at least
/// 32 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_block_avx2(x: &[f32], q: &mut [u8]) -> (f32, i32) {
    use std::arch::x86_64::*;
    let p = x.as_ptr();
    // SAFETY: the caller guarantees 32 inputs (this fn's contract), so each
    // load of eight stays in `x`.
    let v = [0, 8, 16, 24].map(|i| unsafe { _mm256_loadu_ps(p.add(i)) });
    let sign = _mm256_set1_ps(-0.0);
    let m = v.iter().fold(_mm256_setzero_ps(), |m, &vi| {
        _mm256_max_ps(m, _mm256_andnot_ps(sign, vi))
    });
    let m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let i = v.map(|vi| {
        let r = _mm256_round_ps(
            _mm256_mul_ps(vi, id),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        );
        _mm256_cvtps_epi32(r)
    });
    let s = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    let s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0b01_00_11_10));
    let s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0b10_11_00_01));
    // The packs work per 128-bit half; the permute restores element order.
    let packed = _mm256_packs_epi16(
        _mm256_packs_epi32(i[0], i[1]),
        _mm256_packs_epi32(i[2], i[3]),
    );
    let ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: the caller guarantees room for 32 quants in `q` (this fn's
    // contract).
    unsafe { _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, ordered) };
    (d, _mm_cvtsi128_si32(s4))
}

fn q8_block_scalar(x: &[f32], q: &mut [u8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0;
    for (o, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round_ties_even() as i32;
        sum += r;
        *o = r as i8 as u8;
    }
    (d, sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_q8_block_matches_scalar() {
        let mut blocks = vec![vec![0.0f32; 32]];
        // amax 127 makes the inverse scale 1, so these land on exact ties.
        let mut ties: Vec<f32> = (0..32).map(|i| i as f32 - 15.5).collect();
        ties[31] = 127.0;
        blocks.push(ties);
        for seed in 0..64 {
            blocks.push(crate::kernels::test_noise(32, seed, 1.0 + seed as f32));
        }
        for x in &blocks {
            let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
            let got = q8_block(x, &mut a);
            let want = q8_block_scalar(x, &mut b);
            assert_eq!((got.0.to_bits(), got.1, a), (want.0.to_bits(), want.1, b));
        }
    }
}
