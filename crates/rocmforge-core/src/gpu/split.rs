//! Decode attention split over positions (flash-decoding).
//!
//! A decode step has few (token, head) rows: 14 for qwen2-0.5b, 32 for a
//! 7B. One workgroup per row leaves most compute units idle and walks every
//! cached position in one serial chain, so a token's cost grows with the
//! context at a fraction of the memory bandwidth (0.16x llama.cpp after 4k
//! positions, issue 22). Split, each row's positions are cut into up to
//! `n_split` runs of consecutive positions: `attention_split` gives every
//! (row, run) its own workgroup, which keeps its own running maximum, sum
//! and f16 accumulator over its run (the per-position numerics of the
//! unsplit kernel) and writes them out unnormalised, the *partials*;
//! `attention_combine` then merges a row's runs in f32, folds in an
//! attention sink, normalises, and writes the output (Q8-packed too, for an
//! integer mat-vec). ggml's CPU decode does the same with one run per
//! thread (`ggml_flash_attn_ext_reduce_partials`).
//!
//! The grid depends only on the graph's shape, the positions only on the
//! step (recorded once, replayed every step): the kernel cuts the row's
//! current span `first..n_kv` into runs of `max(split_min, ⌈span /
//! n_split⌉)` positions, so a short context fills fewer runs and the other
//! workgroups write an empty partial (maximum −∞, sum 0) and stop.
//!
//! Partials, for row `r = t * n_head + h` and run `c`, index
//! `i = r * n_split + c`: the unnormalised output at floats
//! `i * head_dim ..`, then, after all `rows * n_split * head_dim` of those,
//! the pair (maximum, sum) at floats `2i, 2i + 1`.

/// Fewest positions a run takes by default: below this a run's fixed cost
/// (its Q load, its partial's write and read) outweighs the positions it
/// walks. A device's lowering may take fewer (`Lowering::split_min`:
/// Vulkan takes 32, measured on the H200).
pub const SPLIT_MIN_POSITIONS: usize = 128;
/// Most runs per row (the combine reads them all).
pub const MAX_SPLITS: usize = 64;
/// Workgroups per compute unit the split aims for: enough for each to
/// hide the others' memory latency (7B at depth 3968 on the H200: 4 gave
/// Vulkan 238 t/s, 8 gave 246; docs/measurements.md).
pub const WORKGROUPS_PER_CU: usize = 8;
/// Largest graph (tokens) whose attention is split: a decode step, or the
/// few tokens of speculative or batched decoding. Larger graphs have rows
/// enough to fill the device. Each of their (token, head) rows has a
/// counter in the step-input region, where the merge by the last run
/// counts the runs done.
pub const MAX_SPLIT_TOKENS: usize = crate::plan::COUNTED_TOKENS;

/// Runs per row for a graph of `n_tokens` tokens and `n_head` query heads
/// whose layer attends to at most `positions` positions, on a device of
/// `compute_units` (0: never split, a measurement switch), in runs of at
/// least `split_min` positions; 1 means unsplit.
pub fn attention_splits(
    n_tokens: usize,
    n_head: usize,
    positions: usize,
    compute_units: u32,
    split_min: usize,
) -> usize {
    if n_tokens == 0 || n_tokens > MAX_SPLIT_TOKENS || compute_units == 0 {
        return 1;
    }
    let rows = n_tokens * n_head.max(1);
    let want = (WORKGROUPS_PER_CU * compute_units as usize).div_ceil(rows);
    want.min(positions / split_min.max(1)).clamp(1, MAX_SPLITS)
}

/// Bytes of partials for `runs` (rows times runs per row) of `head_dim`.
pub fn partials_bytes(runs: usize, head_dim: usize) -> usize {
    runs * (head_dim + 2) * 4
}

/// Bytes of partials that every graph of a model suffices with: `n_head`
/// heads of `head_dim` on a device of `compute_units`, whatever the
/// context. A row count `rows` takes `rows * ⌈target / rows⌉ < target +
/// rows` runs (or `rows`, one run each, as `attention_decode` does at a
/// short context), and rows are at most [`MAX_SPLIT_TOKENS`] * `n_head`.
pub fn partials_bound(n_head: usize, head_dim: usize, compute_units: u32) -> usize {
    let target = WORKGROUPS_PER_CU * compute_units as usize;
    partials_bytes(target + MAX_SPLIT_TOKENS * n_head, head_dim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_contexts_and_prefill_are_not_split() {
        assert_eq!(attention_splits(1, 14, 255, 132, SPLIT_MIN_POSITIONS), 1);
        assert_eq!(
            attention_splits(512, 14, 32768, 132, SPLIT_MIN_POSITIONS),
            1
        );
        assert_eq!(attention_splits(9, 14, 32768, 132, SPLIT_MIN_POSITIONS), 1);
        assert_eq!(attention_splits(0, 14, 32768, 132, SPLIT_MIN_POSITIONS), 1);
        assert_eq!(
            attention_splits(1, 14, 32768, 0, SPLIT_MIN_POSITIONS),
            1,
            "the switch"
        );
    }

    #[test]
    fn splits_fill_the_device_within_the_limits() {
        // 132 compute units, 32 heads: ⌈1056 / 32⌉ = 33 runs.
        assert_eq!(attention_splits(1, 32, 8192, 132, SPLIT_MIN_POSITIONS), 33);
        // At most one run per SPLIT_MIN_POSITIONS: 4096 / 128 = 32.
        assert_eq!(attention_splits(1, 14, 4096, 132, SPLIT_MIN_POSITIONS), 32);
        // Capped by the positions: 1024 / 128 = 8 runs.
        assert_eq!(attention_splits(1, 14, 1024, 132, SPLIT_MIN_POSITIONS), 8);
        // And by MAX_SPLITS.
        assert_eq!(
            attention_splits(1, 1, 1 << 20, 1024, SPLIT_MIN_POSITIONS),
            MAX_SPLITS
        );
        // Enough rows already: one run.
        assert_eq!(attention_splits(8, 64, 1 << 20, 16, SPLIT_MIN_POSITIONS), 1);
    }

    #[test]
    fn the_bound_covers_every_graph() {
        for cu in [0u32, 1, 12, 40, 96, 132] {
            for n_head in [1usize, 7, 14, 32, 64] {
                for positions in [128usize, 256, 1000, 4096, 131072] {
                    let bound = partials_bound(n_head, 128, cu);
                    for n in 1..=MAX_SPLIT_TOKENS {
                        let s = attention_splits(n, n_head, positions, cu, SPLIT_MIN_POSITIONS);
                        let need = partials_bytes(n * n_head * s, 128);
                        assert!(need <= bound, "{cu} {n_head} {positions} {n}");
                    }
                }
            }
        }
    }
}
