//! The one thread that owns the model: a [`Session`] is neither `Send` nor
//! shareable (it holds the backend), so it lives on a dedicated thread, and
//! requests reach it through a FIFO queue of [`Job`]s.
//!
//! Continuous batching. The session holds `-np` sequences, one per *slot*.
//! Each step, every slot that is generating contributes its next token and
//! the slots still reading their prompts contribute a chunk of it (in
//! arrival order, up to the step's budget of `n_batch` tokens), and one
//! [`Session::eval_batch`] evaluates them all: the weights are read once
//! for every stream. Requests join between steps as slots free up, so a
//! long prompt is read in chunks beside the others' decoding instead of
//! stalling them, and the queue is served first come, first served.
//!
//! Prompt cache. A slot keeps the tokens its cache region holds after its
//! request ends; a new request takes the free slot whose tokens share the
//! longest prefix with its prompt and evaluates only the rest (a system
//! prompt, a conversation sent again with one more turn). `cache_prompt:
//! false` starts from an empty region.
//!
//! A client that goes away drops its receiver: its slot is freed before
//! the next step (and a job whose client left while it waited is skipped).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Arc;

use rocmforge_core::chat::reasoning::ReasoningFormat;
use rocmforge_core::chat::{
    message_prompt_tokens, prompt_tokens, ChatTemplate, Message, RenderOptions, StopStrings,
};
use rocmforge_core::grammar::{Constraint, Grammars};
use rocmforge_core::sampler::{Sampler, SamplerConfig};
use rocmforge_core::session::{SeqTokens, Session};
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use super::errors::ApiError;
use super::metrics::Metrics;
use super::openai::{FinishReason, TokenLogprob, TopLogprob};

/// What to evaluate.
pub enum Input {
    /// Rendered with the model's chat template, generation prompt added,
    /// with the tools (OpenAI's list) where there are any.
    Chat(Vec<Message>, Option<serde_json::Value>),
    /// Tokenized as is (special-token text parsed, BOS as the model wants).
    Text(String),
}

/// One request's generation settings, already checked.
pub struct Generation {
    pub sampler: SamplerConfig,
    /// Tokens to generate at most; `None`: until the model stops or the
    /// context is full.
    pub max_tokens: Option<usize>,
    pub stops: Vec<String>,
    /// Alternatives per token to report; `None`: no logprobs at all.
    pub top_logprobs: Option<usize>,
    /// Reuse a slot's cached prefix (llama-server's `cache_prompt`).
    pub cache_prompt: bool,
    /// What the reply must be (constrained decoding); `None`: free text.
    pub format: Option<OutputFormat>,
}

/// A reply's required form: `response_format` or `grammar`.
#[derive(Debug, Clone)]
pub enum OutputFormat {
    JsonObject,
    JsonSchema(serde_json::Value),
    /// llama.cpp's GBNF.
    Gbnf(String),
    /// llguidance's Lark (a function call a reply must be).
    Lark(String),
}

pub struct Job {
    pub input: Input,
    pub generation: Generation,
    pub events: UnboundedSender<Event>,
}

/// What a job sends back, in this order: `Rejected`, or `Started`, any
/// number of `Token`s, then `Done` or `Failed`.
#[derive(Debug)]
pub enum Event {
    /// The request cannot run (context overflow, a template error); nothing
    /// was evaluated.
    Rejected(ApiError),
    Started {
        prompt_tokens: usize,
        /// The rendered prompt opened the reply's reasoning (a generation
        /// prompt ending with `<think>`), so the reply starts inside it.
        reasoning_open: bool,
    },
    /// One generated token: the text it released (empty while a character
    /// is incomplete or a possible stop string is held back) and its
    /// log-probabilities when asked for.
    Token {
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done {
        finish_reason: FinishReason,
        prompt_tokens: usize,
        /// Prompt tokens found in the slot's cache, not evaluated again.
        cached_tokens: usize,
        completion_tokens: usize,
    },
    /// The model failed mid-way (a backend error).
    Failed(String),
}

/// What the HTTP side needs to know about the model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// Context of one slot.
    pub n_ctx: usize,
    pub slots: usize,
    /// How the chat template writes function calls, if it does.
    pub tool_format: Option<rocmforge_core::chat::ToolFormat>,
    /// How replies carry their reasoning, split out of the rest
    /// (`--reasoning-format`), if the template says.
    pub reasoning: Option<ReasoningFormat>,
}

/// Everything the worker thread owns.
pub struct Worker {
    pub session: Session,
    pub tok: Tokenizer,
    pub template: ChatTemplate,
    pub render: RenderOptions,
    pub metrics: Arc<Metrics>,
    /// Special-token text in chat message content becomes control tokens
    /// (`--special-in-content`), as in llama-server; else it stays text.
    pub special_in_content: bool,
    /// Tokens one step evaluates at most (prompt chunks beside the
    /// streams' next tokens).
    pub step_tokens: usize,
    /// The vocabulary as the grammar engine sees it, built on the first
    /// request that asks for a format.
    pub grammars: Option<Grammars>,
}

/// One sequence of the session.
#[derive(Default)]
struct Slot {
    /// The tokens the slot's cache region holds, in order.
    cached: Vec<u32>,
    stream: Option<Stream>,
}

/// A request a slot is answering.
struct Stream {
    events: UnboundedSender<Event>,
    g: Generation,
    prompt: Vec<u32>,
    /// Prompt tokens in the cache so far.
    fed: usize,
    cached_tokens: usize,
    sampler: Sampler,
    decoder: StreamDecoder,
    stops: StopStrings,
    generated: usize,
    /// The token sampled last, evaluated in the next step.
    next: Option<u32>,
    /// Order of arrival: prompts are read first come, first served.
    order: u64,
    /// The reply's grammar, and the logits it masks.
    constraint: Option<Constraint>,
    masked: Vec<f32>,
}

/// What became of a stream after its logits were sampled.
enum Outcome {
    Going,
    Finished(FinishReason),
    Left,
    /// The stream's grammar failed (its event is sent).
    Failed,
}

impl Worker {
    /// Runs jobs until every sender is gone (the server stopped).
    pub fn serve(mut self, jobs: mpsc::Receiver<Job>) {
        let mut slots: Vec<Slot> = (0..self.session.n_seq()).map(|_| Slot::default()).collect();
        let mut waiting: VecDeque<Job> = VecDeque::new();
        let mut arrivals = 0u64;
        loop {
            let busy = slots.iter().any(|s| s.stream.is_some());
            if !busy && waiting.is_empty() {
                match jobs.recv() {
                    Ok(job) => waiting.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = jobs.try_recv() {
                waiting.push_back(job);
            }
            self.drop_left(&mut slots);
            while slots.iter().any(|s| s.stream.is_none()) {
                let Some(job) = waiting.pop_front() else {
                    break;
                };
                Metrics::sub(&self.metrics.queued, 1);
                arrivals += 1;
                self.start(&mut slots, job, arrivals);
            }
            Metrics::set(&self.metrics.slots_busy, busy_count(&slots));
            // A panic in one step must not take the server down: the
            // streams of the step fail, the session starts over.
            let outcome = catch_unwind(AssertUnwindSafe(|| self.step(&mut slots)));
            let failure = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(panic) => Some(format!(
                    "internal error: {}",
                    panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into())
                )),
            };
            if let Some(e) = failure {
                for slot in &mut slots {
                    if let Some(st) = slot.stream.take() {
                        let _ = st.events.send(Event::Failed(e.clone()));
                        Metrics::sub(&self.metrics.running, 1);
                    }
                    slot.cached.clear();
                }
                self.session.reset();
            }
            Metrics::set(&self.metrics.slots_busy, busy_count(&slots));
        }
    }

    /// Frees the slots whose client left.
    fn drop_left(&self, slots: &mut [Slot]) {
        for slot in slots {
            if slot.stream.as_ref().is_some_and(|s| s.events.is_closed()) {
                slot.stream = None;
                Metrics::add(&self.metrics.cancelled_requests, 1);
                Metrics::sub(&self.metrics.running, 1);
            }
        }
    }

    /// Starts `job` in the free slot whose cached tokens share the longest
    /// prefix with its prompt, or answers it with its rejection.
    fn start(&mut self, slots: &mut [Slot], job: Job, order: u64) {
        let Job {
            input,
            generation: g,
            events,
        } = job;
        if events.is_closed() {
            Metrics::add(&self.metrics.cancelled_requests, 1);
            return;
        }
        let (prompt, reasoning_open) = match self
            .prompt(&input)
            .and_then(|p| self.check_fits(&p.0, g.max_tokens).map(|()| p))
        {
            Ok(p) => p,
            Err(e) => {
                let _ = events.send(Event::Rejected(e));
                return;
            }
        };
        let sampler = match Sampler::new(g.sampler.clone()) {
            Ok(s) => s,
            Err(e) => {
                let _ = events.send(Event::Failed(e.to_string()));
                return;
            }
        };
        let constraint = match g.format.as_ref().map(|f| self.constraint(f)) {
            None => None,
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                let _ = events.send(Event::Rejected(e));
                return;
            }
        };
        if events
            .send(Event::Started {
                prompt_tokens: prompt.len(),
                reasoning_open,
            })
            .is_err()
        {
            Metrics::add(&self.metrics.cancelled_requests, 1);
            return;
        }
        let (k, shared) = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.stream.is_none())
            .map(|(i, s)| (i, common_prefix(&s.cached, &prompt)))
            // The longest shared prefix; among equals, the slot that holds
            // least, keeping the others' caches for later.
            .max_by(|a, b| {
                a.1.cmp(&b.1)
                    .then(slots[b.0].cached.len().cmp(&slots[a.0].cached.len()))
            })
            .expect("start is called with a free slot");
        // At least the prompt's last token is evaluated: its logits give
        // the first reply token.
        let want = if g.cache_prompt {
            shared.min(prompt.len() - 1)
        } else {
            0
        };
        let kept = self.session.truncate_seq(k, want);
        slots[k].cached.truncate(kept);
        let mut sampler = sampler;
        for &t in &prompt {
            sampler.accept(t);
        }
        Metrics::add(&self.metrics.prompt_tokens, prompt.len() as u64);
        Metrics::add(&self.metrics.cached_prompt_tokens, kept as u64);
        Metrics::add(&self.metrics.running, 1);
        let stops = StopStrings::new(g.stops.iter().cloned());
        slots[k].stream = Some(Stream {
            events,
            g,
            prompt,
            fed: kept,
            cached_tokens: kept,
            sampler,
            decoder: StreamDecoder::new(),
            stops,
            generated: 0,
            next: None,
            order,
            constraint,
            masked: Vec::new(),
        });
    }

    /// The grammar `format` asks for, or the 400 that names what is wrong
    /// with it.
    fn constraint(&mut self, format: &OutputFormat) -> Result<Constraint, ApiError> {
        if self.grammars.is_none() {
            let g = Grammars::new(&self.tok).map_err(|e| ApiError::invalid(e.to_string(), None))?;
            self.grammars = Some(g);
        }
        let g = self.grammars.as_ref().expect("built above");
        let (c, param) = match format {
            OutputFormat::JsonObject => (g.json_object(), "response_format"),
            OutputFormat::JsonSchema(schema) => (g.json_schema(schema), "response_format"),
            OutputFormat::Gbnf(src) => (g.gbnf(src), "grammar"),
            OutputFormat::Lark(src) => (g.lark(src), "tool_choice"),
        };
        c.map_err(|e| ApiError::invalid(format!("{param}: {e}"), Some(param)))
    }

    /// One step: every generating slot's next token and prompt chunks of
    /// the others, evaluated together; then each stream samples.
    fn step(&mut self, slots: &mut [Slot]) -> Result<(), String> {
        let mut budget = self.step_tokens.max(1);
        // Each part: a slot and the tokens it adds this step.
        let mut parts: Vec<(usize, Vec<u32>)> = Vec::new();
        for (k, slot) in slots.iter().enumerate() {
            if let Some(t) = slot.stream.as_ref().and_then(|s| s.next) {
                parts.push((k, vec![t]));
                budget = budget.saturating_sub(1);
            }
        }
        let mut reading: Vec<usize> = (0..slots.len())
            .filter(|&k| slots[k].stream.as_ref().is_some_and(|s| s.next.is_none()))
            .collect();
        reading.sort_by_key(|&k| slots[k].stream.as_ref().map_or(0, |s| s.order));
        for k in reading {
            let st = slots[k].stream.as_ref().expect("filtered above");
            // Every stream reads at least a token a step: none waits
            // behind a long prompt for its turn.
            let n = (st.prompt.len() - st.fed).min(budget.max(1));
            parts.push((k, st.prompt[st.fed..st.fed + n].to_vec()));
            budget = budget.saturating_sub(n);
        }
        if parts.is_empty() {
            return Ok(());
        }
        let batch: Vec<SeqTokens> = parts
            .iter()
            .map(|(k, t)| SeqTokens { seq: *k, tokens: t })
            .collect();
        let n_tokens: usize = parts.iter().map(|(_, t)| t.len()).sum();
        Metrics::add(&self.metrics.steps, 1);
        Metrics::add(&self.metrics.step_tokens, n_tokens as u64);
        Metrics::set(&self.metrics.last_step_tokens, n_tokens as u64);
        let n_vocab = self.session.model().config.n_vocab;
        let replier = Replier {
            tok: &self.tok,
            metrics: &self.metrics,
            n_ctx: self.session.n_ctx(),
        };
        // Sampled where the session left them: no copy of the step's
        // logits.
        let logits = self.session.eval_batch(&batch).map_err(|e| e.to_string())?;
        for (i, (k, t)) in parts.iter().enumerate() {
            let slot = &mut slots[*k];
            slot.cached.extend_from_slice(t);
            let st = slot
                .stream
                .as_mut()
                .expect("a slot in the batch has a stream");
            if st.next.is_none() {
                st.fed += t.len();
                if st.fed < st.prompt.len() {
                    continue;
                }
            }
            let row = &logits[i * n_vocab..(i + 1) * n_vocab];
            match replier.sample(st, row, slot.cached.len()) {
                Outcome::Going => {}
                Outcome::Finished(reason) => {
                    let st = slot.stream.take().expect("checked above");
                    replier.finish(st, reason);
                }
                Outcome::Left => {
                    slot.stream = None;
                    Metrics::add(&self.metrics.cancelled_requests, 1);
                    Metrics::sub(&self.metrics.running, 1);
                }
                Outcome::Failed => {
                    slot.stream = None;
                    Metrics::sub(&self.metrics.running, 1);
                }
            }
        }
        Ok(())
    }

    /// The prompt's tokens, and whether its rendering opened the reply's
    /// reasoning ([`ReasoningFormat::prompt_opens`]).
    fn prompt(&self, input: &Input) -> Result<(Vec<u32>, bool), ApiError> {
        match input {
            Input::Chat(messages, tools) => {
                let opts = RenderOptions {
                    tools: tools.clone(),
                    ..self.render.clone()
                };
                let rendered = self.template.render(messages, &opts).map_err(|e| {
                    ApiError::invalid(format!("chat template: {e}"), Some("messages"))
                })?;
                let open = self
                    .template
                    .reasoning_format()
                    .is_some_and(|f| f.prompt_opens(&rendered));
                if self.special_in_content {
                    return Ok((prompt_tokens(&self.tok, &rendered), open));
                }
                // What a client wrote stays text: no turn markers from it.
                let (tok, template, opts) = (&self.tok, &self.template, &opts);
                message_prompt_tokens(tok, template, messages, opts, &rendered)
                    .map(|t| (t, open))
                    .map_err(|e| ApiError::invalid(e.to_string(), Some("messages")))
            }
            Input::Text(text) => Ok((
                self.tok.encode(text, self.tok.add_bos_default(), true),
                false,
            )),
        }
    }

    /// Refuses a prompt that, with the tokens asked for, does not fit a
    /// slot's context: better a clear 400 now than a reply cut short.
    fn check_fits(&self, prompt: &[u32], max_tokens: Option<usize>) -> Result<(), ApiError> {
        let n_ctx = self.session.n_ctx();
        if prompt.is_empty() {
            return Err(ApiError::invalid("The prompt is empty", Some("prompt")));
        }
        if prompt.len() >= n_ctx {
            return Err(ApiError::context_overflow(format!(
                "The prompt is {} tokens, and this server's context is {n_ctx} tokens a slot (it must leave room for one generated token; the server's -c is split over its {} slots)",
                prompt.len(),
                self.session.n_seq()
            )));
        }
        if let Some(n) = max_tokens {
            // Room left, not the sum: a client's max_tokens may be near
            // usize::MAX.
            if n > n_ctx - prompt.len() {
                return Err(ApiError::context_overflow(format!(
                    "The prompt ({} tokens) plus max_tokens ({n}) exceeds this server's context of {n_ctx} tokens a slot (its -c split over {} slots)",
                    prompt.len(),
                    self.session.n_seq()
                )));
            }
        }
        Ok(())
    }
}

/// What a stream's sampling and end need of the worker besides the
/// session, so a step samples from the logits where the session left them.
struct Replier<'a> {
    tok: &'a Tokenizer,
    metrics: &'a Metrics,
    /// Positions of a slot.
    n_ctx: usize,
}

impl Replier<'_> {
    /// Samples the stream's next token from `logits` and sends its text;
    /// `in_cache`: positions of the slot's sequence.
    fn sample(&self, st: &mut Stream, logits: &[f32], in_cache: usize) -> Outcome {
        st.next = None;
        if st.g.max_tokens.is_some_and(|n| st.generated >= n) {
            return Outcome::Finished(FinishReason::Length);
        }
        let id = match st.constraint.as_mut() {
            None => st.sampler.sample(logits),
            Some(c) => {
                // The session's logits are shared: masked in a copy.
                st.masked.clear();
                st.masked.extend_from_slice(logits);
                match c.sample(&mut st.masked, &mut st.sampler) {
                    Ok(id) => id,
                    Err(e) => {
                        let _ = st.events.send(Event::Failed(e.to_string()));
                        return Outcome::Failed;
                    }
                }
            }
        };
        st.sampler.accept(id);
        st.generated += 1;
        Metrics::add(&self.metrics.generated_tokens, 1);
        // As `chat` does: an end-of-generation token ends the reply and is
        // neither shown nor evaluated.
        if self.tok.is_eog(id) {
            return Outcome::Finished(FinishReason::Stop);
        }
        let logprob =
            st.g.top_logprobs
                .map(|k| token_logprob(self.tok, logits, id, k));
        let step = st.stops.push(&st.decoder.push(self.tok, id));
        if st
            .events
            .send(Event::Token {
                text: step.text,
                logprob,
            })
            .is_err()
        {
            return Outcome::Left;
        }
        if step.stopped {
            return Outcome::Finished(FinishReason::Stop);
        }
        // The prompt and the reply fill the context at most, as a
        // max_tokens of the room left allows: no token is sampled past it.
        if in_cache + 1 >= self.n_ctx {
            return Outcome::Finished(FinishReason::Length);
        }
        if st.g.max_tokens.is_some_and(|n| st.generated >= n) {
            return Outcome::Finished(FinishReason::Length);
        }
        st.next = Some(id);
        Outcome::Going
    }

    /// Sends a finished stream's held-back text and its end.
    fn finish(&self, mut st: Stream, finish_reason: FinishReason) {
        Metrics::sub(&self.metrics.running, 1);
        // An unfinished character, and text held back as a possible stop
        // string, belong to the reply unless a stop string ended it.
        let tail = st.stops.push(&st.decoder.finish());
        let tail = match tail.stopped {
            true => tail.text,
            false => tail.text + &st.stops.finish(),
        };
        if !tail.is_empty()
            && st
                .events
                .send(Event::Token {
                    text: tail,
                    logprob: None,
                })
                .is_err()
        {
            Metrics::add(&self.metrics.cancelled_requests, 1);
            return;
        }
        let _ = st.events.send(Event::Done {
            finish_reason,
            prompt_tokens: st.prompt.len(),
            cached_tokens: st.cached_tokens,
            completion_tokens: st.generated,
        });
    }
}

fn busy_count(slots: &[Slot]) -> u64 {
    slots.iter().filter(|s| s.stream.is_some()).count() as u64
}

/// Tokens `a` and `b` share from their starts.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The log-softmax of `logits` at `id`, and the `k` most likely tokens with
/// theirs: the model's own distribution, before temperature and filters,
/// as OpenAI reports it.
pub fn token_logprob(tok: &Tokenizer, logits: &[f32], id: u32, k: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_sum = logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln() + max;
    let lp = |i: u32| {
        logits
            .get(i as usize)
            .map_or(f32::NEG_INFINITY, |&l| l - log_sum)
    };
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(order.len());
    if k > 0 {
        order.select_nth_unstable_by(k - 1, |&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
    }
    order.truncate(k);
    order.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    let entry = |i: u32| {
        let bytes = tok.token_to_piece_special(i);
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    };
    let (token, bytes) = entry(id);
    TokenLogprob {
        token,
        logprob: lp(id),
        bytes,
        top_logprobs: order
            .into_iter()
            .map(|i| {
                let (token, bytes) = entry(i);
                TopLogprob {
                    token,
                    logprob: lp(i),
                    bytes,
                }
            })
            .collect(),
    }
}
