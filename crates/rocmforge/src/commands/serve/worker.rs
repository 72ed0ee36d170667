//! The one thread that owns the model: a [`Session`] is neither `Send` nor
//! shareable (it holds the backend), so it lives on a dedicated thread, and
//! requests reach it through a FIFO queue of [`Job`]s. Jobs run one at a
//! time in arrival order; each streams its tokens back through its own
//! channel, so replies never mix.
//!
//! A client that goes away drops its receiver: the next send fails and the
//! job ends there, freeing the model for the next one (and a job whose
//! client left while it waited is skipped).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Arc;

use rocmforge_core::chat::{
    message_prompt_tokens, prompt_tokens, ChatTemplate, Message, RenderOptions, StopStrings,
};
use rocmforge_core::sampler::{Sampler, SamplerConfig};
use rocmforge_core::session::Session;
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use super::errors::ApiError;
use super::metrics::Metrics;
use super::openai::{FinishReason, TokenLogprob, TopLogprob};

/// What to evaluate.
pub enum Input {
    /// Rendered with the model's chat template, generation prompt added.
    Chat(Vec<Message>),
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
        completion_tokens: usize,
    },
    /// The model failed mid-way (a backend error).
    Failed(String),
}

/// What the HTTP side needs to know about the model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub n_ctx: usize,
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
}

impl Worker {
    /// Runs jobs until every sender is gone (the server stopped).
    pub fn serve(mut self, jobs: mpsc::Receiver<Job>) {
        while let Ok(job) = jobs.recv() {
            Metrics::sub(&self.metrics.queued, 1);
            if job.events.is_closed() {
                Metrics::add(&self.metrics.cancelled_requests, 1);
                continue;
            }
            Metrics::add(&self.metrics.running, 1);
            let events = job.events.clone();
            // A panic in one request must not take the server down: the job
            // fails, the session starts over for the next one.
            let outcome = catch_unwind(AssertUnwindSafe(|| self.run(job)));
            if let Err(panic) = outcome {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                let _ = events.send(Event::Failed(format!("internal error: {what}")));
                self.session.reset();
            }
            Metrics::sub(&self.metrics.running, 1);
        }
    }

    fn prompt(&self, input: &Input) -> Result<Vec<u32>, ApiError> {
        match input {
            Input::Chat(messages) => {
                let rendered = self.template.render(messages, &self.render).map_err(|e| {
                    ApiError::invalid(format!("chat template: {e}"), Some("messages"))
                })?;
                if self.special_in_content {
                    return Ok(prompt_tokens(&self.tok, &rendered));
                }
                // What a client wrote stays text: no turn markers from it.
                let (tok, template, opts) = (&self.tok, &self.template, &self.render);
                message_prompt_tokens(tok, template, messages, opts, &rendered)
                    .map_err(|e| ApiError::invalid(e.to_string(), Some("messages")))
            }
            Input::Text(text) => Ok(self.tok.encode(text, self.tok.add_bos_default(), true)),
        }
    }

    fn run(&mut self, job: Job) {
        let Job {
            input,
            generation: g,
            events,
        } = job;
        let prompt = match self
            .prompt(&input)
            .and_then(|p| self.check_fits(&p, g.max_tokens).map(|()| p))
        {
            Ok(p) => p,
            Err(e) => {
                let _ = events.send(Event::Rejected(e));
                return;
            }
        };
        if events
            .send(Event::Started {
                prompt_tokens: prompt.len(),
            })
            .is_err()
        {
            Metrics::add(&self.metrics.cancelled_requests, 1);
            return;
        }
        Metrics::add(&self.metrics.prompt_tokens, prompt.len() as u64);
        match self.generate(&prompt, &g, &events) {
            Ok(Some((finish_reason, completion_tokens))) => {
                let _ = events.send(Event::Done {
                    finish_reason,
                    prompt_tokens: prompt.len(),
                    completion_tokens,
                });
            }
            // The client left.
            Ok(None) => Metrics::add(&self.metrics.cancelled_requests, 1),
            Err(e) => {
                let _ = events.send(Event::Failed(e));
            }
        }
    }

    /// Refuses a prompt that, with the tokens asked for, does not fit the
    /// context: better a clear 400 now than a reply cut short.
    fn check_fits(&self, prompt: &[u32], max_tokens: Option<usize>) -> Result<(), ApiError> {
        let n_ctx = self.session.n_ctx();
        if prompt.is_empty() {
            return Err(ApiError::invalid("The prompt is empty", Some("prompt")));
        }
        if prompt.len() >= n_ctx {
            return Err(ApiError::context_overflow(format!(
                "The prompt is {} tokens, and this server's context is {n_ctx} tokens (it must leave room for one generated token)",
                prompt.len()
            )));
        }
        if let Some(n) = max_tokens {
            // Room left, not the sum: a client's max_tokens may be near
            // usize::MAX.
            if n > n_ctx - prompt.len() {
                return Err(ApiError::context_overflow(format!(
                    "The prompt ({} tokens) plus max_tokens ({n}) exceeds this server's context of {n_ctx} tokens",
                    prompt.len()
                )));
            }
        }
        Ok(())
    }

    /// Evaluates the prompt and samples until a stop; `Ok(None)` when the
    /// client left. Returns the finish reason and tokens generated.
    fn generate(
        &mut self,
        prompt: &[u32],
        g: &Generation,
        events: &UnboundedSender<Event>,
    ) -> Result<Option<(FinishReason, usize)>, String> {
        // Each request starts from an empty cache: no prefix is shared
        // between clients.
        self.session.reset();
        let mut sampler = Sampler::new(g.sampler.clone()).map_err(|e| e.to_string())?;
        let mut logits = self
            .session
            .eval(prompt)
            .map_err(|e| e.to_string())?
            .to_vec();
        for &t in prompt {
            sampler.accept(t);
        }
        let mut decoder = StreamDecoder::new();
        let mut stops = StopStrings::new(g.stops.iter().cloned());
        let mut generated = 0;
        let finish = loop {
            if g.max_tokens.is_some_and(|n| generated >= n) {
                break FinishReason::Length;
            }
            let id = sampler.sample(&logits);
            sampler.accept(id);
            generated += 1;
            Metrics::add(&self.metrics.generated_tokens, 1);
            // As `chat` does: an end-of-generation token ends the reply and
            // is neither shown nor evaluated.
            if self.tok.is_eog(id) {
                break FinishReason::Stop;
            }
            let logprob = g
                .top_logprobs
                .map(|k| token_logprob(&self.tok, &logits, id, k));
            let step = stops.push(&decoder.push(&self.tok, id));
            if events
                .send(Event::Token {
                    text: step.text,
                    logprob,
                })
                .is_err()
            {
                return Ok(None);
            }
            if step.stopped {
                break FinishReason::Stop;
            }
            // The prompt and the reply fill the context at most, as a
            // max_tokens of the room left allows: no token is sampled past
            // it.
            if self.session.n_past() + 1 >= self.session.n_ctx() {
                break FinishReason::Length;
            }
            logits.copy_from_slice(self.session.eval(&[id]).map_err(|e| e.to_string())?);
        };
        // An unfinished character, and text held back as a possible stop
        // string, belong to the reply unless a stop string ended it.
        let tail = stops.push(&decoder.finish());
        let tail = match tail.stopped {
            true => tail.text,
            false => tail.text + &stops.finish(),
        };
        if !tail.is_empty()
            && events
                .send(Event::Token {
                    text: tail,
                    logprob: None,
                })
                .is_err()
        {
            return Ok(None);
        }
        Ok(Some((finish, generated)))
    }
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
