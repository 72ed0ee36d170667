//! Activation arena: every intermediate tensor is an offset into one buffer,
//! chosen from tensor lifetimes so dead tensors' space is reused.

use super::StepInputLayout;
use crate::graph::{fusion, Graph, TensorId};

/// Offsets are aligned for vector loads on every backend.
pub const ARENA_ALIGN: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaPlan {
    /// Byte offset of each tensor of the graph in the arena.
    pub offsets: Vec<usize>,
    /// Bytes the arena needs (the peak of live tensors, after packing).
    pub arena_bytes: usize,
    /// Bytes a planner without reuse would need: the sum of all tensors.
    pub naive_bytes: usize,
    /// The step's token ids and positions, in a region of their own that
    /// the backend writes before each replay (host-visible on a GPU).
    pub step_inputs: StepInputLayout,
}

/// First op that writes and last op that reads each tensor. The inputs
/// of the ops of a run that a backend may fuse into one kernel live to the
/// run's end ([`fusion::fusion_end`]).
fn lifetimes(graph: &Graph) -> Vec<(usize, usize)> {
    let mut life = vec![(usize::MAX, 0usize); graph.tensors.len()];
    let mut run_end = 0;
    for (i, op) in graph.ops.iter().enumerate() {
        for t in op.outputs() {
            life[t].0 = life[t].0.min(i);
            life[t].1 = life[t].1.max(i);
        }
        run_end = run_end.max(fusion::fusion_end(graph, i).unwrap_or(i));
        for t in op.inputs() {
            life[t].1 = life[t].1.max(run_end.max(i));
        }
    }
    // The logits are read by the host after the last op.
    life[graph.logits].1 = graph.ops.len();
    life
}

impl ArenaPlan {
    /// Greedy-by-size placement: the largest tensors are placed first, each
    /// at the lowest offset that does not overlap a placed tensor whose
    /// lifetime intersects its own. Simple, and within a few percent of the
    /// live-bytes lower bound on transformer graphs, whose big tensors (FFN
    /// activations, logits) dominate.
    pub fn new(graph: &Graph) -> ArenaPlan {
        let life = lifetimes(graph);
        let size = |t: TensorId| graph.tensors[t].bytes().next_multiple_of(ARENA_ALIGN);
        let mut order: Vec<TensorId> = (0..graph.tensors.len()).collect();
        order.sort_by_key(|&t| (std::cmp::Reverse(size(t)), t));

        let mut offsets = vec![0usize; graph.tensors.len()];
        let mut placed: Vec<TensorId> = Vec::new();
        let mut arena_bytes = 0;
        for t in order {
            let (start, end) = life[t];
            let mut busy: Vec<(usize, usize)> = placed
                .iter()
                .filter(|&&p| life[p].0 <= end && start <= life[p].1)
                .map(|&p| (offsets[p], offsets[p] + size(p)))
                .collect();
            busy.sort_unstable();
            let mut offset = 0;
            for (lo, hi) in busy {
                if offset + size(t) <= lo {
                    break;
                }
                offset = offset.max(hi);
            }
            offsets[t] = offset;
            arena_bytes = arena_bytes.max(offset + size(t));
            placed.push(t);
        }
        let naive_bytes = (0..graph.tensors.len()).map(size).sum();
        ArenaPlan {
            offsets,
            arena_bytes,
            naive_bytes,
            step_inputs: graph.step_inputs(),
        }
    }

    /// Every tensor at bytes of its own, in tensor order: no reuse, so
    /// every address is easy to predict and nothing may clash whatever is
    /// read back (tests of single ops and of the lowering).
    pub fn unshared(graph: &Graph) -> ArenaPlan {
        let mut offsets = Vec::with_capacity(graph.tensors.len());
        let mut at = 0;
        for t in &graph.tensors {
            offsets.push(at);
            at += t.bytes().next_multiple_of(ARENA_ALIGN);
        }
        ArenaPlan {
            offsets,
            arena_bytes: at,
            naive_bytes: at,
            step_inputs: graph.step_inputs(),
        }
    }

    /// Checks that no two tensors alive at the same time overlap; the
    /// planner's invariant, exposed for tests and debug builds of backends.
    pub fn verify(&self, graph: &Graph) -> Result<(), String> {
        let life = lifetimes(graph);
        let n = graph.tensors.len();
        for a in 0..n {
            for b in a + 1..n {
                let overlap_time = life[a].0 <= life[b].1 && life[b].0 <= life[a].1;
                let (a0, a1) = (self.offsets[a], self.offsets[a] + graph.tensors[a].bytes());
                let (b0, b1) = (self.offsets[b], self.offsets[b] + graph.tensors[b].bytes());
                if overlap_time && a0 < b1 && b0 < a1 {
                    return Err(format!("tensors {a} and {b} are live together and overlap"));
                }
            }
            if self.offsets[a] + graph.tensors[a].bytes() > self.arena_bytes {
                return Err(format!("tensor {a} ends past the arena"));
            }
        }
        Ok(())
    }
}
