//! Rotary position embedding, angle for angle as ggml computes it.
//!
//! ggml builds each position's angles by starting at `theta = pos` (as f32)
//! and multiplying by `theta_scale = base^(-2/n_rot)` once per pair, so pair
//! `i` gets `pos * theta_scale^i` with the rounding of `i` successive f32
//! products. A closed-form `pos * base^(-2i/n_rot)` differs in the last bits,
//! and at positions in the thousands those bits become visible angle errors,
//! so this table reproduces the chain instead of storing finished frequencies.
//! Then `theta / freq_factor` (a division, as in ggml), times `freq_scale`
//! (with YaRN, mixed per pair with the unscaled angle: `YarnTerms::theta`),
//! and libm `cosf`/`sinf` times the magnitude `mscale`.

use rocmforge_core::graph::{check_rope, YarnTerms};

/// Which dimensions form the rotated pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i + 1)`: llama, mistral.
    Normal,
    /// Split halves `(i, i + n_rot/2)`: qwen2, qwen3 (GPT-NeoX layout).
    NeoX,
}

pub use rocmforge_core::graph::RopeError;

/// Per-model rotation parameters; [`RopeTable::apply`] derives each
/// position's angles from them.
#[derive(Clone, Debug)]
pub struct RopeTable {
    mode: RopeMode,
    n_rot: usize,
    freq_scale: f32,
    /// `freq_base^(-2/n_rot)`, the per-pair multiplier of ggml's angle chain.
    theta_scale: f32,
    /// Per-pair divisors (llama3's `rope_freqs`); all ones when absent.
    freq_factors: Vec<f32>,
    yarn: YarnTerms,
}

/// Pairs whose cos/sin are computed before being applied to every head;
/// bounds the stack buffer so `apply` needs no allocation.
const PAIR_CHUNK: usize = 64;

impl RopeTable {
    /// Builds the table; see [`RopeTable::try_new`] for parameters read from
    /// a file.
    ///
    /// # Panics
    /// If the parameters are invalid (see [`RopeError`]).
    pub fn new(
        mode: RopeMode,
        n_rot: usize,
        freq_base: f32,
        freq_scale: f32,
        freq_factors: Option<&[f32]>,
    ) -> RopeTable {
        match Self::try_new(mode, n_rot, freq_base, freq_scale, freq_factors) {
            Ok(t) => t,
            Err(e) => panic!("invalid rope parameters: {e}"),
        }
    }

    /// Builds the table, rejecting parameters that make no rotation.
    pub fn try_new(
        mode: RopeMode,
        n_rot: usize,
        freq_base: f32,
        freq_scale: f32,
        freq_factors: Option<&[f32]>,
    ) -> Result<RopeTable, RopeError> {
        check_rope(n_rot, freq_base, freq_scale, freq_factors)?;
        let freq_factors = freq_factors.map_or_else(|| vec![1.0; n_rot / 2], <[f32]>::to_vec);
        // ggml: powf(freq_base, -2.0f/n_dims), all in f32.
        let theta_scale = freq_base.powf(-2.0 / n_rot as f32);
        Ok(RopeTable {
            mode,
            n_rot,
            freq_scale,
            theta_scale,
            freq_factors,
            yarn: YarnTerms {
                ext_factor: 0.0,
                mscale: 1.0,
                corr_dims: [0.0, 0.0],
            },
        })
    }

    /// The table with YaRN's angle mixing and magnitude (see
    /// `RopeSpec::yarn_terms`).
    pub fn with_yarn(self, yarn: YarnTerms) -> RopeTable {
        RopeTable { yarn, ..self }
    }

    pub fn mode(&self) -> RopeMode {
        self.mode
    }

    pub fn n_rot(&self) -> usize {
        self.n_rot
    }

    /// Rotates the first `n_rot` dims of each of `n_heads` heads (`head_dim`
    /// apart) of one token's row, in place; dims past `n_rot` are untouched.
    ///
    /// # Panics
    /// If `n_rot > head_dim` or `row` is shorter than `n_heads * head_dim`.
    pub fn apply(&self, row: &mut [f32], n_heads: usize, head_dim: usize, pos: usize) {
        assert!(
            self.n_rot <= head_dim,
            "rope: n_rot {} > head_dim {head_dim}",
            self.n_rot
        );
        let needed = n_heads
            .checked_mul(head_dim)
            .expect("rope: row size overflows");
        assert!(
            row.len() >= needed,
            "rope: row has {} < {needed} values",
            row.len()
        );

        let half = self.n_rot / 2;
        let (stride, offset) = match self.mode {
            RopeMode::Normal => (2, 1),
            RopeMode::NeoX => (1, half),
        };
        let mut cos = [0.0f32; PAIR_CHUNK];
        let mut sin = [0.0f32; PAIR_CHUNK];
        // ggml passes the position to the cache builder as a float.
        let mut theta = pos as f32;
        for start in (0..half).step_by(PAIR_CHUNK) {
            let n = PAIR_CHUNK.min(half - start);
            for i in 0..n {
                let extrap = theta / self.freq_factors[start + i];
                let t = self.yarn.theta(extrap, self.freq_scale, start + i);
                cos[i] = t.cos() * self.yarn.mscale;
                sin[i] = t.sin() * self.yarn.mscale;
                theta *= self.theta_scale;
            }
            for head in row[..needed].chunks_exact_mut(head_dim) {
                for i in 0..n {
                    let a = (start + i) * stride;
                    let b = a + offset;
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * cos[i] - x1 * sin[i];
                    head[b] = x0 * sin[i] + x1 * cos[i];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol, "[{i}] {x} vs {y}");
        }
    }

    #[test]
    fn position_zero_is_identity() {
        for mode in [RopeMode::Normal, RopeMode::NeoX] {
            let t = RopeTable::new(mode, 8, 10000.0, 1.0, None);
            let orig: Vec<f32> = (0..24).map(|i| i as f32 * 0.37 - 3.0).collect();
            let mut row = orig.clone();
            t.apply(&mut row, 3, 8, 0);
            assert_eq!(row, orig);
        }
    }

    #[test]
    fn one_pair_at_position_one_turns_one_radian() {
        // n_rot = 2: the only pair has theta = pos * base^0 = 1 radian.
        let t = RopeTable::new(RopeMode::Normal, 2, 10000.0, 1.0, None);
        let mut row = [1.0f32, 0.0, 0.0, 1.0];
        t.apply(&mut row, 2, 2, 1);
        let (c, s) = (1.0f32.cos(), 1.0f32.sin());
        assert_close(&row, &[c, s, -s, c], 1e-7);
    }

    #[test]
    fn dims_past_n_rot_are_untouched() {
        let t = RopeTable::new(RopeMode::Normal, 2, 10000.0, 1.0, None);
        let mut row = [1.0f32, 0.0, 5.0, 6.0];
        t.apply(&mut row, 1, 4, 3);
        assert_eq!(&row[2..], &[5.0, 6.0]);
        assert_close(&row[..2], &[3.0f32.cos(), 3.0f32.sin()], 1e-7);
    }

    #[test]
    fn neox_pairs_split_halves() {
        // head_dim 4, base 100: pair 0 = dims (0, 2) at theta = pos,
        // pair 1 = dims (1, 3) at theta = pos * 100^(-1/2) = pos / 10.
        let t = RopeTable::new(RopeMode::NeoX, 4, 100.0, 1.0, None);
        let mut row = [1.0f32, 2.0, 0.0, 0.0];
        t.apply(&mut row, 1, 4, 2);
        let (t0, t1) = (2.0f32, 0.2f32);
        let expect = [t0.cos(), 2.0 * t1.cos(), t0.sin(), 2.0 * t1.sin()];
        assert_close(&row, &expect, 1e-6);

        // The same input in Normal mode pairs (0,1) and (2,3) instead.
        let t = RopeTable::new(RopeMode::Normal, 4, 100.0, 1.0, None);
        let mut row = [1.0f32, 2.0, 0.0, 0.0];
        t.apply(&mut row, 1, 4, 2);
        let expect = [
            t0.cos() - 2.0 * t0.sin(),
            t0.sin() + 2.0 * t0.cos(),
            0.0,
            0.0,
        ];
        assert_close(&row, &expect, 1e-6);
    }

    #[test]
    fn freq_factors_divide_theta_and_freq_scale_multiplies() {
        let base = RopeTable::new(RopeMode::Normal, 4, 100.0, 1.0, None);
        let factored = RopeTable::new(RopeMode::Normal, 4, 100.0, 1.0, Some(&[1.0, 4.0]));
        let scaled = RopeTable::new(RopeMode::Normal, 4, 100.0, 0.25, None);
        let input = [1.0f32, 0.0, 1.0, 0.0];
        let run = |t: &RopeTable, pos| {
            let mut r = input;
            t.apply(&mut r, 1, 4, pos);
            r
        };
        // Pair 1 at pos 40 with factor 4 = pair 1 at pos 10 unfactored.
        let (f, b) = (run(&factored, 40), run(&base, 10));
        assert_close(&f[2..], &b[2..], 1e-6);
        // Pair 0 is unaffected by its factor of 1.
        assert_close(&f[..2], &run(&base, 40)[..2], 0.0);
        // freq_scale 0.25 at pos 40 = pos 10 unscaled, for every pair.
        assert_close(&run(&scaled, 40), &b, 1e-6);
    }

    #[test]
    fn angle_chain_matches_ggml_formula() {
        // Independent restatement of ggml's cache loop for one position.
        let (n_rot, base, pos) = (128usize, 500000.0f32, 4097usize);
        let t = RopeTable::new(RopeMode::NeoX, n_rot, base, 1.0, None);
        let scale = base.powf(-2.0 / n_rot as f32);
        let mut theta = pos as f32;
        let mut row = vec![0.0f32; n_rot];
        for (i, v) in row[..n_rot / 2].iter_mut().enumerate() {
            *v = 1.0 + i as f32;
        }
        let orig = row.clone();
        t.apply(&mut row, 1, n_rot, pos);
        for i in 0..n_rot / 2 {
            let x0 = orig[i];
            assert_eq!(row[i], x0 * theta.cos(), "pair {i}");
            assert_eq!(row[i + n_rot / 2], x0 * theta.sin(), "pair {i}");
            theta *= scale;
        }
    }

    #[test]
    fn many_pairs_span_chunks_and_heads() {
        // n_rot = 2 * (PAIR_CHUNK + 3) exercises the chunked cos/sin path;
        // every head must get the same rotation.
        let n_rot = 2 * (PAIR_CHUNK + 3);
        let t = RopeTable::new(RopeMode::Normal, n_rot, 10000.0, 1.0, None);
        let head: Vec<f32> = (0..n_rot).map(|i| (i as f32 * 0.1).sin()).collect();
        let mut row = [head.clone(), head.clone()].concat();
        t.apply(&mut row, 2, n_rot, 77);
        assert_eq!(row[..n_rot], row[n_rot..]);
        // Rotation preserves each pair's length.
        for i in 0..n_rot / 2 {
            let before = head[2 * i].hypot(head[2 * i + 1]);
            let after = row[2 * i].hypot(row[2 * i + 1]);
            assert!((before - after).abs() < 1e-5, "pair {i}");
        }
        // And the last pair turned by pos * theta_scale^(n_rot/2 - 1).
        let i = n_rot / 2 - 1;
        let angle = |x: f32, y: f32| y.atan2(x);
        let turned = angle(row[2 * i], row[2 * i + 1]) - angle(head[2 * i], head[2 * i + 1]);
        let expect = 77.0 * 10000.0f32.powf(-2.0 * i as f32 / n_rot as f32);
        assert!((turned - expect).abs() < 1e-4, "{turned} vs {expect}");
    }

    #[test]
    fn bad_parameters_are_errors() {
        let mk = |n, b, s, ff| RopeTable::try_new(RopeMode::Normal, n, b, s, ff).err();
        assert_eq!(mk(3, 1e4, 1.0, None), Some(RopeError::OddOrZeroDims(3)));
        assert_eq!(mk(0, 1e4, 1.0, None), Some(RopeError::OddOrZeroDims(0)));
        assert!(matches!(
            mk(4, 0.0, 1.0, None),
            Some(RopeError::BadBaseOrScale { .. })
        ));
        assert!(matches!(
            mk(4, 1e4, f32::NAN, None),
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
            mk(4, 1e4, 1.0, Some(&[1.0, 0.0])),
            Some(RopeError::BadFreqFactor {
                index: 1,
                value: 0.0
            })
        );
    }
}
