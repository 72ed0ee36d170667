//! A generation session: one model on one backend, its KV cache position, and
//! the graphs recorded for each step size.
//!
//! Step sizes. A recorded graph has a fixed number of tokens, so a prompt of
//! any length is cut into steps of a few fixed sizes: as many full `n_batch`
//! steps as fit, then the remainder as a sum of distinct powers of two
//! (binary decomposition: 14 = 8 + 4 + 2). A session therefore records at
//! most the `n_batch` graph plus one per power of two below it, at most
//! ⌊log2(n_batch)⌋ + 2 graphs, whatever the prompts. We chose this over
//! padding the tail to the next size and masking the extra rows because
//! every row computed is real (no kernel needs a mask, the KV cache is never
//! written past the prompt, and a padded step can cost up to twice the
//! compute), at the price of up to ⌊log2(n_batch)⌋ extra submits for the
//! tail, a few tens of microseconds each on a GPU.
//!
//! Input checks live here, once for every backend: token ids against the
//! vocabulary, positions against the context, and the logits buffer against
//! the graph.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{format_bytes, Backend, BackendError, GraphId, StepInputs};
use crate::graph::split::{Exchange, GraphPart};
use crate::graph::{build_graph, Graph};
use crate::model::Model;
use crate::plan::{ArenaPlan, KvLayout, KvTypes};

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("context full: {needed} positions needed, context size is {n_ctx}")]
    ContextFull { needed: usize, n_ctx: usize },
    #[error("token id {id} is outside the vocabulary (size {n_vocab})")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("invalid option: {0}")]
    Option(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionOptions {
    /// KV cache positions.
    pub n_ctx: usize,
    /// Largest number of prompt tokens evaluated in one step (llama.cpp's
    /// ubatch); longer prompts are split.
    pub n_batch: usize,
    /// Keep the logits of every evaluated token (prompt scoring, tests)
    /// instead of the last one only. Decided up front because a batch's
    /// logits are the arena's largest tensor.
    pub all_logits: bool,
    /// How the cache keeps K and V (`--cache-type-k` / `--cache-type-v`).
    pub kv_types: KvTypes,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 4096,
            n_batch: 512,
            all_logits: false,
            kv_types: KvTypes::default(),
        }
    }
}

/// The step sizes a session uses: `n_batch`, then every power of two below
/// it, largest first.
pub fn step_sizes(n_batch: usize) -> Vec<usize> {
    let mut sizes = vec![n_batch];
    let mut p = if n_batch.is_power_of_two() {
        n_batch / 2
    } else {
        n_batch.next_power_of_two() / 2
    };
    while p >= 1 {
        sizes.push(p);
        p /= 2;
    }
    sizes
}

/// Cuts `n` tokens into steps: full `n_batch` steps, then the remainder's
/// binary decomposition, largest first.
pub fn split_steps(n: usize, n_batch: usize) -> Vec<usize> {
    let mut steps = vec![n_batch; n / n_batch];
    let rest = n % n_batch;
    for bit in (0..usize::BITS).rev() {
        if rest & (1 << bit) != 0 {
            steps.push(1 << bit);
        }
    }
    steps
}

struct StepGraph {
    graph: Graph,
    plan: ArenaPlan,
    id: Option<GraphId>,
    /// Where the recorded graph's logits come back (made when it is
    /// recorded, so sizes a session never runs hold no memory).
    exchange: Exchange,
}

pub struct Session {
    model: Arc<Model>,
    backend: Box<dyn Backend>,
    /// Planned graphs by tokens per step; recorded on first use.
    graphs: HashMap<usize, StepGraph>,
    opts: SessionOptions,
    n_past: usize,
    logits: Vec<f32>,
}

impl Session {
    /// Loads the model into the backend, plans the graph of every step size,
    /// reserves the arena and scratch once for the largest, and records the
    /// two graphs every generation needs (a full batch and a single-token
    /// decode); the others are recorded when a prompt first needs them.
    pub fn new(
        model: Arc<Model>,
        backend: Box<dyn Backend>,
        opts: SessionOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Session, SessionError> {
        Session::new_reporting(model, backend, opts, progress, &mut |_| {})
    }

    /// [`Session::new`], first telling `report` what memory the session
    /// needs and what the backend has free, before anything is allocated.
    /// A model that does not fit is refused instead, with the same figures
    /// in the error.
    pub fn new_reporting(
        model: Arc<Model>,
        mut backend: Box<dyn Backend>,
        opts: SessionOptions,
        progress: &mut dyn FnMut(u64, u64),
        report: &mut dyn FnMut(&MemoryNeeds),
    ) -> Result<Session, SessionError> {
        if opts.n_ctx == 0 || opts.n_batch == 0 {
            return Err(SessionError::Option(
                "context and batch sizes must be positive".into(),
            ));
        }
        if u32::try_from(opts.n_ctx).is_err() {
            return Err(SessionError::Option(format!(
                "context size {} does not fit 32-bit positions",
                opts.n_ctx
            )));
        }
        opts.kv_types
            .check(model.config.head_dim)
            .map_err(SessionError::Option)?;
        let opts = SessionOptions {
            n_batch: opts.n_batch.min(opts.n_ctx),
            ..opts
        };
        let mut graphs = HashMap::new();
        for n in step_sizes(opts.n_batch) {
            let graph = build_graph(&model, n, opts.all_logits);
            let plan = ArenaPlan::new(&graph);
            graphs.insert(
                n,
                StepGraph {
                    graph,
                    plan,
                    id: None,
                    exchange: Exchange::default(),
                },
            );
        }
        let arena_bytes = graphs.values().map(|g| g.plan.arena_bytes).max();
        let kv = KvLayout::typed(&model.config, opts.n_ctx, opts.n_batch, opts.kv_types);
        let needs = MemoryNeeds::of(&*backend, &model, &kv, arena_bytes.unwrap_or(0));
        // A model that does not fit is refused with these same figures, so
        // only one that fits is reported (an error stays one line).
        needs.check()?;
        report(&needs);
        backend.load(&model, &kv, progress)?;
        backend.reserve(&graphs[&opts.n_batch].graph, arena_bytes.unwrap_or(0))?;
        let mut s = Session {
            model,
            backend,
            graphs,
            opts,
            n_past: 0,
            logits: Vec::new(),
        };
        s.graph(opts.n_batch)?;
        s.graph(1)?;
        Ok(s)
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// Positions already in the KV cache.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    pub fn n_ctx(&self) -> usize {
        self.opts.n_ctx
    }

    /// Graphs recorded so far (at most ⌊log2(n_batch)⌋ + 2).
    pub fn recorded_graphs(&self) -> usize {
        self.graphs.values().filter(|g| g.id.is_some()).count()
    }

    /// Forgets the cached positions (the cache contents are overwritten as
    /// the next prompt is evaluated).
    pub fn reset(&mut self) {
        self.n_past = 0;
    }

    fn graph(&mut self, n_tokens: usize) -> Result<GraphId, SessionError> {
        let g = self
            .graphs
            .get_mut(&n_tokens)
            .expect("steps are cut into planned sizes");
        if let Some(id) = g.id {
            return Ok(id);
        }
        let id = self.backend.prepare(&g.graph, &g.plan)?;
        g.exchange = Exchange::new(&g.graph, &[GraphPart::whole(&g.graph)]);
        g.id = Some(id);
        Ok(id)
    }

    /// Evaluates `tokens` after the cached positions, in steps of the
    /// planned sizes. Returns the logits of every token (with
    /// [`SessionOptions::all_logits`], row-major tokens × vocab) or of the
    /// last token only.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<&[f32], SessionError> {
        let all_logits = self.opts.all_logits;
        if tokens.is_empty() {
            return Err(SessionError::EmptyPrompt);
        }
        let needed = self.n_past + tokens.len();
        if needed > self.opts.n_ctx {
            return Err(SessionError::ContextFull {
                needed,
                n_ctx: self.opts.n_ctx,
            });
        }
        let n_vocab = self.model.config.n_vocab;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(SessionError::TokenOutOfRange { id, n_vocab });
        }
        let mut out = std::mem::take(&mut self.logits);
        out.clear();
        let mut start = 0;
        let mut last = 0;
        for n in split_steps(tokens.len(), self.opts.n_batch) {
            let chunk = &tokens[start..start + n];
            start += n;
            let id = self.graph(n)?;
            let g = self.graphs.get_mut(&n).expect("recorded above");
            debug_assert_eq!(g.graph.tensor(g.graph.logits).cols, n_vocab);
            let inputs = StepInputs {
                tokens: chunk,
                pos0: self.n_past,
            };
            self.backend.execute_part(id, 0, &inputs, &mut g.exchange)?;
            self.n_past += n;
            if all_logits {
                out.extend_from_slice(g.exchange.tensor(g.graph.logits));
            }
            last = n;
        }
        self.logits = out;
        if all_logits {
            return Ok(&self.logits);
        }
        // The last step's logits where the backend left them: a decode
        // step copies none (a large vocabulary's row is ~0.6 MB, tens of
        // µs a token).
        let g = &self.graphs[&last];
        Ok(g.exchange.tensor(g.graph.logits))
    }
}

/// What a session needs on its backend, worked out before anything is
/// allocated: the weights (where the backend copies them), the KV cache and
/// the activation arena, against what the backend says is free. Backend
/// scratch is left out, so this is a lower bound: a model that passes can
/// still run out, and then fails at allocation with
/// [`BackendError::OutOfMemory`].
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryNeeds {
    pub device: String,
    /// Weight bytes the backend copies into its memory; `None` when it
    /// reads them from the file's mapping (the CPU backend).
    pub weights: Option<u128>,
    /// u128: a context of 2^32 positions times a large model overflows u64
    /// arithmetic on the way to the (refused) total.
    pub kv: u128,
    pub n_ctx: usize,
    /// The cache's K and V types.
    pub kv_types: KvTypes,
    /// Sliding-window layers, which keep a ring of positions, and its size.
    pub ring_layers: usize,
    pub ring: usize,
    pub activations: u128,
    /// Expert weights left in host memory (`--n-cpu-moe`), not counted
    /// in `weights`.
    pub weights_kept_out: u64,
    /// Bytes free, if the backend can tell.
    pub free: Option<u64>,
}

impl MemoryNeeds {
    fn of(backend: &dyn Backend, model: &Model, kv: &KvLayout, arena_bytes: usize) -> MemoryNeeds {
        let mem = backend.free_memory();
        let rings: Vec<usize> = (0..kv.n_layer)
            .map(|l| kv.capacity(l))
            .filter(|&c| c < kv.n_ctx)
            .collect();
        MemoryNeeds {
            device: backend.info().device,
            weights: mem.filter(|m| m.holds_weights).map(|m| {
                model
                    .weights
                    .region_bytes
                    .saturating_sub(m.weights_kept_out) as u128
            }),
            weights_kept_out: mem.map_or(0, |m| m.weights_kept_out),
            kv: kv.bytes_u128(),
            n_ctx: kv.n_ctx,
            kv_types: kv.types,
            ring_layers: rings.len(),
            ring: rings.first().copied().unwrap_or(0),
            activations: arena_bytes as u128,
            free: mem.map(|m| m.free),
        }
    }

    pub fn total(&self) -> u128 {
        self.weights.unwrap_or(0) + self.kv + self.activations
    }

    /// What the bytes are for: "weights 3.9 GiB, KV cache 1.0 GiB for 4096
    /// positions, activations 60.0 MiB".
    pub fn detail(&self) -> String {
        let mut parts = Vec::new();
        match self.weights {
            Some(w) if self.weights_kept_out > 0 => parts.push(format!(
                "weights {} (experts of {} left in host memory)",
                format_bytes(clamp(w)),
                format_bytes(self.weights_kept_out)
            )),
            Some(w) => parts.push(format!("weights {}", format_bytes(clamp(w)))),
            None => parts.push("weights read from the file's mapping".into()),
        }
        let rings = match self.ring_layers {
            0 => String::new(),
            n => format!(", {n} sliding-window layers in rings of {}", self.ring),
        };
        let types = if self.kv_types == KvTypes::default() {
            String::new()
        } else {
            format!(" (K {}, V {})", self.kv_types.k, self.kv_types.v)
        };
        parts.push(format!(
            "KV cache {}{types} for {} positions{rings}",
            format_bytes(clamp(self.kv)),
            self.n_ctx
        ));
        parts.push(format!(
            "activations {}",
            format_bytes(clamp(self.activations))
        ));
        parts.join(", ")
    }

    /// One line for people: what is needed, and what is free where known.
    pub fn summary(&self) -> String {
        let free = match self.free {
            Some(f) => format!(" of {} free", format_bytes(f)),
            None => String::new(),
        };
        format!(
            "memory: {} needed{free} on {} ({})",
            format_bytes(clamp(self.total())),
            self.device,
            self.detail()
        )
    }

    /// [`BackendError::DoesNotFit`] when the backend said how much is free
    /// and it is less than needed.
    pub fn check(&self) -> Result<(), BackendError> {
        match self.free {
            Some(free) if self.total() > free as u128 => Err(BackendError::DoesNotFit {
                device: self.device.clone(),
                needed: clamp(self.total()),
                free,
                detail: self.detail(),
            }),
            _ => Ok(()),
        }
    }
}

fn clamp(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_needs_say_what_they_are_for_and_refuse_what_does_not_fit() {
        let mut needs = MemoryNeeds {
            device: "gpu0".into(),
            weights: Some(3 << 30),
            kv: 1 << 30,
            n_ctx: 4096,
            kv_types: KvTypes::default(),
            ring_layers: 5,
            ring: 1535,
            activations: 64 << 20,
            weights_kept_out: 0,
            free: Some(8 << 30),
        };
        assert_eq!(needs.total(), (4 << 30) + (64 << 20));
        assert_eq!(
            needs.detail(),
            "weights 3.0 GiB, KV cache 1.0 GiB for 4096 positions, 5 sliding-window \
             layers in rings of 1535, activations 64.0 MiB"
        );
        assert!(needs
            .summary()
            .starts_with("memory: 4.1 GiB needed of 8.0 GiB free on gpu0"));
        assert!(needs.check().is_ok());
        needs.free = Some(1 << 30);
        assert!(matches!(
            needs.check(),
            Err(BackendError::DoesNotFit { needed, free, .. }) if needed > free
        ));
        // A backend that cannot tell what is free refuses nothing.
        needs.free = None;
        assert!(needs.check().is_ok());
        assert!(!needs.summary().contains("free"));
    }

    #[test]
    fn step_sizes_are_the_batch_and_powers_of_two_below() {
        assert_eq!(step_sizes(512).len(), 10);
        assert_eq!(step_sizes(8), vec![8, 4, 2, 1]);
        assert_eq!(step_sizes(100), vec![100, 64, 32, 16, 8, 4, 2, 1]);
        assert_eq!(step_sizes(1), vec![1]);
        for nb in 1..300usize {
            assert!(step_sizes(nb).len() <= nb.ilog2() as usize + 2);
        }
    }

    #[test]
    fn steps_cover_the_prompt_with_planned_sizes() {
        assert_eq!(split_steps(14, 512), vec![8, 4, 2]);
        assert_eq!(split_steps(1030, 512), vec![512, 512, 4, 2]);
        assert_eq!(split_steps(250, 100), vec![100, 100, 32, 16, 2]);
        for nb in [1, 3, 16, 100] {
            let sizes = step_sizes(nb);
            for n in 1..400 {
                let steps = split_steps(n, nb);
                assert_eq!(steps.iter().sum::<usize>(), n);
                assert!(steps.iter().all(|s| sizes.contains(s)), "{n} {nb}");
            }
        }
    }
}
