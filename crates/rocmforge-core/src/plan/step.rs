//! The step-input region: the only per-step data of a recorded graph.
//!
//! A command buffer or a hipGraph freezes its kernel arguments, so the token
//! ids and positions of a step cannot be arguments. They live in this small
//! region, written by the backend before each replay and read by the kernels
//! (embedding, RoPE, KV store, attention). Grid sizes depend only on the
//! graph's shape, never on these values.
//!
//! After the token ids come the step's *counters*: words that every step
//! starts at zero, where workgroups of one launch count themselves so the
//! last to finish can do the launch's closing work (the split decode
//! attention's merge, [`crate::gpu::split`], one counter per (token, head)
//! row; a MoE router's routing, the first counter). A kernel that counts
//! puts its counter back to zero; zeroing them again with every step's
//! inputs means a step cut short (a timeout) cannot leave a count behind
//! for the next.
//!
//! A *batched* step (several sequences in one step, [`crate::graph::Graph`]'s
//! `batched`) adds, after the counters, each row's sequence and position
//! (two words a row) and the rows whose logits the step picks (one word
//! each): kernels of such a step take a row's position from there instead
//! of `pos0 + row`, and its cache cells from its sequence's region.

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
/// (see [`word`]), one token id per row of the graph, then the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepInputLayout {
    pub n_tokens: usize,
    /// Counter words, zero at the start of every step.
    pub counters: usize,
    /// A batched step's picked rows (its logits rows); `None` for a step of
    /// one sequence, whose rows are at `pos0 + row` and which has no
    /// per-row words.
    pub batch_outputs: Option<usize>,
}

/// Graphs of at most this many tokens get a counter per (token, query head)
/// row: the decode steps whose attention may be split (the GPU lowering's
/// [`crate::gpu::split::MAX_SPLIT_TOKENS`]).
pub const COUNTED_TOKENS: usize = 8;

impl StepInputLayout {
    /// The layout for a graph of `n_tokens` tokens with `n_head` query
    /// heads: a counter per (token, head) row of a decode step.
    pub fn new(n_tokens: usize, n_head: usize) -> StepInputLayout {
        let counters = if n_tokens <= COUNTED_TOKENS {
            n_tokens * n_head
        } else {
            0
        };
        StepInputLayout {
            n_tokens,
            counters,
            batch_outputs: None,
        }
    }

    /// The layout of a batched step of `n_tokens` rows that picks
    /// `outputs` of them.
    pub fn batched(n_tokens: usize, n_head: usize, outputs: usize) -> StepInputLayout {
        StepInputLayout {
            batch_outputs: Some(outputs),
            ..StepInputLayout::new(n_tokens, n_head)
        }
    }

    /// Words enough for the layout of every graph of up to `max_tokens`
    /// tokens with `n_head` query heads.
    pub fn bound_words(max_tokens: usize, n_head: usize) -> usize {
        let most = StepInputLayout::batched(max_tokens, n_head, max_tokens).words();
        most.max(
            StepInputLayout::batched(
                max_tokens.min(COUNTED_TOKENS),
                n_head,
                max_tokens.min(COUNTED_TOKENS),
            )
            .words(),
        )
    }

    pub fn words(&self) -> usize {
        self.first_row_word() + self.batch_outputs.map_or(0, |m| 2 * self.n_tokens + m)
    }

    /// Word index of a batched step's first row word, after the counters.
    fn first_row_word(&self) -> usize {
        self.first_counter() + self.counters
    }

    /// Word index of the first counter, after the token ids.
    fn first_counter(&self) -> usize {
        word::TOKENS + self.n_tokens
    }

    /// Byte offset of the first counter.
    pub fn counters_at(&self) -> usize {
        self.first_counter() * 4
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
        let counters = self.first_counter();
        out[word::TOKENS..counters].copy_from_slice(inputs.tokens);
        let rows_at = self.first_row_word();
        out[counters..rows_at].fill(0);
        match self.batch_outputs {
            None => assert!(
                inputs.rows.is_empty() && inputs.outputs.is_empty(),
                "per-row inputs for a step of one sequence"
            ),
            Some(m) => {
                assert_eq!(inputs.rows.len(), self.n_tokens, "rows of a batched step");
                assert_eq!(inputs.outputs.len(), m, "picked rows of a batched step");
                for (w, r) in out[rows_at..rows_at + 2 * self.n_tokens]
                    .chunks_exact_mut(2)
                    .zip(inputs.rows)
                {
                    w[0] = r.seq;
                    w[1] = r.pos;
                }
                out[rows_at + 2 * self.n_tokens..self.words()].copy_from_slice(inputs.outputs);
            }
        }
    }

    /// A batched step's rows, as (sequence, position) word pairs, and its
    /// picked rows, read back from a region; `None` for a step of one
    /// sequence.
    pub fn decode_rows<'a>(&self, region: &'a [u32]) -> Option<(&'a [u32], &'a [u32])> {
        let m = self.batch_outputs?;
        let at = self.first_row_word();
        let rows = &region[at..at + 2 * self.n_tokens];
        Some((
            rows,
            &region[at + 2 * self.n_tokens..at + 2 * self.n_tokens + m],
        ))
    }

    /// Reads a region back (the CPU backend's kernels read it this way).
    pub fn decode<'a>(&self, region: &'a [u32]) -> (usize, &'a [u32]) {
        (
            region[word::POS0] as usize,
            &region[word::TOKENS..self.first_counter()],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_header_and_tokens() {
        let l = StepInputLayout::new(3, 2);
        let mut out = vec![7u32; l.words()];
        l.encode(&StepInputs::single(&[5, 6, 9], 10), &mut out);
        assert_eq!(out, [10, 13, 3, 0, 5, 6, 9, 0, 0, 0, 0, 0, 0]);
        assert_eq!(l.bytes(), 52);
        assert_eq!(l.counters_at(), 28);
        assert_eq!(l.decode(&out), (10, &[5u32, 6, 9][..]));
        assert_eq!(l.decode_rows(&out), None);
    }

    #[test]
    fn a_batched_step_carries_each_rows_sequence_and_position() {
        use crate::backend::RowPos;
        let l = StepInputLayout::batched(3, 1, 2);
        let rows = [
            RowPos { seq: 2, pos: 7 },
            RowPos { seq: 0, pos: 0 },
            RowPos { seq: 0, pos: 1 },
        ];
        let mut out = vec![9u32; l.words()];
        l.encode(
            &StepInputs {
                tokens: &[5, 6, 9],
                pos0: 0,
                rows: &rows,
                outputs: &[0, 2],
            },
            &mut out,
        );
        // Header, tokens, 3 counters, then the rows and the picked rows.
        assert_eq!(out, [0, 3, 3, 0, 5, 6, 9, 0, 0, 0, 2, 7, 0, 0, 0, 1, 0, 2]);
        let (r, o) = l.decode_rows(&out).unwrap();
        assert_eq!((r, o), (&[2u32, 7, 0, 0, 0, 1][..], &[0u32, 2][..]));
        assert!(l.words() <= StepInputLayout::bound_words(3, 1));
    }

    #[test]
    fn only_decode_sized_steps_have_counters() {
        assert_eq!(StepInputLayout::new(8, 32).counters, 256);
        assert_eq!(StepInputLayout::new(9, 32).counters, 0);
        // The bound covers the counted steps below a larger one.
        let bound = StepInputLayout::bound_words(12, 32);
        for n in 1..=12 {
            assert!(StepInputLayout::new(n, 32).words() <= bound, "{n}");
            assert!(StepInputLayout::batched(n, 32, n).words() <= bound, "{n}");
        }
        assert_eq!(bound, StepInputLayout::batched(8, 32, 8).words());
        assert_eq!(
            StepInputLayout::bound_words(600, 32),
            StepInputLayout::batched(600, 32, 600).words()
        );
    }
}
