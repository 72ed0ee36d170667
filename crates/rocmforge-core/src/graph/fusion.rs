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
