//! The interface every compute backend implements.
//!
//! Modelled on ggml's backend split: a backend owns a few device buffers
//! (weights, KV cache, activation arena, scratch) and computes whole planned
//! graphs. It never sees op-by-op calls from the host, so a GPU backend can
//! record a graph once and replay it every token.

use std::sync::Arc;
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
    /// Cache position of `tokens[0]` (a step of one sequence; 0 in a
    /// batched step).
    pub pos0: usize,
    /// A batched step's rows (one per token): each its own sequence and
    /// position. Empty for a step of one sequence, whose row `r` is
    /// sequence 0 at `pos0 + r`.
    pub rows: &'a [RowPos],
    /// The rows whose logits a batched step returns, in the order of the
    /// logits' rows; empty for a step of one sequence.
    pub outputs: &'a [u32],
}

impl<'a> StepInputs<'a> {
    /// A step of one sequence: `tokens` at positions `pos0..`.
    pub fn single(tokens: &'a [u32], pos0: usize) -> StepInputs<'a> {
        StepInputs {
            tokens,
            pos0,
            rows: &[],
            outputs: &[],
        }
    }
}

/// Where one row of a batched step goes: its sequence (a region of the KV
/// cache of its own, [`crate::plan::KvLayout`]'s `n_seq`) and its position
/// in that sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowPos {
    pub seq: u32,
    pub pos: u32,
}

/// Errors a caller cannot prevent (device and driver failures, memory),
/// what a backend cannot do (shapes, options, kernels it lacks), plus
/// misuse that breaks a backend's own contract. Input checks (token ids,
/// context overflow, buffer sizes) are [`crate::session::Session`]'s, made
/// once for every backend.
///
/// Every variant displays as one line. Those that keep the error under
/// them ([`BackendError::Unavailable`], [`BackendError::DeviceLost`],
/// [`BackendError::Unusable`]) already include its text, since most
/// callers print the top error only; `source()` gives the error itself,
/// to downcast. [`error_line`] prints a chain without saying a source's
/// text twice.
#[derive(Clone, Debug, thiserror::Error)]
pub enum BackendError {
    /// This backend cannot run here (no runtime, no device, a driver too
    /// old, kernels that do not fit the device); another backend can.
    /// `reason` includes the source's text.
    #[error("backend not available: {reason}")]
    Unavailable {
        reason: String,
        #[source]
        source: Option<Cause>,
    },
    /// An option or setting this backend cannot take: `name` as the user
    /// wrote it (`--device`, `ROCMFORGE_VULKAN_SUBGROUP_SIZE`), `value` as
    /// given (quoted where it is text).
    #[error("{}: {reason}", option_text(name, value))]
    BadOption {
        name: &'static str,
        value: String,
        reason: String,
    },
    /// A graph or tensor shape this backend's kernels do not take (`what`:
    /// a short noun, e.g. "attention shape"). Another backend may.
    #[error("unsupported {what}: {reason}")]
    Unsupported { what: String, reason: String },
    /// A kernel the lowering names is not in this build, or not in the
    /// code built for this device.
    #[error("kernel '{kernel}' is not available: {detail}")]
    MissingKernel { kernel: String, detail: String },
    /// A graph or part that does not match what the backend was given
    /// (the model's KV layout, its kept-out weights, the graph's own ops).
    #[error("invalid graph: {0}")]
    InvalidGraph(String),
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
    #[error("the model needs {} on {device} ({detail}) but only {} is free; use a smaller --ctx-size, a quantized KV cache (-ctk q8_0 -ctv q8_0), a smaller quantization or another backend", format_bytes(*needed), format_bytes(*free))]
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
    /// `reason` includes the source's text.
    #[error("device lost: {reason}")]
    DeviceLost {
        reason: String,
        #[source]
        source: Option<Cause>,
    },
    /// An earlier timeout or device loss stopped this backend; `first` is
    /// that error (a [`BackendError`]), shared by every refusal after it.
    #[error("the backend stopped after an earlier device failure ({first})")]
    Unusable {
        #[source]
        first: Cause,
    },
    /// A device or driver call failed in a way that says nothing about the
    /// device's health.
    #[error("device error: {0}")]
    Device(String),
}

/// The error under a [`BackendError`], shared so the error stays `Clone`
/// (a stopped backend refuses every call with the error that stopped it).
///
/// Deliberately not an [`std::error::Error`] itself: `source()` then
/// yields the error inside, so a caller can downcast it to its own type
/// (`HipError`, a Vulkan call's error, [`BackendError`]).
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync>);

impl Cause {
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Cause {
        Cause(Arc::new(e))
    }
}

impl std::ops::Deref for Cause {
    type Target = dyn std::error::Error + Send + Sync;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

/// `--device 5`, `ROCMFORGE_X="y"`: an option as the user wrote it.
fn option_text(name: &str, value: &str) -> String {
    if name.starts_with('-') {
        format!("{name} {value}")
    } else {
        format!("{name}={value}")
    }
}

/// `context: source`, or the source's text alone where there is no context.
fn with_context(context: &str, source: &dyn std::error::Error) -> String {
    if context.is_empty() {
        source.to_string()
    } else {
        format!("{context}: {source}")
    }
}

impl BackendError {
    /// True for errors after which the backend must not be used again
    /// (a fallback to another backend is the way on).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            BackendError::Timeout { .. }
                | BackendError::DeviceLost { .. }
                | BackendError::Unusable { .. }
        )
    }

    /// [`BackendError::Unavailable`] with no error under it.
    pub fn unavailable(reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable {
            reason: reason.into(),
            source: None,
        }
    }

    /// [`BackendError::Unavailable`] because of `source`; the reason reads
    /// `context: source` (the source's text alone for an empty context).
    pub fn unavailable_from(
        context: &str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> BackendError {
        BackendError::Unavailable {
            reason: with_context(context, &source),
            source: Some(Cause::new(source)),
        }
    }

    /// [`BackendError::DeviceLost`] with no error under it.
    pub fn device_lost(reason: impl Into<String>) -> BackendError {
        BackendError::DeviceLost {
            reason: reason.into(),
            source: None,
        }
    }

    /// [`BackendError::DeviceLost`] because of `source`, as
    /// [`BackendError::unavailable_from`].
    pub fn device_lost_from(
        context: &str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> BackendError {
        BackendError::DeviceLost {
            reason: with_context(context, &source),
            source: Some(Cause::new(source)),
        }
    }

    /// [`BackendError::Unusable`], refusing a call after `first` stopped
    /// the backend.
    pub fn unusable(first: &Cause) -> BackendError {
        BackendError::Unusable {
            first: first.clone(),
        }
    }

    /// [`BackendError::BadOption`].
    pub fn bad_option(
        name: &'static str,
        value: impl std::fmt::Display,
        reason: impl Into<String>,
    ) -> BackendError {
        BackendError::BadOption {
            name,
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// [`BackendError::Unsupported`].
    pub fn unsupported(what: impl Into<String>, reason: impl Into<String>) -> BackendError {
        BackendError::Unsupported {
            what: what.into(),
            reason: reason.into(),
        }
    }

    /// [`BackendError::MissingKernel`].
    pub fn missing_kernel(kernel: impl Into<String>, detail: impl Into<String>) -> BackendError {
        BackendError::MissingKernel {
            kernel: kernel.into(),
            detail: detail.into(),
        }
    }
}

/// `e` and its sources in one line, leaving out a source whose text the
/// line already holds (as [`BackendError`]'s variants hold their
/// source's): what a caller that prints the chain should print.
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        cur = s.source();
    }
    line
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

    /// Sequences this backend runs in one step: a batched graph
    /// ([`crate::graph::Graph`]'s `batched`) and a KV cache of several
    /// sequences ([`KvLayout`]'s `n_seq`) need more than 1. Required, not
    /// provided, so a wrapper cannot forget to forward it.
    fn max_sequences(&self) -> usize;

    /// Device launches (kernel dispatches) one replay of graph `id` makes,
    /// for the bench's report; `None` for a backend that launches nothing
    /// (the CPU) or a graph it does not know. Required, as
    /// [`Backend::max_sequences`].
    fn launches(&self, id: GraphId) -> Option<usize>;

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

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("hipInit failed: no ROCm-capable device is detected (error 100)")]
    struct DriverError;

    fn one_of_each() -> Vec<BackendError> {
        let lost = BackendError::device_lost_from("", DriverError);
        vec![
            BackendError::unavailable("no Vulkan device found"),
            BackendError::unavailable_from("the HIP runtime", DriverError),
            BackendError::bad_option("--device", 5, "the cpu backend has one device (0)"),
            BackendError::bad_option(
                "ROCMFORGE_VULKAN_SUBGROUP_SIZE",
                format!("{:?}", "wave64"),
                "not a number",
            ),
            BackendError::unsupported("attention shape", "head size 512 is more than 256"),
            BackendError::missing_kernel("matvec_q4_k", "not in this build"),
            BackendError::InvalidGraph("part moves tensor 9, not one of the graph's".into()),
            BackendError::NoModel,
            BackendError::NotReserved,
            BackendError::UnknownGraph(GraphId(3)),
            BackendError::ExceedsReservation {
                what: "the activation arena",
                needed: 2,
                reserved: 1,
            },
            BackendError::UnsupportedWeight {
                tensor: "blk.0.ffn_up.weight".into(),
                ty: crate::quant::QuantType::F32,
            },
            BackendError::Alignment {
                tensor: "t".into(),
                reason: "F32 data must be 4-byte aligned".into(),
            },
            BackendError::DoesNotFit {
                device: "gpu".into(),
                needed: 1 << 30,
                free: 1 << 20,
                detail: "weights 1.0 GiB".into(),
            },
            BackendError::OutOfMemory {
                what: "hipMalloc",
                bytes: 4096,
            },
            BackendError::Timeout {
                what: "op 0 of 1".into(),
                waited: Duration::from_millis(1500),
            },
            BackendError::device_lost("injected fault at step 3"),
            BackendError::unusable(&Cause::new(lost.clone())),
            lost,
            BackendError::Device("vkQueueSubmit failed".into()),
        ]
    }

    #[test]
    fn every_variant_displays_as_one_line() {
        for e in one_of_each() {
            let line = e.to_string();
            assert!(!line.is_empty() && !line.contains('\n'), "{e:?}");
            // Printing the chain repeats nothing.
            assert_eq!(error_line(&e), line, "{e:?}");
        }
    }

    #[test]
    fn sources_are_kept() {
        let unavailable = BackendError::unavailable_from("the HIP runtime", DriverError);
        assert_eq!(
            unavailable.to_string(),
            "backend not available: the HIP runtime: hipInit failed: no ROCm-capable device is detected (error 100)"
        );
        let source = unavailable.source().expect("a source");
        assert!(source.downcast_ref::<DriverError>().is_some(), "{source:?}");
        assert!(!unavailable.is_fatal());

        let lost = BackendError::device_lost_from("", DriverError);
        assert_eq!(lost.to_string(), format!("device lost: {DriverError}"));
        assert!(lost.source().unwrap().is::<DriverError>());
        assert!(lost.is_fatal());

        // A stopped backend's refusals point at the error that stopped it,
        // and through it at the driver's.
        let first = Cause::new(lost);
        let unusable = BackendError::unusable(&first);
        assert!(unusable.is_fatal());
        let under = unusable.source().expect("the first error");
        let under = under
            .downcast_ref::<BackendError>()
            .expect("a BackendError");
        assert!(
            matches!(under, BackendError::DeviceLost { .. }),
            "{under:?}"
        );
        assert!(under.source().unwrap().is::<DriverError>());
        assert_eq!(
            unusable.to_string(),
            format!(
                "the backend stopped after an earlier device failure (device lost: {DriverError})"
            )
        );

        // Without one, no source.
        for e in [
            BackendError::unavailable("no device"),
            BackendError::device_lost("injected"),
            BackendError::Device("x".into()),
        ] {
            assert!(e.source().is_none(), "{e:?}");
        }
    }

    #[test]
    fn options_read_as_written() {
        let flag = BackendError::bad_option("--threads", 100000, "at most 512");
        assert_eq!(flag.to_string(), "--threads 100000: at most 512");
        let var = BackendError::bad_option("ROCMFORGE_X", "\"y\"", "not a number");
        assert_eq!(var.to_string(), "ROCMFORGE_X=\"y\": not a number");
    }

    #[test]
    fn error_line_adds_sources_the_message_lacks() {
        #[derive(Debug, thiserror::Error)]
        #[error("loading the model")]
        struct Outer(#[source] BackendError);
        let e = Outer(BackendError::unavailable_from("", DriverError));
        assert_eq!(
            error_line(&e),
            format!("loading the model: backend not available: {DriverError}")
        );
    }
}
