//! Perplexity of a text, by llama.cpp's `llama-perplexity` method, so the
//! number is comparable with the one it prints for the same model and text.
//!
//! The method: the whole text is tokenized once (with BOS if the model adds
//! it), cut into chunks of `n_ctx` tokens (a partial last chunk is dropped),
//! and each chunk is evaluated from an empty KV cache with its first token
//! replaced by BOS when the model adds BOS. Only the second half of each
//! chunk is scored, so every scored token has at least `n_ctx / 2` tokens of
//! context: the logits at positions `n_ctx/2 ..= n_ctx - 2` are scored
//! against the token that follows, `n_ctx - 1 - n_ctx/2` tokens per chunk.
//! The estimate after each chunk is `exp(mean negative log-likelihood)` over
//! every token scored so far, and the final ± is the standard error of that
//! mean, carried through the exponential: `PPL · sqrt(var(nll) / (n - 1))`.
//!
//! llama.cpp packs several chunks into one batch as separate sequences; the
//! attention of a sequence sees only its own tokens, so evaluating the chunks
//! one after another computes the same logits.

use crate::session::{Session, SessionError};

#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(
        "a context of {n_ctx} tokens scores no token per chunk: perplexity needs a context of at least {MIN_CONTEXT}"
    )]
    ContextTooSmall { n_ctx: usize },
    #[error(
        "the text tokenizes to only {n_tokens} tokens: perplexity with a context of {n_ctx} needs at least {} (two chunks)",
        2 * n_ctx
    )]
    TextTooShort { n_tokens: usize, n_ctx: usize },
    #[error("the session's context holds {session_ctx} positions, fewer than a chunk of {n_ctx}")]
    SessionTooSmall { n_ctx: usize, session_ctx: usize },
    #[error("the session keeps only the last token's logits; perplexity needs every token's")]
    NotAllLogits,
}

/// The smallest chunk that scores a token: `n_ctx - 1 - n_ctx/2 >= 1`.
pub const MIN_CONTEXT: usize = 3;

/// How the text is cut into chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Tokens per chunk (`-c`).
    pub n_ctx: usize,
    /// Chunks evaluated: every full chunk of the text, or fewer if asked.
    pub n_chunks: usize,
}

impl ChunkPlan {
    /// The chunks of a text of `n_tokens` tokens, at most `max_chunks` of
    /// them. llama-perplexity refuses a text of fewer than two chunks, and
    /// so does this.
    pub fn new(
        n_tokens: usize,
        n_ctx: usize,
        max_chunks: Option<usize>,
    ) -> Result<ChunkPlan, PerplexityError> {
        if n_ctx < MIN_CONTEXT {
            return Err(PerplexityError::ContextTooSmall { n_ctx });
        }
        if n_tokens < 2 * n_ctx {
            return Err(PerplexityError::TextTooShort { n_tokens, n_ctx });
        }
        let full = n_tokens / n_ctx;
        Ok(ChunkPlan {
            n_ctx,
            n_chunks: max_chunks.map_or(full, |m| m.min(full)),
        })
    }

    /// The first scored position of a chunk.
    pub fn first_scored(&self) -> usize {
        self.n_ctx / 2
    }

    /// Tokens scored per chunk.
    pub fn scored_per_chunk(&self) -> usize {
        self.n_ctx - 1 - self.first_scored()
    }
}

/// `-log softmax(logits)[token]`, computed as llama-perplexity does: the
/// exponentials in f32 relative to the row's maximum, their sum in f64.
pub fn token_nll(logits: &[f32], token: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    -(f64::from(logits[token as usize] - max) - sum.ln())
}

/// Running sums of the scored tokens' negative log-likelihoods.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NllSums {
    pub sum: f64,
    pub sum_sq: f64,
    pub count: usize,
}

impl NllSums {
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum_sq += nll * nll;
        self.count += 1;
    }

    /// `exp(mean nll)`: the perplexity of what was scored so far.
    pub fn perplexity(&self) -> f64 {
        (self.sum / self.count as f64).exp()
    }

    /// The standard error of the perplexity, `PPL · sqrt(var / (n - 1))`
    /// with the population variance of the nll, as llama-perplexity prints
    /// it. None with fewer than two tokens or a variance that rounds to
    /// zero or below (llama.cpp prints no estimate then either).
    pub fn standard_error(&self) -> Option<f64> {
        if self.count < 2 {
            return None;
        }
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = self.sum_sq / n - mean * mean;
        (var > 0.0).then(|| (var / (n - 1.0)).sqrt() * self.perplexity())
    }
}

/// The result of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// The running estimate after each chunk (`[k]value`).
    pub running: Vec<f64>,
    pub sums: NllSums,
}

impl Perplexity {
    pub fn estimate(&self) -> f64 {
        self.sums.perplexity()
    }

    pub fn standard_error(&self) -> Option<f64> {
        self.sums.standard_error()
    }
}

/// Scores `plan`'s chunks of `tokens` on `session`, which must keep every
/// token's logits and hold a chunk. `bos` replaces each chunk's first token
/// (pass the model's BOS when it adds one). `on_chunk(k, estimate)` is
/// called after chunk `k` (1-based) with the running estimate.
pub fn evaluate(
    session: &mut Session,
    tokens: &[u32],
    plan: ChunkPlan,
    bos: Option<u32>,
    on_chunk: &mut dyn FnMut(usize, f64),
) -> Result<Perplexity, PerplexityError> {
    if session.n_ctx() < plan.n_ctx {
        return Err(PerplexityError::SessionTooSmall {
            n_ctx: plan.n_ctx,
            session_ctx: session.n_ctx(),
        });
    }
    let n_vocab = session.model().config.n_vocab;
    let first = plan.first_scored();
    let mut sums = NllSums::default();
    let mut running = Vec::with_capacity(plan.n_chunks);
    let mut chunk = Vec::with_capacity(plan.n_ctx);
    for k in 0..plan.n_chunks {
        let start = k * plan.n_ctx;
        chunk.clear();
        chunk.extend_from_slice(&tokens[start..start + plan.n_ctx]);
        if let Some(bos) = bos {
            chunk[0] = bos;
        }
        session.reset();
        let logits = session.eval(&chunk)?;
        if logits.len() != plan.n_ctx * n_vocab {
            return Err(PerplexityError::NotAllLogits);
        }
        // The logits at position p predict the text's token p + 1 (the
        // original one: only position 0 was replaced by BOS).
        for p in first..plan.n_ctx - 1 {
            let row = &logits[p * n_vocab..(p + 1) * n_vocab];
            sums.add(token_nll(row, tokens[start + p + 1]));
        }
        let estimate = sums.perplexity();
        running.push(estimate);
        on_chunk(k + 1, estimate);
    }
    Ok(Perplexity { running, sums })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_is_the_negative_log_softmax() {
        let logits = [1.0f32, 2.0, 3.0, -4.0];
        let lse = logits.iter().map(|&l| f64::from(l).exp()).sum::<f64>().ln();
        for (t, &l) in logits.iter().enumerate() {
            let want = lse - f64::from(l);
            assert!((token_nll(&logits, t as u32) - want).abs() < 1e-6);
        }
        // A uniform row over n tokens scores ln n whatever the token.
        let uniform = [0.5f32; 1000];
        assert!((token_nll(&uniform, 7) - 1000f64.ln()).abs() < 1e-9);
        // Shifting every logit changes nothing (the maximum is subtracted
        // first, so large logits do not overflow).
        let shifted: Vec<f32> = logits.iter().map(|l| l + 1e4).collect();
        assert!((token_nll(&shifted, 2) - token_nll(&logits, 2)).abs() < 1e-3);
    }

    #[test]
    fn standard_error_follows_llama_perplexity() {
        let nlls = [2.0f64, 4.0, 3.0, 7.0];
        let mut s = NllSums::default();
        for &v in &nlls {
            s.add(v);
        }
        let n = nlls.len() as f64;
        let mean = nlls.iter().sum::<f64>() / n;
        assert!((s.perplexity() - mean.exp()).abs() < 1e-9 * mean.exp());
        // Population variance, divided by n - 1 again for the error of
        // the mean: (var / (n - 1))^0.5.
        let var = nlls.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        let want = mean.exp() * (var / (n - 1.0)).sqrt();
        assert!((s.standard_error().unwrap() - want).abs() < 1e-9 * want);

        let mut one = NllSums::default();
        one.add(3.0);
        assert_eq!(one.standard_error(), None);
        let mut same = NllSums::default();
        same.add(3.0);
        same.add(3.0);
        assert_eq!(same.standard_error(), None);
    }

    #[test]
    fn chunks_are_whole_and_score_the_second_half() {
        let plan = ChunkPlan::new(700, 128, None).unwrap();
        assert_eq!(plan.n_chunks, 5);
        assert_eq!(plan.first_scored(), 64);
        assert_eq!(plan.scored_per_chunk(), 63);
        assert_eq!(ChunkPlan::new(700, 128, Some(2)).unwrap().n_chunks, 2);
        assert_eq!(ChunkPlan::new(700, 128, Some(99)).unwrap().n_chunks, 5);
        assert_eq!(ChunkPlan::new(7, 3, None).unwrap().scored_per_chunk(), 1);
        assert!(matches!(
            ChunkPlan::new(255, 128, None),
            Err(PerplexityError::TextTooShort { n_tokens: 255, .. })
        ));
        assert!(matches!(
            ChunkPlan::new(100, 2, None),
            Err(PerplexityError::ContextTooSmall { n_ctx: 2 })
        ));
    }
}
