//! A generation session: one model on one backend, its KV cache position, and
//! the graphs recorded for each step shape.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{Backend, BackendError, GraphId};
use crate::graph::build_graph;
use crate::model::Model;
use crate::plan::ArenaPlan;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("context full: {needed} positions needed, context size is {n_ctx}")]
    ContextFull { needed: usize, n_ctx: usize },
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
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 4096,
            n_batch: 512,
            all_logits: false,
        }
    }
}

pub struct Session {
    model: Arc<Model>,
    backend: Box<dyn Backend>,
    /// Recorded graphs by tokens per step (`all_logits` is fixed per session).
    graphs: HashMap<usize, GraphId>,
    opts: SessionOptions,
    n_past: usize,
    logits: Vec<f32>,
}

impl Session {
    /// Loads the model into the backend and records the two graphs every
    /// generation needs — a full batch and a single-token decode — largest
    /// first, so the arena is allocated once.
    pub fn new(
        model: Arc<Model>,
        mut backend: Box<dyn Backend>,
        opts: SessionOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Session, SessionError> {
        if opts.n_ctx == 0 || opts.n_batch == 0 {
            return Err(SessionError::Option(
                "context and batch sizes must be positive".into(),
            ));
        }
        let opts = SessionOptions {
            n_batch: opts.n_batch.min(opts.n_ctx),
            ..opts
        };
        backend.load(&model, opts.n_ctx, progress)?;
        let mut s = Session {
            model,
            backend,
            graphs: HashMap::new(),
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

    /// Forgets the cached positions (the cache contents are overwritten as
    /// the next prompt is evaluated).
    pub fn reset(&mut self) {
        self.n_past = 0;
    }

    fn graph(&mut self, n_tokens: usize) -> Result<GraphId, SessionError> {
        if let Some(&id) = self.graphs.get(&n_tokens) {
            return Ok(id);
        }
        let graph = build_graph(&self.model, n_tokens, self.opts.all_logits);
        let plan = ArenaPlan::new(&graph);
        let id = self.backend.prepare(&graph, &plan)?;
        self.graphs.insert(n_tokens, id);
        Ok(id)
    }

    /// Evaluates `tokens` after the cached positions, in batches of at most
    /// `n_batch`. Returns the logits of every token (with
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
        let mut out = std::mem::take(&mut self.logits);
        out.clear();
        let mut step = Vec::new();
        for chunk in tokens.chunks(self.opts.n_batch) {
            let id = self.graph(chunk.len())?;
            let rows = if all_logits { chunk.len() } else { 1 };
            step.resize(rows * n_vocab, 0.0);
            self.backend.execute(id, chunk, self.n_past, &mut step)?;
            self.n_past += chunk.len();
            if all_logits {
                out.extend_from_slice(&step);
            } else {
                out.clear();
                out.extend_from_slice(&step);
            }
        }
        self.logits = out;
        Ok(&self.logits)
    }
}
