//! Splitting a graph between a GPU backend and the CPU backend, as
//! llama.cpp's `--n-cpu-moe` does: the expert weights of some layers stay in
//! host memory, and the ops that read them run on the CPU while everything
//! else (attention, the KV cache, the other layers) runs on the GPU.
//!
//! The graph is cut into [`GraphPart`]s, runs of consecutive ops on one
//! side. Both backends plan the same graph with the same [`ArenaPlan`], so a
//! tensor has the same arena offset on either side; only the tensors one
//! side writes and the other reads (a part's imports and exports) cross,
//! through host memory, once per part.
//!
//! [`ArenaPlan`]: crate::plan::ArenaPlan

use std::ops::Range;

use super::{Graph, Op, TensorId};
use crate::model::WeightId;

/// Which backend runs a part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The GPU backend, which holds the KV cache and most weights.
    Device,
    /// The CPU backend, reading the weights kept out of device memory from
    /// the file's mapping.
    Host,
}

/// A run of consecutive ops that one backend executes, with the tensors it
/// reads that the other side wrote (`imports`, copied in before the part
/// runs) and the ones it writes that the other side, or the caller, reads
/// later (`exports`, copied out after; the logits are an export of the
/// part that writes them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphPart {
    pub side: Side,
    pub ops: Range<usize>,
    pub imports: Vec<TensorId>,
    pub exports: Vec<TensorId>,
}

impl GraphPart {
    /// All of `graph` as one device part, exporting its logits: what a
    /// backend records for an unsplit graph.
    pub fn whole(graph: &Graph) -> GraphPart {
        GraphPart {
            side: Side::Device,
            ops: 0..graph.ops.len(),
            imports: Vec::new(),
            exports: vec![graph.logits],
        }
    }

    /// Bytes the part moves in and out (f32 tensors).
    pub fn exchange_bytes(&self, graph: &Graph) -> usize {
        self.imports
            .iter()
            .chain(&self.exports)
            .map(|&t| graph.tensor(t).bytes())
            .sum()
    }
}

/// Cuts `graph` where ops change sides. An op runs on the host when it
/// reads a weight for which `on_host` holds, or when most of the bytes it
/// reads were written on the host: then the gate and up products of the
/// experts, their activation, the down product and the weighted sum all
/// stay on the CPU, and only the sum (one row per token, not one per chosen
/// expert) crosses back. Ops that touch the KV cache or the token ids
/// always run on the device, which owns them.
pub fn split_graph(graph: &Graph, on_host: &dyn Fn(WeightId) -> bool) -> Vec<GraphPart> {
    let mut parts: Vec<GraphPart> = Vec::new();
    // The part that last wrote each tensor (None: not written yet).
    let mut writer: Vec<Option<usize>> = vec![None; graph.tensors.len()];
    for (i, op) in graph.ops.iter().enumerate() {
        let side = side_of(graph, op, &writer, &parts, on_host);
        if parts.last().is_none_or(|p| p.side != side) {
            parts.push(GraphPart {
                side,
                ops: i..i,
                imports: Vec::new(),
                exports: Vec::new(),
            });
        }
        let current = parts.len() - 1;
        parts[current].ops.end = i + 1;
        for t in op.inputs() {
            if let Some(w) = writer[t].filter(|&w| parts[w].side != side) {
                push_once(&mut parts[w].exports, t);
                push_once(&mut parts[current].imports, t);
            }
        }
        for t in op.outputs() {
            writer[t] = Some(current);
        }
    }
    if let Some(w) = writer[graph.logits] {
        push_once(&mut parts[w].exports, graph.logits);
    }
    parts
}

fn side_of(
    graph: &Graph,
    op: &Op,
    writer: &[Option<usize>],
    parts: &[GraphPart],
    on_host: &dyn Fn(WeightId) -> bool,
) -> Side {
    if matches!(
        op,
        Op::Embed { .. } | Op::StoreKv { .. } | Op::Attention { .. }
    ) {
        return Side::Device;
    }
    if op.weights().into_iter().any(on_host) {
        return Side::Host;
    }
    let (mut host, mut device) = (0, 0);
    for t in op.inputs() {
        let bytes = graph.tensor(t).bytes();
        match writer[t].map(|w| parts[w].side) {
            Some(Side::Host) => host += bytes,
            _ => device += bytes,
        }
    }
    if host > device {
        Side::Host
    } else {
        Side::Device
    }
}

fn push_once(list: &mut Vec<TensorId>, t: TensorId) {
    if !list.contains(&t) {
        list.push(t);
    }
}

/// Host copies of the tensors that cross between the parts of a split
/// graph: a part's imports are read from here, its exports written here.
#[derive(Clone, Debug, Default)]
pub struct Exchange {
    tensors: Vec<Vec<f32>>,
}

impl Exchange {
    /// Room for every import and export of `parts`.
    pub fn new(graph: &Graph, parts: &[GraphPart]) -> Exchange {
        let mut tensors = vec![Vec::new(); graph.tensors.len()];
        for p in parts {
            for &t in p.imports.iter().chain(&p.exports) {
                let d = graph.tensor(t);
                tensors[t].resize(d.rows * d.cols, 0.0);
            }
        }
        Exchange { tensors }
    }

    /// Tensor `t`'s values (empty for a tensor that never crosses).
    pub fn tensor(&self, t: TensorId) -> &[f32] {
        &self.tensors[t]
    }

    pub fn tensor_mut(&mut self, t: TensorId) -> &mut [f32] {
        &mut self.tensors[t]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{AttentionSpec, RopeSpec, TensorDesc};

    /// One MoE block by hand: weights 0-3 are the router and the three
    /// expert stacks, 4 the output matrix.
    fn moe_block(n: usize) -> Graph {
        let (d, k, e, ff, vocab) = (8, 2, 4, 16, 32);
        let t = |rows, cols| TensorDesc { rows, cols };
        let tensors = vec![
            t(n, d),      // 0 x
            t(n, d),      // 1 normed
            t(n, e),      // 2 router logits
            t(n, k),      // 3 ids
            t(n, k),      // 4 weights
            t(n * k, ff), // 5 gate
            t(n * k, ff), // 6 up
            t(n * k, ff), // 7 act
            t(n * k, d),  // 8 down
            t(n, d),      // 9 sum
            t(n, d),      // 10 residual out
            t(n, vocab),  // 11 logits
        ];
        let ops = vec![
            Op::Embed { table: 4, out: 0 },
            Op::RmsNorm {
                x: 0,
                weight: 5,
                out: 1,
                group: d,
            },
            Op::MatMul {
                w: 0,
                x: 1,
                bias: None,
                out: 2,
            },
            Op::TopKGate {
                logits: 2,
                ids: 3,
                weights: 4,
                k,
                normalize: true,
            },
            Op::MatMulId {
                w: 1,
                x: 1,
                ids: 3,
                bias: None,
                out: 5,
            },
            Op::MatMulId {
                w: 2,
                x: 1,
                ids: 3,
                bias: None,
                out: 6,
            },
            Op::SwiGlu {
                gate: 5,
                up: 6,
                out: 7,
            },
            Op::MatMulId {
                w: 3,
                x: 7,
                ids: 3,
                bias: None,
                out: 8,
            },
            Op::MoeSum {
                x: 8,
                weights: 4,
                out: 9,
            },
            Op::Add {
                a: 0,
                b: 9,
                out: 10,
            },
            Op::MatMul {
                w: 4,
                x: 10,
                bias: None,
                out: 11,
            },
        ];
        Graph {
            n_tokens: n,
            all_logits: true,
            batched: false,
            tensors,
            ops,
            logits: 11,
            rms_eps: 1e-6,
            rope: RopeSpec {
                neox: false,
                n_rot: 2,
                freq_base: 1e4,
                freq_scale: 1.0,
                freq_factors: None,
                local: None,
                yarn: None,
                attn_factor: 1.0,
            },
            attention: AttentionSpec {
                n_head: 1,
                n_head_kv: 1,
                head_dim: d,
                scale: 1.0,
            },
        }
    }

    #[test]
    fn the_experts_run_on_the_host_and_only_their_sum_comes_back() {
        for n in [1, 7] {
            let g = moe_block(n);
            let parts = split_graph(&g, &|w| (1..=3).contains(&w));
            let sides: Vec<Side> = parts.iter().map(|p| p.side).collect();
            assert_eq!(sides, [Side::Device, Side::Host, Side::Device]);
            assert_eq!(parts[0].ops, 0..4);
            // Gate, up, activation, down and the weighted sum.
            assert_eq!(parts[1].ops, 4..9);
            assert_eq!(parts[1].imports, vec![1, 3, 4]);
            assert_eq!(parts[1].exports, vec![9]);
            assert_eq!(parts[0].exports, vec![1, 3, 4]);
            assert_eq!(parts[2].imports, vec![9]);
            assert_eq!(parts[2].exports, vec![11]);
            assert_eq!(parts[1].exchange_bytes(&g), 4 * n * (2 * 8 + 2 * 2));
        }
    }

    #[test]
    fn nothing_on_the_host_is_one_device_part() {
        let g = moe_block(3);
        let parts = split_graph(&g, &|_| false);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].side, Side::Device);
        assert!(parts[0].imports.is_empty());
        assert_eq!(parts[0].exports, vec![g.logits]);
        let ex = Exchange::new(&g, &parts);
        assert_eq!(ex.tensor(g.logits).len(), 3 * 32);
        assert!(ex.tensor(1).is_empty());
    }
}
