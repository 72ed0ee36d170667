//! `--n-cpu-moe N`: a GPU backend with the expert weights of the first `N`
//! layers kept in host memory and computed by the CPU backend, as llama.cpp
//! users run mixture-of-experts models larger than their card (a 30B-A3B
//! model's experts are nine tenths of its bytes; attention and the KV cache
//! are what need the GPU's bandwidth most).
//!
//! [`ExpertOffload`] is itself a [`Backend`]: the session, the CLI and the
//! benchmark drive it like any other. It splits every graph with
//! [`crate::graph::split`], records the device's parts on the GPU backend
//! and the host's on the CPU backend, and replays them in order, moving the
//! tensors at each cut through an [`Exchange`] in host memory. Per MoE layer
//! on the host that is two round trips a step: the normed input, the chosen
//! experts and their weights go down, the experts' weighted sum comes back.
//!
//! Both backends are reached through the trait only, so this lives in core
//! and works for any pair (tests split the CPU backend with itself).

use crate::backend::{
    AllocationStats, Backend, BackendError, BackendInfo, FreeMemory, GraphId, StepInputs,
};
use crate::graph::split::{split_graph, Exchange, GraphPart, Side};
use crate::graph::Graph;
use crate::model::{FfnWeights, Model, WeightId};
use crate::plan::{ArenaPlan, KvLayout};

/// A graph recorded in parts on both backends.
struct SplitGraph {
    parts: Vec<GraphPart>,
    /// Each part's index among its own side's parts.
    index: Vec<usize>,
    device: GraphId,
    host: Option<GraphId>,
    exchange: Exchange,
    logits: usize,
}

pub struct ExpertOffload {
    device: Box<dyn Backend>,
    host: Box<dyn Backend>,
    n_cpu_moe: usize,
    /// The expert stacks the host computes with, sorted.
    kept_out: Vec<WeightId>,
    kept_out_bytes: u64,
    graphs: Vec<SplitGraph>,
}

/// The expert stacks (gate, up, down) of the mixture-of-experts layers
/// among the first `n_layers`: what llama.cpp's `--n-cpu-moe` keeps on the
/// CPU.
pub fn expert_weights(model: &Model, n_layers: usize) -> Vec<WeightId> {
    let mut ids: Vec<WeightId> = model
        .weights
        .layers
        .iter()
        .take(n_layers)
        .flat_map(|l| match l.ffn {
            FfnWeights::Moe {
                gate_exps,
                up_exps,
                down_exps,
                ..
            } => vec![gate_exps, up_exps, down_exps],
            FfnWeights::Dense { .. } => vec![],
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

impl ExpertOffload {
    /// Runs `model` on `device` with the experts of its first `n_cpu_moe`
    /// layers on `host`. A model without experts in those layers is
    /// refused: nothing would move, and the user asked for something else.
    pub fn new(
        device: Box<dyn Backend>,
        host: Box<dyn Backend>,
        model: &Model,
        n_cpu_moe: usize,
    ) -> Result<ExpertOffload, BackendError> {
        let kept_out = expert_weights(model, n_cpu_moe);
        if kept_out.is_empty() {
            return Err(BackendError::bad_option(
                "--n-cpu-moe",
                n_cpu_moe,
                format!("the model has no expert weights in its first {n_cpu_moe} layers"),
            ));
        }
        let kept_out_bytes = kept_out
            .iter()
            .map(|&w| model.weights.table[w].n_bytes)
            .sum();
        Ok(ExpertOffload {
            device,
            host,
            n_cpu_moe,
            kept_out,
            kept_out_bytes,
            graphs: Vec::new(),
        })
    }

    fn split(&self, graph: &Graph) -> Vec<GraphPart> {
        split_graph(graph, &|w| self.kept_out.binary_search(&w).is_ok())
    }
}

/// An offload is itself a split; splitting it again is not supported.
fn nested_split() -> BackendError {
    BackendError::unsupported(
        "graph split",
        "a graph split with another backend (--n-cpu-moe) cannot be split again",
    )
}

/// The parts of `side`, in order.
fn side_parts(parts: &[GraphPart], side: Side) -> Vec<GraphPart> {
    parts.iter().filter(|p| p.side == side).cloned().collect()
}

impl Backend for ExpertOffload {
    fn info(&self) -> BackendInfo {
        let device = self.device.info();
        BackendInfo {
            name: device.name,
            device: format!(
                "{}, experts of the first {} layers on {}",
                device.device,
                self.n_cpu_moe,
                self.host.info().device
            ),
        }
    }

    fn load_except(
        &mut self,
        model: &Model,
        kv: &KvLayout,
        kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        if !kept_out.is_empty() {
            return Err(nested_split());
        }
        self.graphs.clear();
        self.device
            .load_except(model, kv, &self.kept_out, progress)?;
        // The host runs no attention: a one-position cache keeps its
        // allocation (and its attention scratch) negligible.
        let host_kv = KvLayout::new(&model.config, 1, 1);
        self.host.load(model, &host_kv, &mut |_, _| {})
    }

    fn reserve_parts(
        &mut self,
        largest: &Graph,
        arena_bytes: usize,
        // The caller's exchange is only ever the logits, copied on the host.
        _exchange_bytes: usize,
    ) -> Result<(), BackendError> {
        self.graphs.clear();
        // Smaller graphs cut at the same ops, so their parts move fewer
        // bytes than the largest graph's.
        let exchange = self
            .split(largest)
            .iter()
            .filter(|p| p.side == Side::Device)
            .map(|p| p.exchange_bytes(largest))
            .max()
            .unwrap_or(0);
        self.device.reserve_parts(largest, arena_bytes, exchange)?;
        self.host.reserve(largest, arena_bytes)
    }

    fn prepare_parts(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError> {
        if parts != [GraphPart::whole(graph)] {
            return Err(nested_split());
        }
        let parts = self.split(graph);
        let device = self
            .device
            .prepare_parts(graph, plan, &side_parts(&parts, Side::Device))?;
        let host_parts = side_parts(&parts, Side::Host);
        let host = if host_parts.is_empty() {
            None
        } else {
            Some(self.host.prepare_parts(graph, plan, &host_parts)?)
        };
        let mut seen = [0usize; 2];
        let index = parts
            .iter()
            .map(|p| {
                let k = &mut seen[usize::from(p.side == Side::Host)];
                *k += 1;
                *k - 1
            })
            .collect();
        let exchange = Exchange::new(graph, &parts);
        self.graphs.push(SplitGraph {
            parts,
            index,
            device,
            host,
            exchange,
            logits: graph.logits,
        });
        Ok(GraphId(self.graphs.len() - 1))
    }

    fn execute_part(
        &mut self,
        id: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        if part != 0 {
            return Err(BackendError::UnknownGraph(id));
        }
        let g = self
            .graphs
            .get_mut(id.0)
            .ok_or(BackendError::UnknownGraph(id))?;
        for (p, &index) in g.parts.iter().zip(&g.index) {
            match p.side {
                Side::Device => {
                    self.device
                        .execute_part(g.device, index, inputs, &mut g.exchange)?
                }
                Side::Host => {
                    // Recorded by `prepare` whenever the graph has a host part.
                    let host = g.host.ok_or(BackendError::UnknownGraph(id))?;
                    self.host
                        .execute_part(host, index, inputs, &mut g.exchange)?
                }
            }
        }
        exchange
            .tensor_mut(g.logits)
            .copy_from_slice(g.exchange.tensor(g.logits));
        Ok(())
    }

    fn allocations(&self) -> AllocationStats {
        self.device.allocations()
    }

    fn max_sequences(&self) -> usize {
        self.device.max_sequences().min(self.host.max_sequences())
    }

    /// The device side's launches (the host's experts launch nothing).
    fn launches(&self, id: GraphId) -> Option<usize> {
        self.device.launches(self.graphs.get(id.0)?.device)
    }

    fn free_memory(&self) -> Option<FreeMemory> {
        self.device.free_memory().map(|m| FreeMemory {
            weights_kept_out: self.kept_out_bytes,
            ..m
        })
    }
}
