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
//! Sequences. A session of `n_seq` > 1 sequences (`rocmforge serve -np`)
//! keeps a region of the KV cache per sequence ([`KvLayout`]) and evaluates
//! tokens of several of them in one step ([`Session::eval_batch`]): the
//! matmuls read every weight once for the whole step, each row attends
//! only to its own sequence. Its graphs are batched
//! ([`crate::graph::build_batched_graph`]): a step of `n` rows picks the
//! logits of `min(n, n_seq)` rows, the last row of each sequence that ends
//! in the step. Its step sizes add every size up to `n_seq`, so a decode
//! step of any number of sequences is one step, not a binary
//! decomposition.
//!
//! Input checks live here, once for every backend: token ids against the
//! vocabulary, positions against the context, and the logits buffer against
//! the graph.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{format_bytes, Backend, BackendError, GraphId, RowPos, StepInputs};
use crate::graph::split::{Exchange, GraphPart};
use crate::graph::{build_batched_graph, build_graph, Graph};
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
    #[error("sequence {seq} is not one of this session's {n_seq}")]
    NoSuchSequence { seq: usize, n_seq: usize },
    #[error("sequence {0} appears twice in one batch")]
    RepeatedSequence(usize),
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
    /// Sequences the cache holds, `n_ctx` positions each; more than one
    /// needs a backend that runs batched steps
    /// ([`Backend::max_sequences`]).
    pub n_seq: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 4096,
            n_batch: 512,
            all_logits: false,
            kv_types: KvTypes::default(),
            n_seq: 1,
        }
    }
}

/// One sequence's tokens in a batched evaluation ([`Session::eval_batch`]).
#[derive(Clone, Copy, Debug)]
pub struct SeqTokens<'a> {
    pub seq: usize,
    pub tokens: &'a [u32],
}

/// The step sizes of a session of `n_seq` sequences: `n_batch`, every
/// power of two below it, and every size up to `n_seq` (at most
/// `n_batch`), largest first.
pub fn step_sizes(n_batch: usize, n_seq: usize) -> Vec<usize> {
    let mut sizes = vec![n_batch];
    let mut p = n_batch.next_power_of_two() / 2;
    while p >= 1 {
        sizes.push(p);
        p /= 2;
    }
    sizes.extend(1..=n_seq.min(n_batch));
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    sizes.dedup();
    sizes
}

/// Cuts `n` rows into [`step_sizes`]: full `n_batch` steps, then powers of
/// two while more than `n_seq` rows are left, then the rest in one step
/// (one sequence: the remainder's binary decomposition, largest first).
pub fn split_steps(n: usize, n_batch: usize, n_seq: usize) -> Vec<usize> {
    let mut steps = vec![n_batch; n / n_batch];
    let mut rest = n % n_batch;
    while rest > n_seq.min(n_batch) {
        let p = 1 << rest.ilog2();
        steps.push(p);
        rest -= p;
    }
    if rest > 0 {
        steps.push(rest);
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
    /// The cache's layout, as the backend allocated it.
    kv: KvLayout,
    /// Positions in the cache, per sequence.
    n_past: Vec<usize>,
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
        let batched = opts.n_seq > 1;
        let opts = SessionOptions {
            n_batch: opts.n_batch.min(opts.n_ctx),
            n_seq: opts.n_seq.max(1),
            ..opts
        };
        if batched {
            if opts.all_logits {
                return Err(SessionError::Option(
                    "a session of several sequences keeps the logits of each sequence's last token only".into(),
                ));
            }
            if u32::try_from(opts.n_seq).is_err() {
                return Err(SessionError::Option(format!(
                    "{} sequences do not fit 32-bit sequence ids",
                    opts.n_seq
                )));
            }
            let most = backend.max_sequences();
            if opts.n_seq > most {
                return Err(SessionError::Option(format!(
                    "the {} backend runs {most} sequence{} a step, not {} (run one slot, -np 1, or use --backend cpu)",
                    backend.info().name,
                    if most == 1 { "" } else { "s" },
                    opts.n_seq
                )));
            }
        }
        let sizes = step_sizes(opts.n_batch, opts.n_seq);
        let mut graphs = HashMap::new();
        for n in sizes {
            let graph = match batched {
                true => build_batched_graph(&model, n, n.min(opts.n_seq)),
                false => build_graph(&model, n, opts.all_logits),
            };
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
        let kv = KvLayout::sequences(
            &model.config,
            opts.n_ctx,
            opts.n_batch,
            opts.kv_types,
            opts.n_seq,
        );
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
            kv,
            n_past: vec![0; opts.n_seq],
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

    /// Positions already in the KV cache (of sequence 0).
    pub fn n_past(&self) -> usize {
        self.n_past[0]
    }

    /// Positions sequence `seq` has in the cache (0 for one it lacks).
    pub fn seq_n_past(&self, seq: usize) -> usize {
        self.n_past.get(seq).copied().unwrap_or(0)
    }

    /// Positions of each sequence.
    pub fn n_ctx(&self) -> usize {
        self.opts.n_ctx
    }

    /// Sequences the session holds.
    pub fn n_seq(&self) -> usize {
        self.opts.n_seq
    }

    /// Forgets sequence `seq`'s positions from `keep` on, so its next
    /// tokens follow the first `keep` (a prompt that shares that prefix).
    /// A sliding-window layer keeps only its ring of recent positions, so
    /// cutting back further than the ring still holds forgets the whole
    /// sequence, as llama.cpp does. Returns the positions kept.
    pub fn truncate_seq(&mut self, seq: usize, keep: usize) -> usize {
        let Some(&n) = self.n_past.get(seq) else {
            return 0;
        };
        let keep = keep.min(n);
        // Each ring layer holds its last `capacity` positions: the cut's
        // next token reaches back `window - 1` from `keep`, all of which
        // must still be there.
        let kv = &self.kv;
        let lost = self.model.config.sliding_window.is_some_and(|window| {
            (0..kv.n_layer).any(|l| {
                let cap = kv.capacity(l);
                cap < kv.n_ctx && keep > 0 && n - keep > cap.saturating_sub(window)
            })
        });
        let kept = if lost { 0 } else { keep };
        self.n_past[seq] = kept;
        kept
    }

    /// Graphs recorded so far (at most ⌊log2(n_batch)⌋ + 2).
    pub fn recorded_graphs(&self) -> usize {
        self.graphs.values().filter(|g| g.id.is_some()).count()
    }

    /// Forgets the cached positions of every sequence (the cache contents
    /// are overwritten as the next prompt is evaluated).
    pub fn reset(&mut self) {
        self.n_past.fill(0);
    }

    /// Device launches a step of `n_tokens` tokens replays, once its graph
    /// is recorded (a decode step's always is: [`Session::new`] records
    /// it); `None` on a backend that launches nothing.
    pub fn step_launches(&self, n_tokens: usize) -> Option<usize> {
        let id = self.graphs.get(&n_tokens)?.id?;
        self.backend.launches(id)
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
        if self.opts.n_seq > 1 {
            return self.eval_batch(&[SeqTokens { seq: 0, tokens }]);
        }
        let all_logits = self.opts.all_logits;
        self.check_append(0, tokens)?;
        let n_vocab = self.model.config.n_vocab;
        let mut out = std::mem::take(&mut self.logits);
        out.clear();
        let mut start = 0;
        let mut last = 0;
        for n in split_steps(tokens.len(), self.opts.n_batch, 1) {
            let chunk = &tokens[start..start + n];
            start += n;
            let id = self.graph(n)?;
            let g = self.graphs.get_mut(&n).expect("recorded above");
            debug_assert_eq!(g.graph.tensor(g.graph.logits).cols, n_vocab);
            let inputs = StepInputs::single(chunk, self.n_past[0]);
            self.backend.execute_part(id, 0, &inputs, &mut g.exchange)?;
            self.n_past[0] += n;
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

    /// Evaluates each item's tokens after its sequence's cached positions,
    /// all of them in as few steps as the planned sizes allow (a step holds
    /// rows of several sequences). Returns the logits of each item's last
    /// token, one row of `n_vocab` per item in the items' order. Every
    /// item needs tokens, and a sequence may appear once per batch.
    pub fn eval_batch(&mut self, batch: &[SeqTokens]) -> Result<&[f32], SessionError> {
        self.check_batch(batch)?;
        if self.opts.n_seq == 1 {
            // Checked: one item, of sequence 0.
            return self.eval(batch[0].tokens);
        }
        let n_vocab = self.model.config.n_vocab;
        // The rows in item order, each item's tokens together; the last
        // row of each item is one whose logits come back.
        let mut rows = Vec::new();
        let mut tokens = Vec::new();
        let mut ends = Vec::with_capacity(batch.len());
        for item in batch {
            let past = self.n_past[item.seq];
            for (i, &t) in item.tokens.iter().enumerate() {
                rows.push(RowPos {
                    seq: item.seq as u32,
                    pos: (past + i) as u32,
                });
                tokens.push(t);
            }
            ends.push(rows.len() - 1);
        }
        let steps = split_steps(rows.len(), self.opts.n_batch, self.opts.n_seq);
        // One step (every decode step): all items end in it, in order, so
        // its picked rows are the answer and nothing is copied.
        let single = (steps.len() == 1).then_some(steps[0]);
        let mut out = Vec::new();
        if single.is_none() {
            out = std::mem::take(&mut self.logits);
            out.clear();
            out.resize(batch.len() * n_vocab, 0.0);
        }
        let mut start = 0;
        let mut item = 0;
        for n in steps {
            let id = self.graph(n)?;
            let g = self.graphs.get_mut(&n).expect("recorded above");
            let m = g.graph.tensor(g.graph.logits).rows;
            let step = start..start + n;
            // The items ending in this step, and which of the graph's
            // picked rows hold them; the rest pick the step's last row.
            let mut outputs = Vec::with_capacity(m);
            let mut picked = Vec::new();
            while item < ends.len() && step.contains(&ends[item]) {
                picked.push(item);
                outputs.push((ends[item] - start) as u32);
                item += 1;
            }
            debug_assert!(outputs.len() <= m, "a step holds each sequence once");
            outputs.resize(m, (n - 1) as u32);
            let inputs = StepInputs {
                tokens: &tokens[step.clone()],
                pos0: 0,
                rows: &rows[step],
                outputs: &outputs,
            };
            self.backend.execute_part(id, 0, &inputs, &mut g.exchange)?;
            let logits = g.exchange.tensor(g.graph.logits);
            if single.is_none() {
                for (k, &i) in picked.iter().enumerate() {
                    out[i * n_vocab..(i + 1) * n_vocab]
                        .copy_from_slice(&logits[k * n_vocab..(k + 1) * n_vocab]);
                }
            }
            start += n;
        }
        for item in batch {
            self.n_past[item.seq] += item.tokens.len();
        }
        if let Some(n) = single {
            let g = &self.graphs[&n];
            return Ok(&g.exchange.tensor(g.graph.logits)[..batch.len() * n_vocab]);
        }
        self.logits = out;
        Ok(&self.logits)
    }

    /// The checks of appending `tokens` to sequence `seq`: some tokens,
    /// room for them in its context, ids in the vocabulary.
    fn check_append(&self, seq: usize, tokens: &[u32]) -> Result<(), SessionError> {
        if tokens.is_empty() {
            return Err(SessionError::EmptyPrompt);
        }
        let needed = self.n_past[seq] + tokens.len();
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
        Ok(())
    }

    /// A batch's checks, before anything runs: sequences that exist, once
    /// each, with tokens that fit their context and the vocabulary.
    fn check_batch(&self, batch: &[SeqTokens]) -> Result<(), SessionError> {
        if batch.is_empty() {
            return Err(SessionError::EmptyPrompt);
        }
        let mut seen = vec![false; self.opts.n_seq];
        for item in batch {
            let n_seq = self.opts.n_seq;
            let slot = seen.get_mut(item.seq).ok_or(SessionError::NoSuchSequence {
                seq: item.seq,
                n_seq,
            })?;
            if std::mem::replace(slot, true) {
                return Err(SessionError::RepeatedSequence(item.seq));
            }
            self.check_append(item.seq, item.tokens)?;
        }
        Ok(())
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
        assert_eq!(step_sizes(512, 1).len(), 10);
        assert_eq!(step_sizes(8, 1), vec![8, 4, 2, 1]);
        assert_eq!(step_sizes(100, 1), vec![100, 64, 32, 16, 8, 4, 2, 1]);
        assert_eq!(step_sizes(1, 1), vec![1]);
        for nb in 1..300usize {
            assert!(step_sizes(nb, 1).len() <= nb.ilog2() as usize + 2);
        }
    }

    #[test]
    fn batched_steps_take_up_to_n_seq_rows_at_once() {
        assert_eq!(step_sizes(8, 3), vec![8, 4, 3, 2, 1]);
        assert_eq!(split_steps(5, 512, 8), vec![5]);
        assert_eq!(split_steps(21, 512, 4), vec![16, 4, 1]);
        assert_eq!(split_steps(1030, 512, 4), vec![512, 512, 4, 2]);
        for (nb, ns) in [(1, 4), (16, 3), (100, 8), (8, 8)] {
            let sizes = step_sizes(nb, ns);
            for n in 1..400 {
                let steps = split_steps(n, nb, ns);
                assert_eq!(steps.iter().sum::<usize>(), n);
                assert!(steps.iter().all(|s| sizes.contains(s)), "{n} {nb} {ns}");
            }
        }
    }

    #[test]
    fn steps_cover_the_prompt_with_planned_sizes() {
        assert_eq!(split_steps(14, 512, 1), vec![8, 4, 2]);
        assert_eq!(split_steps(1030, 512, 1), vec![512, 512, 4, 2]);
        assert_eq!(split_steps(250, 100, 1), vec![100, 100, 32, 16, 2]);
        for nb in [1, 3, 16, 100] {
            let sizes = step_sizes(nb, 1);
            for n in 1..400 {
                let steps = split_steps(n, nb, 1);
                assert_eq!(steps.iter().sum::<usize>(), n);
                assert!(steps.iter().all(|s| sizes.contains(s)), "{n} {nb}");
            }
        }
    }
}
