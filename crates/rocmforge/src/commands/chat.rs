//! `rocmforge chat`: a multi-turn conversation in the model's own chat
//! template, replies streamed to stdout.
//!
//! On a terminal it prompts with `> `; `/clear` starts the conversation over
//! (keeping `--system`), `/exit` or Ctrl-D leaves, and Ctrl-C stops a reply
//! without leaving (a second Ctrl-C while the reply is still stopping ends
//! the program, as in `generate`). When stdin is not a terminal (a script, a
//! pipe) every line is one user message, each reply is printed followed by a
//! newline, and the program ends at end of input; Ctrl-C ends it at once
//! (exit 130), as a script expects.
//!
//! Each turn renders the whole conversation with the template and evaluates
//! only the part the KV cache does not hold yet
//! ([`rocmforge_core::chat::CachedText`]): earlier turns are not evaluated
//! again unless the template rewrites them, in which case the conversation
//! is evaluated from the start.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::backend::Backend;
use rocmforge_core::chat::{
    CachedText, ChatTemplate, Feed, Message, RenderOptions, StopStrings, TemplateError,
    TemplateOrigin,
};
use rocmforge_core::model::Model;
use rocmforge_core::sampler::{Sampler, SamplerConfig};
use rocmforge_core::session::{Session, SessionOptions};
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};

use super::backend_choice::{create_backend, load_bar, BackendRequest, Chosen};
use super::generate::{context_size, gpu_timeout};
use super::{check_model_path, note, write_stdout, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Model file.
    #[arg(long = "model", short = 'm', alias = "gguf", value_name = "PATH")]
    model: PathBuf,
    /// System prompt: the conversation's first message.
    #[arg(long)]
    system: Option<String>,
    /// Tokens per reply at most; -1 = until the model ends its turn or the
    /// context is full.
    #[arg(long = "n-predict", short = 'n', default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// End a reply where this text appears (not printed); repeatable.
    #[arg(long = "stop", value_name = "TEXT")]
    stop: Vec<String>,
    /// A Jinja chat template to use instead of the model's.
    #[arg(long, value_name = "PATH")]
    chat_template_file: Option<PathBuf>,
    /// After each reply, print to stderr the tokens evaluated (new and
    /// reused from the cache) and generated, with timings.
    #[arg(long)]
    timings: bool,
    /// Set the template's `enable_thinking` to false (Qwen3 then answers
    /// without reasoning first).
    #[arg(long)]
    no_think: bool,
    /// Compute backend: auto (rocm, then vulkan, then cpu), rocm, vulkan or cpu.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// With --backend auto: probe the GPU backends again.
    #[arg(long)]
    reprobe: bool,
    /// With --backend auto: seconds a probe may take.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    probe_timeout: f64,
    /// CPU threads (0 = one per core).
    #[arg(long, short = 't', default_value_t = 0)]
    threads: usize,
    /// GPU device index.
    #[arg(long)]
    device: Option<usize>,
    /// Seconds any wait for the GPU may take.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    gpu_timeout: f64,
    /// Context size in tokens, the whole conversation's (0 = the model's
    /// training context, capped at 4096).
    #[arg(long, short = 'c', default_value_t = 0)]
    ctx_size: usize,
    /// Temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temp: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Top-p (1.0 = off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Min-p (0.0 = off).
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Repetition penalty (1.0 = off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Last tokens the repetition penalty considers.
    #[arg(long, default_value_t = 64)]
    repeat_last_n: usize,
    /// Sampling seed: the same seed gives the same replies.
    #[arg(long, short = 's', default_value_t = 0)]
    seed: u64,
}

/// Whether stdin is a terminal: only then does Ctrl-C leave the program
/// running (a script's Ctrl-C ends it, exit 130).
static INTERACTIVE: AtomicBool = AtomicBool::new(false);
/// Whether the conversation has started: Ctrl-C while the model loads ends
/// the program.
static READY: AtomicBool = AtomicBool::new(false);
/// Whether a reply is being generated (Ctrl-C stops it) or the program
/// waits for input (Ctrl-C only says how to leave).
static GENERATING: AtomicBool = AtomicBool::new(false);
/// Set by Ctrl-C during a reply; the reply stops at the next token.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        if !INTERACTIVE.load(Ordering::SeqCst) || !READY.load(Ordering::SeqCst) {
            let _ = std::io::stdout().flush();
            // SAFETY: _exit ends the process immediately; this thread
            // touches nothing afterwards.
            unsafe { libc::_exit(130) };
        }
        if !GENERATING.load(Ordering::SeqCst) {
            // At the prompt: the line typed so far stays the terminal's
            // (lost); a fresh prompt follows the hint.
            note("\n(Ctrl-C stops a reply; /exit or Ctrl-D leaves)");
            let _ = write_stdout(&mut std::io::stdout(), b"> ");
            return;
        }
        // A prompt evaluation cannot be cut short; a second Ctrl-C while
        // it runs ends the program, as in `generate`.
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            let _ = std::io::stdout().flush();
            // SAFETY: _exit ends the process immediately; this thread
            // touches nothing afterwards.
            unsafe { libc::_exit(130) };
        }
    });
}

pub fn run(a: Args) -> Result<(), CliError> {
    let sampler = Sampler::new(SamplerConfig {
        temperature: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repeat_penalty: a.repeat_penalty,
        repeat_last_n: a.repeat_last_n,
        seed: a.seed,
    })?;
    if a.n_predict < -1 {
        return Err(format!("-n/--n-predict must be -1 or more, got {}", a.n_predict).into());
    }
    // Installed first, so that Ctrl-C while the model loads ends the
    // program (exit 130) whatever the mode.
    INTERACTIVE.store(std::io::stdin().is_terminal(), Ordering::SeqCst);
    install_interrupt_handler();
    // The user's input is checked before any backend starts.
    check_model_path(&a.model)?;
    let model = Arc::new(Model::load(&a.model).map_err(|e| format!("{}: {e}", a.model.display()))?);
    let tok = Tokenizer::from_gguf(&model.file)?;
    let template = load_template(&a, &model)?;
    let n_ctx = context_size(a.ctx_size, model.config.n_ctx_train);
    if let Some(w) = registry::threads_warning(a.threads) {
        note(&w);
    }
    let chosen = create_backend(BackendRequest {
        name: &a.backend,
        reprobe: a.reprobe,
        probe_timeout: a.probe_timeout,
        options: BackendOptions {
            threads: a.threads,
            device: a.device,
            allow_software_devices: false,
            gpu_timeout: Some(gpu_timeout(a.gpu_timeout)?),
        },
    })?;
    let backend_name = chosen.backend.info().name;
    let result = (|| {
        let session = start_session(model, chosen.backend, n_ctx)?;
        let render = RenderOptions {
            add_generation_prompt: true,
            bos_token: token_text(&tok, tok.bos()),
            eos_token: token_text(&tok, tok.eos()),
            enable_thinking: a.no_think.then_some(false),
        };
        let mut chat = Chat {
            session,
            tok,
            template,
            render,
            system: a.system.clone(),
            history: Vec::new(),
            cached: CachedText::new(),
            sampler,
            stops: StopStrings::new(a.stop.clone()),
            n_predict: a.n_predict,
            timings: a.timings,
        };
        chat.clear();
        chat.converse()
    })();
    Chosen::record(&chosen.auto_cache, backend_name, a.device, &result);
    result
}

/// The template to chat with: `--chat-template-file`, else the model's,
/// else ChatML. A model template that does not parse falls back to ChatML
/// with a warning, as llama.cpp does, since the file is not the user's to
/// fix; a template file given on the command line must parse.
fn load_template(a: &Args, model: &Model) -> Result<ChatTemplate, CliError> {
    if let Some(path) = &a.chat_template_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the chat template: {e}", path.display()))?;
        return ChatTemplate::new(&text).map_err(|e| format!("{}: {e}", path.display()).into());
    }
    match ChatTemplate::from_gguf(&model.file) {
        Ok(t) => {
            if t.origin() == TemplateOrigin::ChatmlFallback {
                note("warning: the model has no chat template; using ChatML (give one with --chat-template-file)");
            }
            Ok(t)
        }
        Err(e @ (TemplateError::Syntax(_) | TemplateError::NotAString { .. })) => {
            note(&format!(
                "warning: {e}; using ChatML (give a template with --chat-template-file)"
            ));
            Ok(ChatTemplate::chatml())
        }
        Err(e) => Err(e.into()),
    }
}

fn token_text(tok: &Tokenizer, id: Option<u32>) -> String {
    id.and_then(|id| tok.token_text(id))
        .unwrap_or_default()
        .to_owned()
}

fn start_session(
    model: Arc<Model>,
    backend: Box<dyn Backend>,
    n_ctx: usize,
) -> Result<Session, CliError> {
    let bar = load_bar();
    let mut progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let opts = SessionOptions {
        n_ctx,
        ..SessionOptions::default()
    };
    let mut report = |needs: &rocmforge_core::session::MemoryNeeds| note(&needs.summary());
    let session = Session::new_reporting(model, backend, opts, &mut progress, &mut report);
    bar.finish_and_clear();
    let session = session?;
    let info = session.backend().info();
    note(&format!("backend: {} on {}", info.name, info.device));
    Ok(session)
}

/// How a reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyEnd {
    /// The model ended its turn, or a stop string appeared.
    Done,
    TokenLimit,
    ContextFull,
    Interrupted,
}

struct Chat {
    session: Session,
    tok: Tokenizer,
    template: ChatTemplate,
    render: RenderOptions,
    system: Option<String>,
    history: Vec<Message>,
    /// The text whose tokens the KV cache holds.
    cached: CachedText,
    sampler: Sampler,
    stops: StopStrings,
    n_predict: i64,
    timings: bool,
}

/// A finished reply.
struct Reply {
    /// The text shown (a stop string excluded).
    text: String,
    end: ReplyEnd,
    generated: usize,
    prompt_s: f64,
    gen_s: f64,
}

impl Chat {
    /// Starts the conversation over: only the system prompt remains.
    fn clear(&mut self) {
        self.history.clear();
        self.history.extend(
            self.system
                .iter()
                .map(|s| Message::new("system", s.as_str())),
        );
        self.session.reset();
        self.cached.clear();
        self.sampler.reset();
    }

    /// The read-reply loop, until end of input or `/exit`.
    fn converse(&mut self) -> Result<(), CliError> {
        let interactive = INTERACTIVE.load(Ordering::SeqCst);
        READY.store(true, Ordering::SeqCst);
        if interactive {
            note("chat: /clear starts over, /exit or Ctrl-D leaves, Ctrl-C stops a reply");
        }
        let mut input = std::io::stdin().lock();
        let mut line = String::new();
        loop {
            if interactive {
                write_stdout(&mut std::io::stdout(), b"> ")?;
            }
            line.clear();
            if input.read_line(&mut line)? == 0 {
                if interactive {
                    write_stdout(&mut std::io::stdout(), b"\n")?;
                }
                return Ok(());
            }
            let text = line.trim_end_matches(['\n', '\r']);
            match text.trim() {
                "" => continue,
                "/exit" | "/quit" => return Ok(()),
                "/clear" => {
                    self.clear();
                    if interactive {
                        note("(conversation cleared)");
                    }
                    continue;
                }
                _ => {}
            }
            self.turn(text)?;
        }
    }

    /// One user message and the streamed reply.
    fn turn(&mut self, user: &str) -> Result<(), CliError> {
        self.history.push(Message::new("user", user));
        let rendered = match self.template.render(&self.history, &self.render) {
            Err(e @ TemplateError::Raised { .. }) if self.system.is_some() => {
                return Err(
                    format!("{e} (if the template has no system role, leave out --system)").into(),
                )
            }
            r => r?,
        };
        let tokens = match self.cached.feed(&self.tok, &rendered) {
            Feed::Append(tokens) => tokens,
            Feed::Restart(tokens) => {
                self.session.reset();
                self.sampler.reset();
                tokens
            }
        };
        let n_ctx = self.session.n_ctx();
        if self.session.n_past() + tokens.len() >= n_ctx {
            // Nothing was evaluated: the cache no longer matches its text.
            self.history.pop();
            self.cached.clear();
            self.session.reset();
            note(&format!(
                "the conversation no longer fits the context of {n_ctx} tokens; /clear starts over (or raise --ctx-size)"
            ));
            return Ok(());
        }
        let reused = self.session.n_past();
        INTERRUPTED.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        let reply = self.reply(&tokens);
        GENERATING.store(false, Ordering::SeqCst);
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                // The cache may hold part of this turn; start over next time.
                self.cached.clear();
                self.session.reset();
                return Err(e);
            }
        };
        self.history.push(Message::new("assistant", reply.text));
        let mut out = std::io::stdout();
        write_stdout(&mut out, b"\n")?;
        if self.timings {
            note(&format!(
                "prompt: {} new tokens after {reused} cached in {:.2} s; reply: {} tokens in {:.2} s ({:.1} t/s)",
                tokens.len(),
                reply.prompt_s,
                reply.generated,
                reply.gen_s,
                reply.generated as f64 / reply.gen_s.max(1e-9),
            ));
        }
        match reply.end {
            ReplyEnd::Done => {}
            ReplyEnd::TokenLimit => note("(reply cut at the -n token limit)"),
            ReplyEnd::ContextFull => {
                note("(context full: /clear starts over, or raise --ctx-size)")
            }
            ReplyEnd::Interrupted => note("(interrupted)"),
        }
        Ok(())
    }

    /// Evaluates `prompt` and streams the reply to stdout.
    fn reply(&mut self, prompt: &[u32]) -> Result<Reply, CliError> {
        let t_prompt = Instant::now();
        let mut logits = self.session.eval(prompt)?.to_vec();
        let prompt_s = t_prompt.elapsed().as_secs_f64();
        let t_gen = Instant::now();
        for &t in prompt {
            self.sampler.accept(t);
        }
        let mut out = std::io::stdout().lock();
        let mut decoder = StreamDecoder::new();
        self.stops.reset();
        let mut text = String::new();
        let mut generated = 0;
        let end = loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break ReplyEnd::Interrupted;
            }
            if usize::try_from(self.n_predict).is_ok_and(|n| generated >= n) {
                break ReplyEnd::TokenLimit;
            }
            let id = self.sampler.sample(&logits);
            self.sampler.accept(id);
            generated += 1;
            // The end-of-turn token is not evaluated: the next rendering
            // writes the template's own end-of-turn text after the reply.
            if self.tok.is_eog(id) {
                break ReplyEnd::Done;
            }
            let step = self.stops.push(&decoder.push(&self.tok, id));
            write_stdout(&mut out, step.text.as_bytes())?;
            text.push_str(&step.text);
            if step.stopped {
                break ReplyEnd::Done;
            }
            if self.session.n_past() >= self.session.n_ctx() {
                break ReplyEnd::ContextFull;
            }
            logits.copy_from_slice(self.session.eval(&[id])?);
            self.cached.push_token(&self.tok, id);
        };
        // Bytes of an unfinished character, and text held back as a
        // possible stop string, belong to the reply unless it stopped.
        let tail = self.stops.push(&decoder.finish());
        let tail = match tail.stopped {
            true => tail.text,
            false => tail.text + &self.stops.finish(),
        };
        write_stdout(&mut out, tail.as_bytes())?;
        text.push_str(&tail);
        Ok(Reply {
            text,
            end,
            generated,
            prompt_s,
            gen_s: t_gen.elapsed().as_secs_f64(),
        })
    }
}
