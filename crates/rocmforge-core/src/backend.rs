//! The interface every compute backend implements.
//!
//! Modelled on ggml's backend split: a backend owns a few device buffers
//! (weights, KV cache, activation arena, scratch) and computes whole planned
//! graphs. It never sees op-by-op calls from the host, so a GPU backend can
//! record a graph once and replay it every token.

use std::time::Duration;

use crate::graph::split::{Exchange, GraphPart};
use crate::graph::Graph;
use crate::model::{Model, WeightId};
use crate::plan::{ArenaPlan, KvLayout};

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

/// One step's runtime inputs. The backend writes them into the plan's
/// step-input region (see [`crate::plan::StepInputLayout`]) before replaying
/// the graph; nothing else about a step changes between replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepInputs<'a> {
    pub tokens: &'a [u32],
    /// Cache position of `tokens[0]`.
    pub pos0: usize,
}

/// Errors a caller cannot prevent (device and driver failures, memory), plus
/// misuse that breaks a backend's own contract. Input checks (token ids,
/// context overflow, buffer sizes) are [`crate::session::Session`]'s, made
/// once for every backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend not available: {0}")]
    Unavailable(String),
    #[error("no model loaded")]
    NoModel,
    #[error("reserve() must be called once after load() and before prepare()")]
    NotReserved,
    #[error("unknown graph handle {0:?}")]
    UnknownGraph(GraphId),
    #[error("{what} needs {needed} bytes but {reserved} were reserved; reserve for the largest graph first")]
    ExceedsReservation {
        what: &'static str,
        needed: u64,
        reserved: u64,
    },
    #[error("unsupported weight type {ty} for tensor '{tensor}' on this backend")]
    UnsupportedWeight {
        tensor: String,
        ty: crate::quant::QuantType,
    },
    #[error("rope parameters: {0}")]
    Rope(#[from] crate::graph::RopeError),
    #[error("tensor '{tensor}' is not aligned for this device: {reason}")]
    Alignment { tensor: String, reason: String },
    /// The model does not fit in the memory the device has free, found
    /// before anything was allocated ([`Backend::free_memory`]).
    #[error("the model needs {} on {device} ({detail}) but only {} is free; use a smaller --ctx-size, a smaller quantization or another backend", format_bytes(*needed), format_bytes(*free))]
    DoesNotFit {
        device: String,
        needed: u64,
        free: u64,
        /// What the bytes are for, e.g. "weights 3.9 GiB, KV cache 1.0 GiB".
        detail: String,
    },
    #[error("out of memory allocating {bytes} bytes for {what}")]
    OutOfMemory { what: &'static str, bytes: u64 },
    /// A bounded wait on the device expired. The backend is unusable
    /// afterwards ([`BackendError::Unusable`]); the process is not.
    #[error("device did not finish {what} within {:.1} s; the backend is stopped", waited.as_secs_f64())]
    Timeout { what: String, waited: Duration },
    /// The driver reported the device lost (reset, hang recovery, unplug).
    #[error("device lost: {0}")]
    DeviceLost(String),
    /// An earlier timeout or device loss stopped this backend.
    #[error("the backend stopped after an earlier device failure ({0})")]
    Unusable(String),
    #[error("device error: {0}")]
    Device(String),
}

impl BackendError {
    /// True for errors after which the backend must not be used again
    /// (a fallback to another backend is the way on).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            BackendError::Timeout { .. } | BackendError::DeviceLost(_) | BackendError::Unusable(_)
        )
    }
}

/// What a backend can say about its memory before allocating any of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeMemory {
    /// Bytes free for this process's allocations now.
    pub free: u64,
    /// Whether `load` copies the weights into this memory (GPU backends) or
    /// reads them from the file's mapping (the CPU backend, where the page
    /// cache can hold them, or page them in as llama.cpp's mmap does).
    pub holds_weights: bool,
    /// Bytes of the model's weights that stay out of this memory because
    /// another backend computes with them (`--n-cpu-moe`).
    pub weights_kept_out: u64,
}

/// `1.5 GiB`, `512.0 MiB`, `12 bytes`: sizes in errors people read.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.1} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}

/// A compute backend: a few device buffers plus graph execution.
///
/// The trait has one form, the parts form: a graph is recorded as one or
/// more [`GraphPart`]s (runs of ops), and each run moves the tensors it
/// imports and exports through an [`Exchange`] in host memory. A whole
/// graph is one part exporting its logits ([`GraphPart::whole`]). The
/// whole-graph calls ([`Backend::load`], [`Backend::reserve`],
/// [`Backend::prepare`]) are provided over the parts calls and are not
/// meant to be overridden, so a wrapper that forwards the required methods
/// forwards everything; running a recorded graph is always
/// [`Backend::execute_part`].
///
/// The call order is `load_except` (or `load`), `reserve_parts` (or
/// `reserve`), then any number of `prepare_parts` (or `prepare`), then any
/// number of `execute_part`. [`crate::session::Session`] keeps to it.
pub trait Backend {
    fn info(&self) -> BackendInfo;

    /// Makes the model's weights resident, except those `kept_out` names,
    /// and allocates the KV cache `kv` describes (`kv.bytes()`, every
    /// layer's block at its offset; a sliding-window layer's positions in a
    /// ring). Called once per model. Ops that read a kept-out weight run on
    /// another backend (a graph split with [`crate::graph::split`]), and a
    /// part recorded here that reads one is an error. `progress(done,
    /// total)` reports weight bytes made resident, for a progress bar.
    fn load_except(
        &mut self,
        model: &Model,
        kv: &KvLayout,
        kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError>;

    /// Sizes the activation arena (`arena_bytes`, the largest plan of the
    /// session), the backend's scratch (from `largest`, the graph with the
    /// most tokens) and `exchange_bytes` of memory the host can read and
    /// write for the largest part's imports and exports, once. Graphs
    /// recorded later never reallocate, so addresses frozen into recorded
    /// command buffers stay valid.
    fn reserve_parts(
        &mut self,
        largest: &Graph,
        arena_bytes: usize,
        exchange_bytes: usize,
    ) -> Result<(), BackendError>;

    /// Records `parts` of a planned graph (those of this backend's side,
    /// in order) for replay one at a time. The plan is the whole graph's,
    /// so every tensor has the same offset on every backend that runs a
    /// part of it. A graph that needs more than was reserved is
    /// [`BackendError::ExceedsReservation`].
    fn prepare_parts(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError>;

    /// Runs part `part` (an index into the `parts` given to
    /// [`Backend::prepare_parts`]): writes `inputs` into the step-input
    /// region, the part's imports from `exchange` into the arena, replays
    /// the part's ops and copies its exports into `exchange`.
    ///
    /// The caller runs the parts of a step in order, each after the parts
    /// whose exports it imports, with the same `inputs`. It guarantees
    /// (Session checks it): `inputs.tokens.len()` is the graph's
    /// `n_tokens`, every id is below the vocabulary size, `pos0 + n_tokens
    /// <= n_ctx`, and `exchange` was made for these parts. A backend may
    /// panic on a violation but must stay memory-safe (device kernels
    /// clamp what they index with).
    fn execute_part(
        &mut self,
        graph: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError>;

    fn allocations(&self) -> AllocationStats;

    /// [`Backend::load_except`] keeping nothing out.
    fn load(
        &mut self,
        model: &Model,
        kv: &KvLayout,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        self.load_except(model, kv, &[], progress)
    }

    /// [`Backend::reserve_parts`] for whole graphs, whose only export is
    /// their logits (room every backend keeps anyway).
    fn reserve(&mut self, largest: &Graph, arena_bytes: usize) -> Result<(), BackendError> {
        self.reserve_parts(largest, arena_bytes, 0)
    }

    /// Records a whole graph as one part ([`GraphPart::whole`]): run it with
    /// `execute_part(id, 0, ..)` and an [`Exchange`] made for that part,
    /// which then holds the logits.
    fn prepare(&mut self, graph: &Graph, plan: &ArenaPlan) -> Result<GraphId, BackendError> {
        self.prepare_parts(graph, plan, &[GraphPart::whole(graph)])
    }

    /// Memory free on the device now, asked before `load` so a model that
    /// cannot fit is refused with the sizes instead of failing (or, on some
    /// drivers, hanging) midway through its allocations. `None` where the
    /// device cannot tell; the session then skips the check.
    fn free_memory(&self) -> Option<FreeMemory> {
        None
    }
}
