//! The interface every compute backend implements.
//!
//! Modelled on ggml's backend split: a backend owns a few device buffers
//! (weights, KV cache, activation arena, scratch) and computes whole planned
//! graphs. It never sees op-by-op calls from the host, so a GPU backend can
//! record a graph once and replay it every token.

use crate::graph::Graph;
use crate::model::Model;
use crate::plan::ArenaPlan;

/// Handle to a graph recorded by [`Backend::prepare`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphId(pub usize);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    /// Registry name, e.g. `cpu`, `vulkan`, `rocm`.
    pub name: &'static str,
    /// Human-readable device, e.g. `AMD EPYC (2 threads)`.
    pub device: String,
}

/// What a backend has allocated. `device_allocations` counts every
/// allocation call made since load: it must stay constant (≤ 4 plus chunks a
/// device's maximum allocation size forces) whatever the model's tensor count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocationStats {
    pub device_allocations: usize,
    pub weight_bytes: u64,
    pub kv_bytes: u64,
    pub arena_bytes: u64,
    pub scratch_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend not available: {0}")]
    Unavailable(String),
    #[error("no model loaded")]
    NoModel,
    #[error("unknown graph handle {0:?}")]
    UnknownGraph(GraphId),
    #[error("step has {got} tokens, the graph was built for {expected}")]
    TokenCount { expected: usize, got: usize },
    #[error("token id {id} is outside the vocabulary (size {n_vocab})")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("positions {pos0}..{end} exceed the context size {n_ctx}")]
    ContextOverflow {
        pos0: usize,
        end: usize,
        n_ctx: usize,
    },
    #[error("logits buffer holds {got} values, {expected} needed")]
    LogitsBuffer { expected: usize, got: usize },
    #[error("unsupported weight type {ty} for tensor '{tensor}' on this backend")]
    UnsupportedWeight {
        tensor: String,
        ty: crate::quant::QuantType,
    },
    #[error("out of memory allocating {bytes} bytes for {what}")]
    OutOfMemory { what: &'static str, bytes: u64 },
    #[error("device error: {0}")]
    Device(String),
}

pub trait Backend {
    fn info(&self) -> BackendInfo;

    /// Makes the model's weights resident and allocates a KV cache of
    /// `n_ctx` positions. Called once per model. `progress(done, total)`
    /// reports weight bytes made resident, for a progress bar.
    fn load(
        &mut self,
        model: &Model,
        n_ctx: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError>;

    /// Records a planned graph for replay. Prepare the largest graph first: the
    /// arena is sized by the largest plan seen, and growing it costs an
    /// allocation.
    fn prepare(&mut self, graph: &Graph, plan: &ArenaPlan) -> Result<GraphId, BackendError>;

    /// Runs a recorded graph for `tokens` at positions `pos0..pos0+len` and
    /// writes its logits (rows × n_vocab, row-major) into `logits`.
    fn execute(
        &mut self,
        graph: GraphId,
        tokens: &[u32],
        pos0: usize,
        logits: &mut [f32],
    ) -> Result<(), BackendError>;

    fn allocations(&self) -> AllocationStats;
}
