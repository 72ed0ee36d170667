//! Quantize → dequantize error bounds, and blocks with special content.
//!
//! Bounds are for standard normal data. Uniform rounding noise is
//! `step / sqrt(12)`; with a 32-element block's max |x| ≈ 2.2σ that gives
//! ≈ 0.5% for Q8_0 (`step = 2.2 / 127`) and ≈ 8% for Q4_0 (`step = 2.2 / 8`).
//! MXFP4 is coarser (≈ 11%): its scale is a power of two, so a block's max
//! lands anywhere in [4, 8) of an E2M1 grid that ends at 6, and the grid's
//! steps widen away from zero.
//! Each bound sits a little above what ggml's own reference quantizers reach
//! (ours are bit-identical, see `ggml_parity`), so a regression in either the
//! scale search or the decoder trips it.

use super::data::{gaussian, importance, rel_rms, weights};
use crate::quant::{dequantize, quantize_to_vec, quantize_to_vec_with_importance, QuantType};

const TYPES_WITH_CODEC: [QuantType; 18] = [
    QuantType::F32,
    QuantType::F16,
    QuantType::BF16,
    QuantType::Q4_0,
    QuantType::Q4_1,
    QuantType::Q5_0,
    QuantType::Q5_1,
    QuantType::Q8_0,
    QuantType::Q8_1,
    QuantType::Q2K,
    QuantType::Q3K,
    QuantType::Q4K,
    QuantType::Q5K,
    QuantType::Q6K,
    QuantType::Q8K,
    QuantType::IQ4NL,
    QuantType::IQ4XS,
    QuantType::MXFP4,
];

fn round_trip(ty: QuantType, x: &[f32]) -> Vec<f32> {
    decoded(ty, &quantize_to_vec(ty, x).unwrap())
}

fn decoded(ty: QuantType, q: &[u8]) -> Vec<f32> {
    let mut y = vec![f32::NAN; q.len() / ty.type_size() * ty.block_size()];
    dequantize(ty, q, &mut y).unwrap();
    y
}

/// The lattice i-quants; ggml quantizes the first two and IQ1_S only with
/// an importance.
const IQUANTS: [QuantType; 7] = [
    QuantType::IQ2XXS,
    QuantType::IQ2XS,
    QuantType::IQ1S,
    QuantType::IQ2S,
    QuantType::IQ3XXS,
    QuantType::IQ3S,
    QuantType::IQ1M,
];

/// Quantizes with ggml's unweighted quantizer, or with a flat importance
/// where ggml has none.
fn round_trip_iq(ty: QuantType, x: &[f32]) -> Vec<f32> {
    if ty.needs_importance() {
        let flat = vec![1.0; 256];
        decoded(ty, &quantize_to_vec_with_importance(ty, x, &flat).unwrap())
    } else {
        round_trip(ty, x)
    }
}

#[test]
fn relative_rms_error_bounds() {
    let bounds: [(QuantType, f64); 18] = [
        (QuantType::F32, 0.0),
        (QuantType::F16, 0.0003),
        (QuantType::BF16, 0.002),
        (QuantType::Q4_0, 0.10),
        (QuantType::Q4_1, 0.09),
        (QuantType::Q5_0, 0.05),
        (QuantType::Q5_1, 0.045),
        (QuantType::Q8_0, 0.007),
        (QuantType::Q8_1, 0.007),
        (QuantType::Q2K, 0.33),
        (QuantType::Q3K, 0.17),
        (QuantType::Q4K, 0.08),
        (QuantType::Q5K, 0.042),
        (QuantType::Q6K, 0.021),
        (QuantType::Q8K, 0.009),
        (QuantType::IQ4NL, 0.085),
        (QuantType::IQ4XS, 0.085),
        (QuantType::MXFP4, 0.12),
    ];
    let x = gaussian(7, 256 * 16);
    for (ty, bound) in bounds {
        let err = rel_rms(&x, &round_trip(ty, &x));
        assert!(err <= bound, "{ty}: relative RMS error {err:.5} > {bound}");
    }
}

#[test]
fn every_type_survives_outliers_and_special_blocks() {
    // Super-blocks 13..16 are all-zero, all-positive and constant.
    let x = weights(11, 256 * 16);
    for ty in TYPES_WITH_CODEC {
        let y = round_trip(ty, &x);
        assert!(y.iter().all(|v| v.is_finite()), "{ty}");
        assert!(
            y[13 * 256..14 * 256].iter().all(|&v| v == 0.0),
            "{ty}: zero block"
        );
        let positive = &x[14 * 256..15 * 256];
        let err = rel_rms(positive, &y[14 * 256..15 * 256]);
        assert!(err < 0.35, "{ty}: all-positive block error {err}");
        let constant = &y[15 * 256..16 * 256];
        assert!(
            constant.iter().all(|v| (v - 0.5).abs() < 0.1),
            "{ty}: constant block {:?}",
            &constant[..4]
        );
    }
}

#[test]
fn activation_types_carry_consistent_sums() {
    let x = gaussian(3, 512);
    let q8_1 = quantize_to_vec(QuantType::Q8_1, &x).unwrap();
    for b in q8_1.chunks_exact(36) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let s = half::f16::from_le_bytes([b[2], b[3]]).to_f32();
        let sum: i32 = b[4..].iter().map(|&q| q as i8 as i32).sum();
        let expected = d * sum as f32;
        assert!(
            (s - expected).abs() <= expected.abs() * 1e-3 + 1e-6,
            "{s} vs {expected}"
        );
    }
    let q8k = quantize_to_vec(QuantType::Q8K, &x).unwrap();
    for b in q8k.chunks_exact(292) {
        for j in 0..16 {
            let sum: i32 = b[4 + 16 * j..20 + 16 * j]
                .iter()
                .map(|&q| q as i8 as i32)
                .sum();
            let stored = i16::from_le_bytes([b[260 + 2 * j], b[261 + 2 * j]]);
            assert_eq!(stored as i32, sum);
        }
    }
}

#[test]
fn requantizing_decoded_symmetric_blocks_is_exact() {
    // A Q4_0/Q8_0 block decodes to multiples of d including the extreme level,
    // so quantizing the decoded values must reproduce the bytes.
    for ty in [QuantType::Q4_0, QuantType::Q8_0] {
        let q = quantize_to_vec(ty, &gaussian(5, 1024)).unwrap();
        let mut y = vec![0.0; 1024];
        dequantize(ty, &q, &mut y).unwrap();
        assert_eq!(quantize_to_vec(ty, &y).unwrap(), q, "{ty}");
    }
}

#[test]
fn iquant_relative_rms_error_bounds() {
    // A little above what ggml's quantizers (ours are bit-identical) reach on
    // standard normal data: 2-bit lattices keep ~70% of the signal, IQ1 ~50%.
    let bounds = [
        (QuantType::IQ2XXS, 0.35),
        (QuantType::IQ2XS, 0.31),
        (QuantType::IQ1S, 0.49),
        (QuantType::IQ2S, 0.275),
        (QuantType::IQ3XXS, 0.23),
        (QuantType::IQ3S, 0.17),
        (QuantType::IQ1M, 0.58),
    ];
    let x = gaussian(7, 256 * 16);
    for (ty, bound) in bounds {
        let err = rel_rms(&x, &round_trip_iq(ty, &x));
        assert!(err <= bound, "{ty}: relative RMS error {err:.5} > {bound}");
    }
}

#[test]
fn iquants_survive_outliers_and_special_blocks() {
    let x = weights(11, 256 * 16);
    for ty in IQUANTS {
        let y = round_trip_iq(ty, &x);
        assert!(y.iter().all(|v| v.is_finite()), "{ty}");
        assert!(
            y[13 * 256..14 * 256].iter().all(|&v| v == 0.0),
            "{ty}: zero block"
        );
        let err = rel_rms(&x[14 * 256..15 * 256], &y[14 * 256..15 * 256]);
        assert!(err < 0.52, "{ty}: all-positive block error {err}");
        // Not every lattice has a point with 8 equal coordinates (IQ2_XXS's
        // nearest is uneven), so a constant block is only roughly kept.
        let constant = &y[15 * 256..16 * 256];
        assert!(
            constant.iter().all(|v| (v - 0.5).abs() < 0.4),
            "{ty}: constant block {:?}",
            &constant[..8]
        );
    }
}

/// Sum of `w[i % w.len()] (x - y)²`.
fn weighted_error(x: &[f32], y: &[f32], w: &[f32]) -> f64 {
    x.iter()
        .zip(y)
        .enumerate()
        .map(|(i, (&a, &b))| w[i % w.len()] as f64 * ((a - b) as f64).powi(2))
        .sum()
}

#[test]
fn importance_lowers_the_weighted_error() {
    // The importance-weighted error is what the weighted quantizers minimise:
    // they must beat the unweighted ones (or a flat importance) on it.
    let x = weights(11, 256 * 16);
    let w = importance(5, 1024);
    for ty in IQUANTS {
        let weighted = decoded(ty, &quantize_to_vec_with_importance(ty, &x, &w).unwrap());
        let plain = round_trip_iq(ty, &x);
        let (a, b) = (
            weighted_error(&x, &weighted, &w),
            weighted_error(&x, &plain, &w),
        );
        assert!(a < 0.9 * b, "{ty}: weighted {a} vs unweighted {b}");
    }
}

#[test]
fn ternary_inputs_round_trip_exactly() {
    // Values in {-0.75, 0, 0.75} with 0.75 in every block: the scale is
    // exact in binary16 and every element a trit.
    let x: Vec<f32> = gaussian(9, 1024)
        .iter()
        .enumerate()
        .map(|(i, &g)| {
            if i % 256 == 3 {
                0.75
            } else {
                0.75 * (g * 1.5).round().clamp(-1.0, 1.0)
            }
        })
        .collect();
    for ty in [QuantType::TQ1_0, QuantType::TQ2_0] {
        assert_eq!(round_trip(ty, &x), x, "{ty}");
        let zero = round_trip(ty, &[0.0; 256]);
        assert!(zero.iter().all(|&v| v == 0.0), "{ty}");
    }
}

#[test]
fn iq3_s_groups_after_an_all_zero_group_stay_in_place() {
    // ggml's IQ3_S quantizer does not advance its write position past an
    // exactly-zero 32-element group, so the later groups of that block land
    // one slot early; ours writes each group at its own position (quant::iq3).
    let mut x = gaussian(13, 512);
    x[64..96].fill(0.0);
    let y = round_trip(QuantType::IQ3S, &x);
    let err = rel_rms(&x[96..256], &y[96..256]);
    assert!(err < 0.2, "groups after the zero one: {err}");
    // The zero group keeps index 0 and the smallest scale: tiny values.
    let peak = x[..256].iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(
        y[64..96].iter().all(|v| v.abs() < 0.05 * peak),
        "{:?}",
        &y[64..72]
    );
}
