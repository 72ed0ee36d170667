//! Which matmuls a backend may run as one: decided here, once, so every
//! backend fuses the same ops (and a fused kernel never reads a tensor that a
//! sibling in the group overwrites).

use std::ops::Range;

use super::{Graph, Op, TensorId};
use crate::plan::ArenaPlan;

/// The most matmuls one group may hold (Q, K, V; gate, up).
pub const MAX_GROUP: usize = 4;

/// Runs of consecutive matmuls that read the same input and write outputs
/// that share no arena bytes with that input or with each other: Q/K/V, and
/// gate/up. Each range is a span of op indices of length ≥ 2; matmuls in no
/// group run alone. Overlap is checked against the plan because the planner
/// may reuse the bytes of a tensor nobody reads any more, even inside a run.
pub fn matmul_groups(graph: &Graph, plan: &ArenaPlan) -> Vec<Range<usize>> {
    let bytes = |t: TensorId| {
        let start = plan.offsets[t];
        (start, start + graph.tensor(t).bytes())
    };
    let mut groups = Vec::new();
    let mut i = 0;
    while i < graph.ops.len() {
        let Op::MatMul { x, .. } = graph.ops[i] else {
            i += 1;
            continue;
        };
        let mut touched = vec![bytes(x)];
        let mut len = 0;
        for op in graph.ops[i..].iter().take(MAX_GROUP) {
            let Op::MatMul { x: x2, out, .. } = *op else {
                break;
            };
            let r = bytes(out);
            if x2 != x || touched.iter().any(|&(s, e)| s < r.1 && r.0 < e) {
                break;
            }
            touched.push(r);
            len += 1;
        }
        if len >= 2 {
            groups.push(i..i + len);
        }
        i += len.max(1);
    }
    groups
}

/// The group that starts at op `i`, if any: a lookup table for executors that
/// walk the ops in order.
pub fn group_starting_at(groups: &[Range<usize>], i: usize) -> Option<Range<usize>> {
    groups
        .binary_search_by_key(&i, |g| g.start)
        .ok()
        .map(|k| groups[k].clone())
}

/// A residual add a backend may fold into the matmul before it: op `i` is a
/// single matmul whose output only op `i + 1`, an `Add`, reads; the fused
/// kernel writes `out = W x (+ bias) + residual` straight into the add's
/// output (the same sum: f32 addition commutes exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResidualAdd {
    /// The add's other operand.
    pub residual: TensorId,
    /// The add's output, written by the fused matmul.
    pub out: TensorId,
}

/// The residual add that follows matmul op `i`, if it may be fused. The
/// add's output must be the residual's own bytes (each value read, then
/// written, by the same invocation) or share none with it, and share none
/// with the matmul's input (which the kernel reads throughout).
pub fn residual_add_after(graph: &Graph, plan: &ArenaPlan, i: usize) -> Option<ResidualAdd> {
    let Op::MatMul { x, out: mm_out, .. } = *graph.ops.get(i)? else {
        return None;
    };
    let Op::Add { a, b, out } = *graph.ops.get(i + 1)? else {
        return None;
    };
    let residual = match (a == mm_out, b == mm_out) {
        (true, false) => b,
        (false, true) => a,
        _ => return None,
    };
    let read_later = graph.ops[i + 2..]
        .iter()
        .any(|op| op.inputs().contains(&mm_out));
    if read_later || mm_out == graph.logits {
        return None;
    }
    let span = |t: TensorId| {
        let start = plan.offsets[t];
        (start, start + graph.tensor(t).bytes())
    };
    let overlaps = |p: (usize, usize), q: (usize, usize)| p.0 < q.1 && q.0 < p.1;
    let (o, r) = (span(out), span(residual));
    if (o != r && overlaps(o, r)) || overlaps(o, span(x)) {
        return None;
    }
    Some(ResidualAdd { residual, out })
}

/// Rotary embedding of Q and K and the KV store of one layer, which a
/// backend may run as one kernel: ops `i`, `i + 1`, `i + 2` are `Rope` of
/// `q`, `Rope` of `k` and `StoreKv` of that `k` (the order `build_graph`
/// emits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeStore {
    pub layer: usize,
    pub q: TensorId,
    pub n_head: usize,
    pub k: TensorId,
    pub n_head_kv: usize,
    pub v: TensorId,
    /// The layer's own frequencies ([`super::RopeSpec::for_op`]).
    pub local: bool,
}

/// The rope-and-store run starting at op `i`, if any.
pub fn rope_store_at(graph: &Graph, i: usize) -> Option<RopeStore> {
    let ops = graph.ops.get(i..i + 3)?;
    match *ops {
        [Op::Rope {
            x: q,
            n_heads: n_head,
            local,
        }, Op::Rope {
            x: k,
            n_heads: n_head_kv,
            local: local_k,
        }, Op::StoreKv { layer, k: k2, v }]
            if k == k2 && q != k && local == local_k =>
        {
            Some(RopeStore {
                layer,
                q,
                n_head,
                k,
                n_head_kv,
                v,
                local,
            })
        }
        _ => None,
    }
}

/// Whether op `i + 1` is a matmul reading `t`, the output of op `i`: the
/// producer may then also write `t` in the matmul's activation format.
pub fn next_matmul_reads(graph: &Graph, i: usize, t: TensorId) -> bool {
    matches!(graph.ops.get(i + 1), Some(&Op::MatMul { x, .. }) if x == t)
}
