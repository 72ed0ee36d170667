//! How long a run of ops may keep the GPU busy, estimated before recording,
//! so that [`super::GpuBackend`] can split a long step into several
//! submissions, each under a bound.
//!
//! Why: amdgpu's job watchdog on APUs (about 2 s on Strix Halo) turns one
//! long submission into a lost device (`VK_ERROR_DEVICE_LOST`; llama.cpp
//! issue 21724: a 512-token chunk at long context). Splitting costs one
//! more submit and wait per piece (tens of microseconds), nothing in the
//! kernels: the pieces share the arena, so tensors stay where they are and
//! only fusions across a cut are undone.
//!
//! The estimate is a roofline with rates set low on purpose ([`Rates`]):
//! an op takes the longer of its bytes at the memory rate and its
//! arithmetic at the compute rate. Attention is costed at the deepest
//! cache the layer can hold, since a recorded step is replayed at every
//! depth. A wrong estimate only moves where the cuts fall.

use std::ops::Range;

use super::DeviceWeight;
use crate::graph::{Graph, Op};
use crate::plan::KvLayout;

/// What a device sustains, on the low side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    pub bytes_per_s: f64,
    pub flops_per_s: f64,
}

impl Rates {
    /// A discrete GPU (an RX 7900 reads ~900 GB/s; our kernels reach a
    /// part of it).
    pub const DISCRETE: Rates = Rates {
        bytes_per_s: 200e9,
        flops_per_s: 10e12,
    };
    /// An APU sharing system memory (Strix Halo: ~250 GB/s).
    pub const INTEGRATED: Rates = Rates {
        bytes_per_s: 50e9,
        flops_per_s: 4e12,
    };
    /// A CPU implementation (lavapipe).
    pub const SOFTWARE: Rates = Rates {
        bytes_per_s: 4e9,
        flops_per_s: 20e9,
    };

    fn seconds(&self, bytes: f64, flops: f64) -> f64 {
        (bytes / self.bytes_per_s).max(flops / self.flops_per_s)
    }
}

/// The estimated seconds of each op of `graph`.
pub fn op_seconds(
    graph: &Graph,
    weights: &[DeviceWeight],
    kv: &KvLayout,
    rates: Rates,
) -> Vec<f64> {
    let t = graph.n_tokens as f64;
    let bytes =
        |ids: &[usize]| -> f64 { ids.iter().map(|&id| graph.tensor(id).bytes() as f64).sum() };
    let matrix = |w: usize| (weights[w].rows * weights[w].row_bytes) as f64;
    let kv_elem = (kv.k_row_bytes() + kv.v_row_bytes()) as f64 / (2 * kv.kv_dim).max(1) as f64;
    graph
        .ops
        .iter()
        .map(|op| {
            let io = bytes(&op.inputs())
                + op.outputs()
                    .iter()
                    .map(|&o| graph.tensor(o).bytes() as f64)
                    .sum::<f64>();
            let (b, f) = match *op {
                Op::MatMul { w, .. } => {
                    let (rows, cols) = (weights[w].rows as f64, weights[w].cols as f64);
                    (io + matrix(w), 2.0 * t * rows * cols)
                }
                Op::MatMulId { w, ids, .. } => {
                    let chosen = graph.tensor(ids).cols as f64;
                    let e = weights[w].experts.max(1) as f64;
                    let per_expert = matrix(w) / e;
                    let rows = weights[w].rows as f64 / e;
                    let read = (t * chosen).min(e) * per_expert;
                    (io + read, 2.0 * t * chosen * rows * weights[w].cols as f64)
                }
                Op::Attention { layer, .. } => {
                    let s = &graph.attention;
                    let positions = kv.capacity(layer) as f64;
                    let per_head = positions * s.head_dim as f64;
                    // Each (token, head) reads its K and V rows.
                    let read = t * s.n_head as f64 * 2.0 * per_head * kv_elem;
                    (io + read, 4.0 * t * s.n_head as f64 * per_head)
                }
                Op::Embed { table, .. } => (io + t * weights[table].row_bytes as f64, 0.0),
                _ => (io, 0.0),
            };
            rates.seconds(b, f)
        })
        .collect()
}

/// Cuts `ops` into runs whose estimated seconds stay within `budget`, in
/// order; an op longer than the budget alone is a run of its own.
pub fn segments(ops: Range<usize>, seconds: &[f64], budget: f64) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let (mut start, mut sum) = (ops.start, 0.0);
    for i in ops.clone() {
        if i > start && sum + seconds[i] > budget {
            runs.push(start..i);
            (start, sum) = (i, 0.0);
        }
        sum += seconds[i];
    }
    if start < ops.end || runs.is_empty() {
        runs.push(start..ops.end);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_keep_every_op_once_in_order_under_the_budget() {
        let s = [0.4, 0.4, 0.4, 2.5, 0.1, 0.9, 0.2];
        assert_eq!(segments(0..7, &s, 1.0), [0..2, 2..3, 3..4, 4..6, 6..7]);
        assert_eq!(segments(2..5, &s, 1.0), [2..3, 3..4, 4..5]);
        assert_eq!(segments(0..7, &s, 100.0), vec![0..7]);
        assert_eq!(
            segments(0..7, &s, 0.0),
            (0..7).map(|i| i..i + 1).collect::<Vec<_>>()
        );
        assert_eq!(segments(3..3, &s, 1.0), vec![3..3]);
    }
}
