//! RoPE parameters every backend must reject the same way, checked once here
//! before any backend builds tables or kernels from them.

use thiserror::Error;

use super::RopeSpec;

/// Parameters that cannot describe a rotation.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum RopeError {
    #[error("rotated dimension count {0} must be even and non-zero")]
    OddOrZeroDims(usize),
    #[error("rotated dimension count {n_rot} exceeds the head dimension {head_dim}")]
    TooManyDims { n_rot: usize, head_dim: usize },
    #[error("rope frequency factors: expected {expected} values (n_rot/2), got {got}")]
    FreqFactorsLength { expected: usize, got: usize },
    #[error("rope frequency factor {index} is {value}, must be finite and positive")]
    BadFreqFactor { index: usize, value: f32 },
    #[error("rope base {base} / scale {scale} must be finite and positive")]
    BadBaseOrScale { base: f32, scale: f32 },
}

/// Checks rotation parameters: `n_rot` even and non-zero, base and scale
/// finite and positive, and, when given, one finite positive frequency factor
/// per rotated pair.
pub fn check_rope(
    n_rot: usize,
    freq_base: f32,
    freq_scale: f32,
    freq_factors: Option<&[f32]>,
) -> Result<(), RopeError> {
    if n_rot == 0 || !n_rot.is_multiple_of(2) {
        return Err(RopeError::OddOrZeroDims(n_rot));
    }
    let positive = |v: f32| v.is_finite() && v > 0.0;
    if !positive(freq_base) || !positive(freq_scale) {
        return Err(RopeError::BadBaseOrScale {
            base: freq_base,
            scale: freq_scale,
        });
    }
    if let Some(ff) = freq_factors {
        if ff.len() != n_rot / 2 {
            return Err(RopeError::FreqFactorsLength {
                expected: n_rot / 2,
                got: ff.len(),
            });
        }
        if let Some((index, &value)) = ff.iter().enumerate().find(|(_, &v)| !positive(v)) {
            return Err(RopeError::BadFreqFactor { index, value });
        }
    }
    Ok(())
}

impl RopeSpec {
    /// Checks the graph's rotation against its head size; `freq_factors` are
    /// the values of [`RopeSpec::freq_factors`], read by the caller from
    /// wherever its weights live.
    pub fn check(&self, head_dim: usize, freq_factors: Option<&[f32]>) -> Result<(), RopeError> {
        check_rope(self.n_rot, self.freq_base, self.freq_scale, freq_factors)?;
        if let Some(l) = self.local {
            check_rope(self.n_rot, l.freq_base, l.freq_scale, None)?;
        }
        if self.n_rot > head_dim {
            return Err(RopeError::TooManyDims {
                n_rot: self.n_rot,
                head_dim,
            });
        }
        Ok(())
    }

    /// `freq_base^(-2/n_rot)` in f32, the per-pair multiplier of ggml's angle
    /// chain (`theta_i = pos * theta_scale^i`, as `i` successive products).
    pub fn theta_scale(&self) -> f32 {
        self.freq_base.powf(-2.0 / self.n_rot as f32)
    }

    /// The YaRN terms of this spec's rotation (use it on [`RopeSpec::for_op`]'s
    /// result: the correction dims depend on the base, and the magnitude on
    /// the scale). Without YaRN: no mixing, and `mscale` is `attn_factor`.
    pub fn yarn_terms(&self) -> YarnTerms {
        let Some(y) = self.yarn else {
            return YarnTerms {
                ext_factor: 0.0,
                mscale: self.attn_factor,
                corr_dims: [0.0, 0.0],
            };
        };
        // ggml_rope_yarn_corr_dims, all in f32: the first pair whose
        // wavelength exceeds the original context `beta` times over.
        let n_dims = self.n_rot as f32;
        let corr_dim = |beta: f32| {
            n_dims * (y.n_ctx_orig as f32 / (beta * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * self.freq_base.ln())
        };
        let start = corr_dim(y.beta_fast).floor();
        let end = corr_dim(y.beta_slow).ceil();
        YarnTerms {
            ext_factor: 1.0,
            // ggml's rope_yarn: the magnitude grows with the interpolation.
            mscale: self.attn_factor * (1.0 + 0.1 * (1.0 / self.freq_scale).ln()),
            corr_dims: [start.max(0.0), end.min(n_dims - 1.0)],
        }
    }
}

/// Per-op YaRN values, as ggml's rope kernels take them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YarnTerms {
    /// 1 with YaRN (pairs below `corr_dims[0]` keep their extrapolated
    /// angle, those above `corr_dims[1]` the interpolated one, a linear
    /// ramp between), 0 without.
    pub ext_factor: f32,
    /// Multiplier of every cos and sin.
    pub mscale: f32,
    pub corr_dims: [f32; 2],
}

impl YarnTerms {
    /// The angle of pair `i` from its unscaled angle `theta_extrap`, as
    /// ggml's `rope_yarn`.
    pub fn theta(&self, theta_extrap: f32, freq_scale: f32, i: usize) -> f32 {
        let theta_interp = freq_scale * theta_extrap;
        if self.ext_factor == 0.0 {
            return theta_interp;
        }
        let [low, high] = self.corr_dims;
        let y = (i as f32 - low) / (high - low).max(0.001);
        let ramp_mix = (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor;
        theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix
    }
}

/// llama.cpp's `yarn_attn_factor` for a graph: YaRN's magnitude for a
/// position scale of `freq_scale`, divided by the factor ggml's kernel
/// applies again (so it counts once), times the file's
/// `rope.scaling.attn_factor`. Without YaRN, the file's factor alone.
///
/// `log_mul` (`rope.scaling.yarn_log_multiplier`, Mistral 3's
/// `mscale_all_dim`) divides the magnitude by its own: llama.cpp's
/// `get_mscale(factor, 1) / get_mscale(factor, log_mul)`.
pub fn yarn_attn_factor(
    yarn: bool,
    freq_scale: f32,
    file_attn_factor: f32,
    log_mul: Option<f32>,
) -> f32 {
    let mut f = 1.0f32;
    if yarn {
        let factor = 1.0 / freq_scale;
        let get_mscale = |mscale: f32| {
            if factor <= 1.0 {
                1.0
            } else {
                0.1 * mscale * factor.ln() + 1.0
            }
        };
        let mscale = match log_mul {
            Some(all_dims) => get_mscale(1.0) / get_mscale(all_dims),
            None => get_mscale(1.0),
        };
        f = mscale * (1.0 / (1.0 + 0.1 * factor.ln()));
    }
    f * file_attn_factor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_parameters_are_errors() {
        let mk = |n, b, s, ff| check_rope(n, b, s, ff).err();
        assert_eq!(mk(3, 1e4, 1.0, None), Some(RopeError::OddOrZeroDims(3)));
        assert_eq!(mk(0, 1e4, 1.0, None), Some(RopeError::OddOrZeroDims(0)));
        assert!(matches!(
            mk(4, f32::NAN, 1.0, None),
            Some(RopeError::BadBaseOrScale { .. })
        ));
        assert!(matches!(
            mk(4, 1e4, 0.0, None),
            Some(RopeError::BadBaseOrScale { .. })
        ));
        assert_eq!(
            mk(4, 1e4, 1.0, Some(&[1.0])),
            Some(RopeError::FreqFactorsLength {
                expected: 2,
                got: 1
            })
        );
        assert_eq!(
            mk(4, 1e4, 1.0, Some(&[1.0, -2.0])),
            Some(RopeError::BadFreqFactor {
                index: 1,
                value: -2.0
            })
        );
        assert_eq!(mk(4, 1e4, 1.0, Some(&[1.0, 2.0])), None);
    }

    #[test]
    fn n_rot_beyond_head_is_an_error() {
        let spec = RopeSpec {
            neox: false,
            n_rot: 128,
            freq_base: 1e4,
            freq_scale: 1.0,
            freq_factors: None,
            local: None,
            yarn: None,
            attn_factor: 1.0,
        };
        assert_eq!(
            spec.check(64, None),
            Err(RopeError::TooManyDims {
                n_rot: 128,
                head_dim: 64
            })
        );
        assert_eq!(spec.check(128, None), Ok(()));
    }
}
