//! The mixture-of-experts ops of a step: routing, expert matmuls and the
//! weighted sum of the chosen experts' outputs.
//!
//! Expert matmuls quantize each input row once. A decode step then goes one
//! (token, choice) pair at a time: threads claim (pair, row chunk) items, so
//! only the chosen experts' rows are read, each once. A prefill groups the
//! pairs by expert (llama.cpp's `mul_mat_id` does the same): the quantized
//! rows are gathered expert by expert, each expert's rows run through the
//! prefill kernel once for all its tokens, and the results are scattered
//! back to their pairs' rows.

use std::sync::atomic::Ordering;

use rocmforge_core::graph::TensorId;
use rocmforge_core::model::WeightId;

use super::{activation_row_bytes, decode_chunk_rows, Step, TILE_ROWS};
use crate::kernels::{activation, moe, quant_dot};
use crate::team::{Member, SpinBarrier};

/// Fewest (token, choice) pairs for which a `MatMulId` groups them by
/// expert: below it (decode, short batches) experts rarely repeat.
const GROUP_MIN_PAIRS: usize = 16;

/// The scratch of a grouped expert matmul: the quantized input rows, the
/// same rows gathered in expert order (one per pair), and the results in
/// that order, each region 64-byte aligned.
pub(super) struct GroupedScratch {
    pub gathered: usize,
    pub results: usize,
    pub total: usize,
}

impl GroupedScratch {
    pub fn new(x_rows: usize, n_pairs: usize, arb: usize, n_out: usize) -> GroupedScratch {
        let gathered = (x_rows * arb).next_multiple_of(64);
        let results = gathered + (n_pairs * arb).next_multiple_of(64);
        let total = results + n_pairs * n_out * 4;
        GroupedScratch {
            gathered,
            results,
            total,
        }
    }
}

/// Pairs in expert order (stable, so a token's rows keep their order) and
/// where each expert's run starts in it (`n_expert + 1` entries).
fn group_by_expert(ids: &[f32], n_expert: usize) -> (Vec<usize>, Vec<usize>) {
    let expert = |p: usize| (ids[p] as usize).min(n_expert - 1);
    let mut starts = vec![0usize; n_expert + 1];
    for p in 0..ids.len() {
        starts[expert(p) + 1] += 1;
    }
    for e in 0..n_expert {
        starts[e + 1] += starts[e];
    }
    let mut next = starts.clone();
    let mut order = vec![0usize; ids.len()];
    for p in 0..ids.len() {
        let e = expert(p);
        order[next[e]] = p;
        next[e] += 1;
    }
    (order, starts)
}

impl Step<'_> {
    /// # Safety
    /// As for `run_op`.
    pub(super) unsafe fn top_k_gate(
        &self,
        m: Member,
        logits: TensorId,
        (ids, weights): (TensorId, TensorId),
        k: usize,
        normalize: bool,
    ) {
        let d = self.graph.tensor(logits);
        let rows = m.share(d.rows);
        // SAFETY: `logits` is an input (nobody writes it during this op),
        // and the rows of `ids` and `weights` are this member's share.
        unsafe {
            let src = self.input(logits);
            let ids = self.rows(ids, rows.clone());
            let weights = self.rows(weights, rows.clone());
            let mut probs = vec![0.0f32; d.cols];
            for (i, r) in rows.enumerate() {
                probs.copy_from_slice(&src[r * d.cols..(r + 1) * d.cols]);
                let choice = i * k..(i + 1) * k;
                moe::route(
                    &mut probs,
                    &mut ids[choice.clone()],
                    &mut weights[choice],
                    normalize,
                );
            }
        }
    }

    /// # Safety
    /// As for `run_op`.
    pub(super) unsafe fn matmul_id(
        &self,
        m: Member,
        barrier: &SpinBarrier,
        (w, x, ids, out): (WeightId, TensorId, TensorId, TensorId),
        bias: Option<WeightId>,
    ) {
        let wv = &self.weights[w];
        let bias = bias.map(|b| self.weights[b].f32s());
        let xd = self.graph.tensor(x);
        let n_pairs = self.graph.tensor(out).rows;
        let k = n_pairs / self.graph.tensor(ids).rows;
        let k_in = xd.cols;
        let arb = activation_row_bytes(wv.ty, k_in);
        // SAFETY: `x` and `ids` are inputs of this op; the scratch rows are
        // this member's share, free since the barrier that ended the last
        // phase that read them.
        let pair_ids = unsafe {
            let src = self.input(x);
            for r in m.share(xd.rows) {
                let row = self.scratch.bytes(r * arb, arb);
                quant_dot::quantize_activation_into(wv.ty, &src[r * k_in..(r + 1) * k_in], row);
            }
            self.input(ids)
        };
        if m.ith == 0 {
            self.next_chunk.store(0, Ordering::Relaxed);
        }
        barrier.wait();
        if n_pairs >= GROUP_MIN_PAIRS {
            // SAFETY: this fn's contract, and the barrier above ordered the
            // quantized rows before their reads.
            unsafe { self.matmul_id_grouped(m, barrier, (w, x, out), pair_ids, k, bias) };
            return;
        }
        // SAFETY: written before the barrier above, read-only until the next.
        let acts = unsafe { self.scratch.bytes_ref(0, xd.rows * arb) };
        let n_out = wv.expert_rows();
        let expert_bytes = n_out * wv.row_bytes();
        // Chunks cut across all pairs' rows, none across two experts.
        let chunk_rows = decode_chunk_rows(n_pairs * n_out, m.nth).min(n_out);
        let chunks_per_pair = n_out.div_ceil(chunk_rows);
        let dst = self.arena.f32_ptr(self.plan.offsets[out], n_pairs * n_out);
        loop {
            let c = self.next_chunk.fetch_add(1, Ordering::Relaxed);
            if c >= n_pairs * chunks_per_pair {
                break;
            }
            let (p, chunk) = (c / chunks_per_pair, c % chunks_per_pair);
            let rows = chunk * chunk_rows..((chunk + 1) * chunk_rows).min(n_out);
            // Routing writes ids below the expert count; clamped all the
            // same, so no value can read outside the weight.
            let e = (pair_ids[p] as usize).min(wv.experts - 1);
            let x_row = if xd.rows == n_pairs { p } else { p / k };
            let w_expert = &wv.bytes()[e * expert_bytes..(e + 1) * expert_bytes];
            // SAFETY: item `c` was claimed by this member alone, so columns
            // `rows` of row `p` of `out` (in range: `f32_ptr` checked the
            // tensor, `rows` ends at `n_out`) are its alone to write.
            unsafe {
                quant_dot::matmul_rows_strided(
                    wv.ty,
                    k_in,
                    w_expert,
                    rows.clone(),
                    &acts[x_row * arb..(x_row + 1) * arb],
                    1,
                    dst.add(p * n_out + rows.start),
                    n_out,
                    self.panels(),
                );
                if let Some(b) = bias {
                    // ggml's add_id: the chosen expert's bias row.
                    let o =
                        std::slice::from_raw_parts_mut(dst.add(p * n_out + rows.start), rows.len());
                    let e_row = e * n_out;
                    activation::add_inplace(o, &b[e_row + rows.start..e_row + rows.end]);
                }
            }
        }
    }

    /// The prefill form of `matmul_id`, after the input rows were quantized
    /// into the scratch's first region (and a barrier).
    ///
    /// # Safety
    /// As for `run_op`; every member calls it with the same arguments.
    unsafe fn matmul_id_grouped(
        &self,
        m: Member,
        barrier: &SpinBarrier,
        (w, x, out): (WeightId, TensorId, TensorId),
        pair_ids: &[f32],
        k: usize,
        bias: Option<&[f32]>,
    ) {
        let wv = &self.weights[w];
        let xd = self.graph.tensor(x);
        let n_pairs = pair_ids.len();
        let arb = activation_row_bytes(wv.ty, xd.cols);
        let n_out = wv.expert_rows();
        let layout = GroupedScratch::new(xd.rows, n_pairs, arb, n_out);
        // Every member derives the same order from the same ids.
        let (order, starts) = group_by_expert(pair_ids, wv.experts);
        let x_row = |p: usize| if xd.rows == n_pairs { p } else { p / k };
        // SAFETY: the quantized rows were written before the caller's
        // barrier; each member gathers its share of positions, which no one
        // else writes, and the gathered rows are read only after the
        // barrier below.
        unsafe {
            let acts = self.scratch.bytes_ref(0, xd.rows * arb);
            for pos in m.share(n_pairs) {
                let src = x_row(order[pos]) * arb;
                self.scratch
                    .bytes(layout.gathered + pos * arb, arb)
                    .copy_from_slice(&acts[src..src + arb]);
            }
        }
        barrier.wait();
        // SAFETY: gathered before the barrier above, read-only until the
        // next; each claimed (expert, chunk) item writes its own columns of
        // its expert's result rows, in range of the results region.
        unsafe {
            let gathered = self.scratch.bytes_ref(layout.gathered, n_pairs * arb);
            let results = self.scratch.bytes(layout.results, n_pairs * n_out * 4);
            let results = results.as_mut_ptr() as *mut f32;
            let expert_bytes = n_out * wv.row_bytes();
            let chunks = n_out.div_ceil(TILE_ROWS);
            let used: Vec<usize> = (0..wv.experts)
                .filter(|&e| starts[e + 1] > starts[e])
                .collect();
            loop {
                let c = self.next_chunk.fetch_add(1, Ordering::Relaxed);
                if c >= used.len() * chunks {
                    break;
                }
                let e = used[c / chunks];
                let rows = (c % chunks) * TILE_ROWS..((c % chunks + 1) * TILE_ROWS).min(n_out);
                let (first, count) = (starts[e], starts[e + 1] - starts[e]);
                quant_dot::matmul_rows_strided(
                    wv.ty,
                    xd.cols,
                    &wv.bytes()[e * expert_bytes..(e + 1) * expert_bytes],
                    rows.clone(),
                    &gathered[first * arb..(first + count) * arb],
                    count,
                    results.add(first * n_out + rows.start),
                    n_out,
                    self.panels(),
                );
            }
        }
        barrier.wait();
        // SAFETY: the results were written before the barrier above; each
        // member scatters its share of positions to their pairs' rows of
        // `out`, which nobody else writes.
        unsafe {
            let results = self.scratch.bytes_ref(layout.results, n_pairs * n_out * 4);
            for pos in m.share(n_pairs) {
                let p = order[pos];
                let src = &results[pos * n_out * 4..(pos + 1) * n_out * 4];
                let dst = self.rows(out, p..p + 1);
                for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                    *d = f32::from_le_bytes(b.try_into().expect("4 bytes"));
                }
                if let Some(b) = bias {
                    let e = (pair_ids[p] as usize).min(wv.experts - 1);
                    activation::add_inplace(dst, &b[e * n_out..(e + 1) * n_out]);
                }
            }
        }
    }

    /// # Safety
    /// As for `run_op`.
    pub(super) unsafe fn moe_sum(&self, m: Member, x: TensorId, weights: TensorId, out: TensorId) {
        let d = self.graph.tensor(out);
        let k = self.graph.tensor(weights).cols;
        let rows = m.share(d.rows);
        // SAFETY: `x` and `weights` are inputs of this op; the rows of `out`
        // are this member's share.
        unsafe {
            let (src, w) = (self.input(x), self.input(weights));
            let dst = self.rows(out, rows.clone());
            for (i, t) in rows.enumerate() {
                moe::weighted_sum(
                    &src[t * k * d.cols..(t + 1) * k * d.cols],
                    &w[t * k..(t + 1) * k],
                    &mut dst[i * d.cols..(i + 1) * d.cols],
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_group_by_expert_in_order() {
        let ids = [2.0, 0.0, 2.0, 1.0, 0.0, 2.0];
        let (order, starts) = group_by_expert(&ids, 4);
        assert_eq!(order, [1, 4, 3, 0, 2, 5]);
        assert_eq!(starts, [0, 2, 3, 6, 6]);
    }
}
