//! Which matmuls a backend may run as one: decided here, once, so every
//! backend fuses the same ops (and a fused kernel never reads a tensor that a
//! sibling in the group overwrites).

use std::ops::Range;

use super::{Graph, Op, TensorId};
use crate::model::WeightId;
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

/// The residual add that follows matmul or expert-sum op `i`, if it may be
/// fused. The add's output must be the residual's own bytes (each value
/// read, then written, by the same invocation) or share none with it, and
/// share none with the op's inputs (which the kernel reads throughout).
pub fn residual_add_after(graph: &Graph, plan: &ArenaPlan, i: usize) -> Option<ResidualAdd> {
    let (reads, mm_out) = match *graph.ops.get(i)? {
        Op::MatMul { x, out, .. } => ([x, x], out),
        Op::MoeSum { x, weights, out } => ([x, weights], out),
        _ => return None,
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
    let (o, r) = (span(graph, plan, out), span(graph, plan, residual));
    if (o != r && !apart(graph, plan, out, residual))
        || reads.iter().any(|&x| !apart(graph, plan, out, x))
    {
        return None;
    }
    Some(ResidualAdd { residual, out })
}

/// The last op of the run that a backend may fuse with op `i` into one
/// kernel reading op `i`'s inputs throughout, if op `i` starts one: a
/// matmul or expert sum and the residual add after it
/// ([`residual_add_after`]), and for an expert sum also the norm of that
/// add's output ([`sum_norm_after`]); two RMS norms of one group size,
/// the second not reading the first (Qwen3's Q and K norms,
/// [`norm_pair_at`]); or an RMS norm, the router matmul of its output and
/// the routing ([`norm_router_at`]). The arena planner keeps the inputs of every op of
/// such a run alive to its end, so the run's outputs never land on them
/// and the fusion always fits.
pub fn fusion_end(graph: &Graph, i: usize) -> Option<usize> {
    let (out, sum) = match *graph.ops.get(i)? {
        Op::MatMul { out, .. } => (out, false),
        Op::MoeSum { out, .. } => (out, true),
        Op::RmsNorm { out, group, .. } => {
            let pair = matches!(graph.ops.get(i + 1),
                Some(&Op::RmsNorm { x, group: g, .. }) if g == group && x != out);
            if pair {
                return Some(i + 1);
            }
            return routed_after(graph, i + 1, out).then_some(i + 2);
        }
        _ => return None,
    };
    let Some(&Op::Add { a, b, out: added }) = graph.ops.get(i + 1) else {
        return None;
    };
    if a != out && b != out {
        return None;
    }
    let norm = matches!(graph.ops.get(i + 2), Some(&Op::RmsNorm { x, .. }) if x == added);
    Some(if sum && norm { i + 2 } else { i + 1 })
}

/// The RMS norm after expert sum `i` and its residual add, if a backend
/// may run all three as one launch of a workgroup per row: the add folds
/// into the sum ([`residual_add_after`]), op `i + 2` normalises whole rows
/// of the add's output (the next block's input norm), and the norm's output
/// shares no byte with anything the launch reads or with the sum it writes.
pub fn sum_norm_after<'g>(
    graph: &'g Graph,
    plan: &ArenaPlan,
    i: usize,
) -> Option<(ResidualAdd, &'g Op)> {
    let Op::MoeSum { x, weights, .. } = *graph.ops.get(i)? else {
        return None;
    };
    let add = residual_add_after(graph, plan, i)?;
    let norm = graph.ops.get(i + 2)?;
    let Op::RmsNorm {
        x: nx, out, group, ..
    } = *norm
    else {
        return None;
    };
    (nx == add.out
        && group == graph.tensor(nx).cols
        && [x, weights, add.residual, add.out]
            .iter()
            .all(|&t| apart(graph, plan, out, t)))
    .then_some((add, norm))
}

/// Whether op `i` is a matmul of `t` and op `i + 1` routes its logits.
fn routed_after(graph: &Graph, i: usize, t: TensorId) -> bool {
    match graph.ops.get(i..i + 2) {
        Some(&[Op::MatMul { x, out, .. }, Op::TopKGate { logits, .. }]) => x == t && logits == out,
        _ => false,
    }
}

/// Whether RMS norm `i` may run inside the launch of the router after it
/// (a decode step's FFN norm, each of the router's workgroups normalising
/// the rows itself): the norm takes whole rows, op `i + 1` is a matmul of
/// its output and op `i + 2` the routing of that matmul's logits, and
/// nothing the three write shares a byte with the norm's input (read
/// throughout), nor the router's or the routing's outputs with the norm's.
pub fn norm_router_at(graph: &Graph, plan: &ArenaPlan, i: usize) -> bool {
    let Some(&Op::RmsNorm { x, out, group, .. }) = graph.ops.get(i) else {
        return false;
    };
    if group != graph.tensor(x).cols || !routed_after(graph, i + 1, out) {
        return false;
    }
    let Op::TopKGate {
        logits,
        ids,
        weights,
        ..
    } = graph.ops[i + 2]
    else {
        return false;
    };
    [out, logits, ids, weights]
        .iter()
        .all(|&w| apart(graph, plan, w, x) && (w == out || apart(graph, plan, w, out)))
}

/// The arena bytes `t` occupies.
fn span(graph: &Graph, plan: &ArenaPlan, t: TensorId) -> (usize, usize) {
    let start = plan.offsets[t];
    (start, start + graph.tensor(t).bytes())
}

/// Whether `a` and `b` share no arena byte.
fn apart(graph: &Graph, plan: &ArenaPlan, a: TensorId, b: TensorId) -> bool {
    let (p, q) = (span(graph, plan, a), span(graph, plan, b));
    p.1 <= q.0 || q.1 <= p.0
}

/// The norm after op `i`, if a backend may run both in one launch: ops `i`
/// and `i + 1` are RMS norms of the same group size (Qwen3's per-head Q
/// and K norms), neither reading nor overwriting what the other writes.
pub fn norm_pair_at<'g>(graph: &'g Graph, plan: &ArenaPlan, i: usize) -> Option<&'g Op> {
    let [first, second] = graph.ops.get(i..i + 2)? else {
        return None;
    };
    let (
        &Op::RmsNorm { x, out, group, .. },
        &Op::RmsNorm {
            x: x2,
            out: out2,
            group: group2,
            ..
        },
    ) = (first, second)
    else {
        return None;
    };
    (group == group2
        && apart(graph, plan, out, x2)
        && apart(graph, plan, out2, x)
        && apart(graph, plan, out, out2))
    .then_some(second)
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

/// Qwen3's per-head Q and K norms and the rope-and-store run of their
/// outputs, which a backend may run as one kernel of a workgroup per head:
/// ops `i`, `i + 1` are a norm pair ([`norm_pair_at`]) over one head's
/// values, ops `i + 2 ..= i + 4` the rope-and-store run ([`rope_store_at`])
/// of the two norms' outputs. The planner keeps Q alive through the K norm
/// ([`fusion_end`]), so the pair's outputs never land on its inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormRopeStore {
    /// The Q norm's input and weight.
    pub q: TensorId,
    pub q_norm: WeightId,
    /// The K norm's.
    pub k: TensorId,
    pub k_norm: WeightId,
    /// The rope-and-store run: its `q` and `k` are the norms' outputs.
    pub rope: RopeStore,
}

/// The norm-rope-and-store run starting at op `i`, if any.
pub fn norm_rope_store_at(graph: &Graph, plan: &ArenaPlan, i: usize) -> Option<NormRopeStore> {
    let second = norm_pair_at(graph, plan, i)?;
    let (
        &Op::RmsNorm {
            x: q,
            weight: q_norm,
            out: q_out,
            group,
        },
        &Op::RmsNorm {
            x: k,
            weight: k_norm,
            out: k_out,
            ..
        },
    ) = (&graph.ops[i], second)
    else {
        return None;
    };
    let rope = rope_store_at(graph, i + 2)?;
    let head_dim = graph.tensor(q).cols / rope.n_head;
    (rope.q == q_out
        && rope.k == k_out
        && group == head_dim
        && graph.tensor(q).cols == rope.n_head * head_dim
        && graph.tensor(k).cols == rope.n_head_kv * head_dim)
        .then_some(NormRopeStore {
            q,
            q_norm,
            k,
            k_norm,
            rope,
        })
}

/// Whether op `i + 1` is a matmul reading `t`, the output of op `i`: the
/// producer may then also write `t` in the matmul's activation format.
pub fn next_matmul_reads(graph: &Graph, i: usize, t: TensorId) -> bool {
    matches!(graph.ops.get(i + 1), Some(&Op::MatMul { x, .. }) if x == t)
}

#[cfg(test)]
// Groups are lists of ranges: `[0..3]` is one group, not the values 0 to 2.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::graph::{AttentionSpec, RopeSpec, TensorDesc};

    /// A graph of `ops` over tensors of the given (rows, cols).
    fn graph(tensors: &[(usize, usize)], ops: Vec<Op>, logits: TensorId) -> Graph {
        Graph {
            n_tokens: 1,
            all_logits: true,
            batched: false,
            tensors: tensors
                .iter()
                .map(|&(rows, cols)| TensorDesc { rows, cols })
                .collect(),
            ops,
            logits,
            rms_eps: 1e-5,
            rope: RopeSpec {
                neox: false,
                n_rot: 8,
                freq_base: 10000.0,
                freq_scale: 1.0,
                freq_factors: None,
                local: None,
                yarn: None,
                attn_factor: 1.0,
            },
            attention: AttentionSpec {
                n_head: 2,
                n_head_kv: 1,
                head_dim: 8,
                scale: 1.0,
            },
        }
    }

    /// A plan placing tensor `t` at byte `offsets[t]`.
    fn plan_at(g: &Graph, offsets: Vec<usize>) -> ArenaPlan {
        let end = (0..offsets.len())
            .map(|t| offsets[t] + g.tensor(t).bytes())
            .max()
            .unwrap_or(0);
        ArenaPlan {
            offsets,
            arena_bytes: end,
            naive_bytes: end,
            step_inputs: g.step_inputs(),
        }
    }

    /// Every tensor in 1 KiB of its own (every test tensor is smaller).
    fn own_bytes(g: &Graph) -> ArenaPlan {
        plan_at(g, (0..g.tensors.len()).map(|t| t * 1024).collect())
    }

    fn mm(w: usize, x: TensorId, out: TensorId) -> Op {
        Op::MatMul {
            w,
            x,
            bias: None,
            out,
        }
    }

    fn add(a: TensorId, b: TensorId, out: TensorId) -> Op {
        Op::Add { a, b, out }
    }

    #[test]
    fn matmuls_reading_one_input_form_a_group() {
        // x → q, k, v.
        let g = graph(
            &[(1, 16), (1, 16), (1, 8), (1, 8)],
            vec![mm(0, 0, 1), mm(1, 0, 2), mm(2, 0, 3)],
            3,
        );
        let groups = matmul_groups(&g, &own_bytes(&g));
        assert_eq!(groups, [0..3]);
        assert_eq!(group_starting_at(&groups, 0), Some(0..3));
        assert_eq!(group_starting_at(&groups, 1), None);
        assert_eq!(group_starting_at(&groups, 3), None);
    }

    #[test]
    fn gate_and_up_group_and_down_runs_alone() {
        // h → gate, up; SwiGLU; act → down.
        let ops = vec![
            mm(0, 0, 1),
            mm(1, 0, 2),
            Op::SwiGlu {
                gate: 1,
                up: 2,
                out: 3,
            },
            mm(2, 3, 4),
        ];
        let g = graph(&[(1, 8), (1, 32), (1, 32), (1, 32), (1, 8)], ops, 4);
        assert_eq!(matmul_groups(&g, &own_bytes(&g)), [0..2]);
    }

    #[test]
    fn another_input_or_another_op_ends_a_group() {
        // x → a; y → b, c: the group starts at the second.
        let t = [(1, 8); 5];
        let g = graph(&t, vec![mm(0, 0, 2), mm(1, 1, 3), mm(2, 1, 4)], 4);
        assert_eq!(matmul_groups(&g, &own_bytes(&g)), [1..3]);
        // x → a, an add, x → b: matmuls apart are no group.
        let ops = vec![mm(0, 0, 1), add(0, 1, 2), mm(1, 0, 3)];
        let g = graph(&t, ops, 3);
        assert!(matmul_groups(&g, &own_bytes(&g)).is_empty());
        // No matmuls at all.
        let g = graph(&t, vec![add(0, 1, 2)], 2);
        assert!(matmul_groups(&g, &own_bytes(&g)).is_empty());
    }

    #[test]
    fn a_group_holds_at_most_four() {
        for (n, want) in [
            (4, vec![0..4]),
            (5, vec![0..4]),
            (6, vec![0..4, 4..6]),
            (9, vec![0..4, 4..8]),
        ] {
            let tensors = vec![(1, 8); n + 1];
            let ops = (0..n).map(|i| mm(i, 0, i + 1)).collect();
            let g = graph(&tensors, ops, n);
            assert_eq!(matmul_groups(&g, &own_bytes(&g)), want, "{n} matmuls");
        }
    }

    #[test]
    fn outputs_sharing_bytes_split_a_group() {
        // x → a, b, c, 32 bytes each.
        let t = [(1, 8); 4];
        let ops = || vec![mm(0, 0, 1), mm(1, 0, 2), mm(2, 0, 3)];
        let g = graph(&t, ops(), 3);
        // b overlaps a's last 16 bytes: a runs alone, b and c group.
        let plan = plan_at(&g, vec![0, 1024, 1040, 2048]);
        assert_eq!(matmul_groups(&g, &plan), [1..3]);
        // c overlaps x: a and b group, c runs alone.
        let plan = plan_at(&g, vec![0, 1024, 2048, 16]);
        assert_eq!(matmul_groups(&g, &plan), [0..2]);
        // Adjacent but not overlapping: one group.
        let plan = plan_at(&g, vec![0, 32, 64, 96]);
        assert_eq!(matmul_groups(&g, &plan), [0..3]);
    }

    /// `res` (0), the matmul's input `h` (1), its output (2), the add's
    /// output (3), a head's output (4): h → mm; res + mm; head.
    fn residual_graph(sum: Op, logits: TensorId, head_reads: TensorId) -> Graph {
        let ops = vec![mm(0, 1, 2), sum, mm(1, head_reads, 4)];
        graph(&[(1, 8); 5], ops, logits)
    }

    #[test]
    fn a_residual_add_after_a_matmul_fuses() {
        let want = Some(ResidualAdd {
            residual: 0,
            out: 3,
        });
        for sum in [add(0, 2, 3), add(2, 0, 3)] {
            let g = residual_graph(sum, 4, 3);
            assert_eq!(residual_add_after(&g, &own_bytes(&g), 0), want);
        }
        // The sum written in place over the residual: each value read,
        // then written, by one invocation.
        let g = residual_graph(add(0, 2, 3), 4, 3);
        let in_place = plan_at(&g, vec![0, 1024, 2048, 0, 4096]);
        assert_eq!(residual_add_after(&g, &in_place, 0), want);
    }

    #[test]
    fn a_residual_add_after_an_expert_sum_fuses_unless_it_overlaps_its_inputs() {
        // 0 the residual, 1 the expert rows, 2 their weights, 3 the sum,
        // 4 the add's output.
        let sum = Op::MoeSum {
            x: 1,
            weights: 2,
            out: 3,
        };
        let g = graph(&[(1, 8); 5], vec![sum, add(0, 3, 4)], 4);
        let fused = ResidualAdd {
            residual: 0,
            out: 4,
        };
        assert_eq!(residual_add_after(&g, &own_bytes(&g), 0), Some(fused));
        // The add's output over the expert rows or over the weights, which
        // every value of the sum reads.
        for at in [1024, 2048] {
            let over = plan_at(&g, vec![0, 1024, 2048, 3072, at]);
            assert_eq!(residual_add_after(&g, &over, 0), None, "{at}");
        }
    }

    #[test]
    fn a_residual_add_does_not_fuse_where_the_rules_say_no() {
        let g = residual_graph(add(0, 2, 3), 4, 3);
        let plan = own_bytes(&g);
        // Not a matmul at op 1; nothing after op 2.
        assert_eq!(residual_add_after(&g, &plan, 1), None);
        assert_eq!(residual_add_after(&g, &plan, 2), None);
        assert_eq!(residual_add_after(&g, &plan, 7), None);
        // The sum's bytes overlap the residual's in part, or the matmul's
        // input (which the kernel reads throughout).
        let partial = plan_at(&g, vec![0, 1024, 2048, 16, 4096]);
        assert_eq!(residual_add_after(&g, &partial, 0), None);
        let over_input = plan_at(&g, vec![0, 1024, 2048, 1024, 4096]);
        assert_eq!(residual_add_after(&g, &over_input, 0), None);
        // The add reads the matmul's output twice, or not at all.
        for sum in [add(2, 2, 3), add(0, 1, 3)] {
            let g = residual_graph(sum, 4, 3);
            assert_eq!(residual_add_after(&g, &own_bytes(&g), 0), None);
        }
        // A later op reads the matmul's output, which fused is never
        // written.
        let g = residual_graph(add(0, 2, 3), 4, 2);
        assert_eq!(residual_add_after(&g, &own_bytes(&g), 0), None);
        // The matmul's output is the logits.
        let g = residual_graph(add(0, 2, 3), 2, 3);
        assert_eq!(residual_add_after(&g, &own_bytes(&g), 0), None);
        // An op other than an add follows.
        let ops = vec![mm(0, 1, 2), mm(1, 1, 3)];
        let g = graph(&[(1, 8); 4], ops, 3);
        assert_eq!(residual_add_after(&g, &own_bytes(&g), 0), None);
    }

    /// Q (0), K (1), V (2), another K (3).
    fn rope_graph(ops: Vec<Op>) -> Graph {
        graph(&[(1, 16), (1, 8), (1, 8), (1, 8)], ops, 0)
    }

    fn rope(x: TensorId, n_heads: usize, local: bool) -> Op {
        Op::Rope { x, n_heads, local }
    }

    fn store(k: TensorId) -> Op {
        Op::StoreKv { layer: 3, k, v: 2 }
    }

    #[test]
    fn rope_of_q_and_k_then_their_store_fuse() {
        for local in [false, true] {
            let g = rope_graph(vec![rope(0, 2, local), rope(1, 1, local), store(1)]);
            let want = RopeStore {
                layer: 3,
                q: 0,
                n_head: 2,
                k: 1,
                n_head_kv: 1,
                v: 2,
                local,
            };
            assert_eq!(rope_store_at(&g, 0), Some(want));
            assert_eq!(rope_store_at(&g, 1), None);
        }
    }

    #[test]
    fn rope_and_store_of_other_tensors_do_not_fuse() {
        let cases = [
            // The store takes another K.
            vec![rope(0, 2, false), rope(1, 1, false), store(3)],
            // Q and K the same tensor.
            vec![rope(1, 2, false), rope(1, 1, false), store(1)],
            // One local rotation and one global.
            vec![rope(0, 2, true), rope(1, 1, false), store(1)],
            // The wrong order.
            vec![store(1), rope(0, 2, false), rope(1, 1, false)],
            vec![rope(0, 2, false), store(1), rope(1, 1, false)],
            // Too few ops.
            vec![rope(0, 2, false), rope(1, 1, false)],
        ];
        for ops in cases {
            let g = rope_graph(ops.clone());
            assert_eq!(rope_store_at(&g, 0), None, "{ops:?}");
        }
    }

    #[test]
    fn a_producer_may_round_for_the_matmul_right_after_it() {
        // x → norm → h → matmul; then an add of h; then a matmul of x.
        let ops = vec![
            Op::RmsNorm {
                x: 0,
                weight: 0,
                out: 1,
                group: 8,
            },
            mm(1, 1, 2),
            add(1, 2, 3),
            mm(2, 0, 4),
        ];
        let g = graph(&[(1, 8); 5], ops, 4);
        assert!(next_matmul_reads(&g, 0, 1));
        // The next matmul reads another tensor.
        assert!(!next_matmul_reads(&g, 0, 0));
        assert!(!next_matmul_reads(&g, 2, 3));
        // The next op is no matmul, or there is none.
        assert!(!next_matmul_reads(&g, 1, 2));
        assert!(!next_matmul_reads(&g, 3, 4));
    }
}
