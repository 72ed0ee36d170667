//! The step-input region: the only per-step data of a recorded graph.
//!
//! A command buffer or a hipGraph freezes its kernel arguments, so the token
//! ids and positions of a step cannot be arguments. They live in this small
//! region, written by the backend before each replay and read by the kernels
//! (embedding, RoPE, KV store, attention). Grid sizes depend only on the
//! graph's shape, never on these values.

use crate::backend::StepInputs;

/// Word offsets of the region's header; token ids follow it.
pub mod word {
    /// Position of the step's first token.
    pub const POS0: usize = 0;
    /// Cache positions valid once the step has stored its K/V: `pos0 + n_tokens`.
    pub const N_KV: usize = 1;
    /// Tokens in the step (the graph's `n_tokens`).
    pub const N_TOKENS: usize = 2;
    /// Index of the first token id.
    pub const TOKENS: usize = 4;
}

/// Layout of one graph's step-input region: `u32` words, a four-word header
/// (see [`word`]) then one token id per row of the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepInputLayout {
    pub n_tokens: usize,
}

impl StepInputLayout {
    pub fn words(&self) -> usize {
        word::TOKENS + self.n_tokens
    }

    pub fn bytes(&self) -> usize {
        self.words() * 4
    }

    /// Writes `inputs` into `out` (at least [`StepInputLayout::words`] long).
    ///
    /// # Panics
    /// If the step's token count differs from the layout's or `out` is too
    /// short: callers size both from the same graph.
    pub fn encode(&self, inputs: &StepInputs, out: &mut [u32]) {
        assert_eq!(inputs.tokens.len(), self.n_tokens, "step size");
        let pos0 = u32::try_from(inputs.pos0).expect("positions fit u32 (checked by Session)");
        out[word::POS0] = pos0;
        out[word::N_KV] = pos0 + self.n_tokens as u32;
        out[word::N_TOKENS] = self.n_tokens as u32;
        out[3] = 0;
        out[word::TOKENS..self.words()].copy_from_slice(inputs.tokens);
    }

    /// Reads a region back (the CPU backend's kernels read it this way).
    pub fn decode<'a>(&self, region: &'a [u32]) -> (usize, &'a [u32]) {
        (
            region[word::POS0] as usize,
            &region[word::TOKENS..self.words()],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_header_and_tokens() {
        let l = StepInputLayout { n_tokens: 3 };
        let mut out = vec![7u32; l.words()];
        l.encode(
            &StepInputs {
                tokens: &[5, 6, 9],
                pos0: 10,
            },
            &mut out,
        );
        assert_eq!(out, [10, 13, 3, 0, 5, 6, 9]);
        assert_eq!(l.bytes(), 28);
        assert_eq!(l.decode(&out), (10, &[5u32, 6, 9][..]));
    }
}
