//! The mixture-of-experts ops of a step: routing, expert matmuls and the
//! weighted sum of the chosen experts' outputs.
//!
//! Expert matmuls go one (token, choice) pair at a time: each pair's input
//! row is quantized once, then threads claim (pair, row chunk) items, so a
//! decode step reads only the chosen experts' rows, each once.

use std::sync::atomic::Ordering;

use rocmforge_core::graph::TensorId;
use rocmforge_core::model::WeightId;

use super::{activation_row_bytes, Step, DECODE_CHUNK_ROWS};
use crate::kernels::{moe, quant_dot};
use crate::team::{Member, SpinBarrier};

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
    ) {
        let wv = &self.weights[w];
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
        // SAFETY: written before the barrier above, read-only until the next.
        let acts = unsafe { self.scratch.bytes_ref(0, xd.rows * arb) };
        let n_out = wv.expert_rows();
        let expert_bytes = n_out * wv.row_bytes();
        let chunks_per_pair = n_out.div_ceil(DECODE_CHUNK_ROWS);
        let dst = self.arena.f32_ptr(self.plan.offsets[out], n_pairs * n_out);
        loop {
            let c = self.next_chunk.fetch_add(1, Ordering::Relaxed);
            if c >= n_pairs * chunks_per_pair {
                break;
            }
            let (p, chunk) = (c / chunks_per_pair, c % chunks_per_pair);
            let rows = chunk * DECODE_CHUNK_ROWS..((chunk + 1) * DECODE_CHUNK_ROWS).min(n_out);
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
                );
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
