//! Next-token sampling, following llama.cpp's default sampler chain:
//! repetition penalty → top-k → top-p → min-p → temperature → seeded draw.
//!
//! The filters run on temperature-1 logits because llama.cpp applies the
//! temperature last; top-p and min-p therefore cut on the model's own
//! distribution, and the temperature only reshapes what survives.
//!
//! Randomness comes from a SplitMix64 generator written here rather than a
//! crate: it is a dozen lines, needs no dependency, and is pure integer
//! arithmetic, so a seed gives the same stream of uniforms on every platform.
//! (llama.cpp uses `std::mt19937`, so the same seed does not give the same
//! tokens as llama.cpp; only the distribution is the same.)

use std::cmp::Ordering;
use std::collections::VecDeque;
use thiserror::Error;

/// A sampling parameter outside its meaningful range.
#[derive(Debug, Error, Clone, Copy, PartialEq)]
pub enum SamplerError {
    #[error("temperature {0} must be a finite number >= 0 (0 = greedy)")]
    Temperature(f32),
    #[error("top_p {0} must be in (0, 1] (1 = off)")]
    TopP(f32),
    #[error("min_p {0} must be in [0, 1] (0 = off)")]
    MinP(f32),
    #[error("repeat_penalty {0} must be a finite number > 0 (1 = off)")]
    RepeatPenalty(f32),
}

/// Sampling parameters; the neutral value of each filter turns it off.
#[derive(Clone, Debug)]
pub struct SamplerConfig {
    /// `<= 0`: greedy (argmax, ties to the lowest id).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest most-likely set with probability mass `>= top_p`; 1 = off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely; 0 = off.
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recent tokens; 1 = off.
    pub repeat_penalty: f32,
    /// How many of the last accepted tokens the penalty looks at; 0 = off.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults, with a fixed seed instead of a random one so
    /// that runs are reproducible unless a seed is chosen.
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Rejects values that have no meaning (NaN, negative temperature, ...).
    pub fn validate(&self) -> Result<(), SamplerError> {
        let t = self.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(SamplerError::Temperature(t));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplerError::TopP(self.top_p));
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            return Err(SamplerError::MinP(self.min_p));
        }
        let r = self.repeat_penalty;
        if !(r.is_finite() && r > 0.0) {
            return Err(SamplerError::RepeatPenalty(r));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Candidate {
    id: u32,
    logit: f32,
}

/// Most likely first; equal logits by ascending id, so every filter breaks
/// ties the way greedy does. Candidates never hold NaN (see `load`).
fn rank(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit
        .partial_cmp(&a.logit)
        .unwrap_or(Ordering::Equal)
        .then(a.id.cmp(&b.id))
}

/// Candidates shown to top-p per step before it sorts further; most
/// distributions reach the mass within the first few dozen tokens, so a
/// 150k vocabulary is rarely sorted beyond this.
const TOP_P_FIRST_PREFIX: usize = 64;

/// A stateful sampler: owns the RNG and the window of recent tokens.
pub struct Sampler {
    cfg: SamplerConfig,
    rng: SplitMix64,
    recent: VecDeque<u32>,
    cands: Vec<Candidate>,
    /// Reused buffer for the distinct ids in the penalty window.
    distinct: Vec<u32>,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Result<Sampler, SamplerError> {
        cfg.validate()?;
        Ok(Sampler {
            rng: SplitMix64(cfg.seed),
            cfg,
            recent: VecDeque::new(),
            cands: Vec::new(),
            distinct: Vec::new(),
        })
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Picks the next token from one row of logits. NaN logits are treated
    /// as impossible; an empty row yields 0.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.load(logits);
        self.apply_repeat_penalty();
        if self.cfg.temperature <= 0.0 {
            return self.argmax();
        }
        self.truncate();
        let t = self.cfg.temperature;
        for c in &mut self.cands {
            c.logit /= t;
        }
        self.draw()
    }

    /// Records a token as part of the sequence (for the repetition penalty).
    pub fn accept(&mut self, id: u32) {
        if self.cfg.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.cfg.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }

    /// Forgets accepted tokens (a new, unrelated sequence); the RNG continues.
    pub fn reset(&mut self) {
        self.recent.clear();
    }

    fn load(&mut self, logits: &[f32]) {
        self.cands.clear();
        // Zipping with the id range also bounds a (theoretical) > 2^32 vocab.
        self.cands
            .extend((0..=u32::MAX).zip(logits).map(|(id, &l)| Candidate {
                id,
                logit: if l.is_nan() { f32::NEG_INFINITY } else { l },
            }));
    }

    /// Applied once per distinct recent token, however often it occurred,
    /// as llama.cpp's `penalty_repeat` does. Must run before any filter:
    /// candidates are still indexed by id here.
    fn apply_repeat_penalty(&mut self) {
        let penalty = self.cfg.repeat_penalty;
        if penalty == 1.0 || self.recent.is_empty() {
            return;
        }
        self.distinct.clear();
        self.distinct.extend(self.recent.iter().copied());
        self.distinct.sort_unstable();
        self.distinct.dedup();
        for &id in &self.distinct {
            if let Some(c) = self.cands.get_mut(id as usize) {
                c.logit = if c.logit > 0.0 {
                    c.logit / penalty
                } else {
                    c.logit * penalty
                };
            }
        }
    }

    fn argmax(&self) -> u32 {
        let Some(&first) = self.cands.first() else {
            return 0;
        };
        let mut best = first;
        for &c in &self.cands[1..] {
            if c.logit > best.logit {
                best = c;
            }
        }
        best.id
    }

    /// The three cuts of the tail, in llama.cpp's order.
    fn truncate(&mut self) {
        self.top_k();
        self.top_p();
        self.min_p();
    }

    /// Partial selection, then sorts only the k survivors.
    fn top_k(&mut self) {
        let k = self.cfg.top_k;
        if k == 0 || k >= self.cands.len() {
            return;
        }
        self.cands.select_nth_unstable_by(k - 1, rank);
        self.cands.truncate(k);
        self.cands.sort_unstable_by(rank);
    }

    /// Keeps the most likely tokens until their mass reaches `top_p`
    /// (including the one that crosses it). Sorts a growing prefix instead
    /// of the whole vocabulary.
    fn top_p(&mut self) {
        let p = f64::from(self.cfg.top_p);
        let n = self.cands.len();
        if p >= 1.0 || n == 0 {
            return;
        }
        let max = max_logit(&self.cands);
        if max == f32::NEG_INFINITY {
            return;
        }
        let total: f64 = self.cands.iter().map(|c| weight(c.logit, max)).sum();
        let mut cum = 0.0f64;
        let mut sorted = 0;
        let mut prefix = TOP_P_FIRST_PREFIX.min(n);
        loop {
            sort_prefix(&mut self.cands, sorted, prefix);
            for i in sorted..prefix {
                cum += weight(self.cands[i].logit, max) / total;
                if cum >= p {
                    self.cands.truncate(i + 1);
                    return;
                }
            }
            if prefix == n {
                return;
            }
            sorted = prefix;
            prefix = prefix.saturating_mul(2).min(n);
        }
    }

    /// Keeps tokens with `p >= min_p * p_max`, i.e. in logit space
    /// `logit >= max + ln(min_p)`, which needs no softmax and no sort.
    fn min_p(&mut self) {
        let m = self.cfg.min_p;
        if m <= 0.0 || self.cands.is_empty() {
            return;
        }
        let threshold = max_logit(&self.cands) + m.ln();
        self.cands.retain(|c| c.logit >= threshold);
    }

    /// Inverse-CDF draw over the surviving candidates.
    fn draw(&mut self) -> u32 {
        let Some(first) = self.cands.first() else {
            return 0;
        };
        let max = max_logit(&self.cands);
        if max == f32::NEG_INFINITY {
            // Nothing is possible; fall back to the first (lowest-id) token.
            return first.id;
        }
        let total: f64 = self.cands.iter().map(|c| weight(c.logit, max)).sum();
        let target = self.rng.next_f64() * total;
        let mut cum = 0.0f64;
        let mut last = first.id;
        for c in &self.cands {
            let w = weight(c.logit, max);
            if w > 0.0 {
                cum += w;
                last = c.id;
                if target < cum {
                    return c.id;
                }
            }
        }
        // Only reachable through rounding at the very top of the range.
        last
    }
}

fn max_logit(cands: &[Candidate]) -> f32 {
    cands
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max)
}

/// Unnormalised probability, `e^(logit - max)` (f32 exp as llama.cpp, summed
/// in f64 by the callers).
fn weight(logit: f32, max: f32) -> f64 {
    f64::from((logit - max).exp())
}

/// Given `cands[..sorted]` already sorted and ranked above everything after
/// it, extends that to `cands[..prefix]`.
fn sort_prefix(cands: &mut [Candidate], sorted: usize, prefix: usize) {
    let rest = &mut cands[sorted..];
    let want = prefix - sorted;
    if want == 0 {
        return;
    }
    if want < rest.len() {
        rest.select_nth_unstable_by(want - 1, rank);
    }
    rest[..want].sort_unstable_by(rank);
}

/// SplitMix64 (Steele, Lea & Flood, 2014): one 64-bit word of state, passes
/// BigCrush, and every seed (including 0) is a good one.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests;
