//! Llama 3.1-style RoPE scaling as the converter stores it: one divisor per
//! rotated pair in `rope_freqs.weight`, which llama.cpp applies to the base
//! frequencies (`theta_i / factor_i`).

use crate::presets::Llama3RopeScaling;

/// The `head_dim / 2` factors for pairs `i = 0, 2, 4, ...` of a `head_dim`-wide
/// head. Wavelengths shorter than `original_context / high_freq_factor` keep
/// their frequency (factor 1), those longer than `original_context /
/// low_freq_factor` are slowed by `factor`, and the band between blends the two.
///
/// Computed in f32 like the converter (PyTorch float32 tensors), so the stored
/// values match a converted file to the bit or nearly.
pub fn llama3_rope_factors(s: &Llama3RopeScaling, base: f64, head_dim: u64) -> Vec<f32> {
    let factor = s.factor as f32;
    let low = s.low_freq_factor as f32;
    let high = s.high_freq_factor as f32;
    let old_ctx = s.original_context as f32;
    let low_freq_wavelen = old_ctx / low;
    let high_freq_wavelen = old_ctx / high;
    (0..head_dim)
        .step_by(2)
        .map(|i| {
            let freq = 1.0 / (base as f32).powf(i as f32 / head_dim as f32);
            let wavelen = 2.0 * std::f32::consts::PI / freq;
            if wavelen < high_freq_wavelen {
                1.0
            } else if wavelen > low_freq_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA32: Llama3RopeScaling = Llama3RopeScaling {
        factor: 32.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 8192.0,
    };

    #[test]
    fn llama32_factors() {
        let f = llama3_rope_factors(&LLAMA32, 500000.0, 64);
        assert_eq!(f.len(), 32);
        // Pair 0 turns once per 2*pi positions: far shorter than 8192/4.
        assert_eq!(f[0], 1.0);
        // The slowest pair: 2*pi * 500000^(62/64) positions, far beyond 8192.
        assert_eq!(f[31], 32.0);
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
        // Blend band, recomputed in f64 from the Llama 3.1 reference formula.
        let mut blended = 0;
        for (k, &got) in f.iter().enumerate() {
            let wavelen = 2.0 * std::f64::consts::PI * 500000f64.powf(2.0 * k as f64 / 64.0);
            if (2048.0..=8192.0).contains(&wavelen) {
                let smooth = (8192.0 / wavelen - 1.0) / 3.0;
                let want = 1.0 / ((1.0 - smooth) / 32.0 + smooth);
                assert!(
                    (got as f64 - want).abs() < 1e-4 * want,
                    "pair {k}: {got} vs {want}"
                );
                blended += 1;
            }
        }
        assert!(
            blended >= 2,
            "the band between the cut-offs holds several pairs"
        );
        assert!(f.iter().any(|&x| x > 1.0 && x < 32.0));
    }
}
