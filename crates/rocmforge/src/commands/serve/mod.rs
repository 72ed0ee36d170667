//! `rocmforge serve`: an OpenAI-compatible HTTP server (axum on tokio).
//!
//! One model, one session of `-np` sequences (slots), on one worker thread
//! ([`worker`]) fed by a FIFO queue: the requests of every slot are
//! evaluated together in batched steps (continuous batching), and a new
//! request reuses the longest prompt prefix a free slot holds. The HTTP
//! side ([`routes`]) checks requests, queues them, and streams each job's
//! tokens back. docs/server.md has the endpoints and the design.

mod connections;
mod errors;
mod limits;
mod metrics;
mod openai;
mod routes;
mod tools;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

use rocmforge_core::chat::RenderOptions;
use rocmforge_core::model::Model;
use rocmforge_core::tokenizer::Tokenizer;

use super::backend_choice::{create_backend, BackendArgs};
use super::chat::{load_template, start_session, token_text};
use super::generate::context_size;
use super::{check_model_path, note, CliError};
use crate::commands::cache_types::CacheTypeArgs;
use crate::commands::reasoning_args::ReasoningFlag;
use metrics::Metrics;
use routes::AppState;
use worker::{Job, ModelInfo, Worker};

#[derive(clap::Args)]
pub struct Args {
    /// Model file.
    #[arg(long = "model", short = 'm', alias = "gguf", value_name = "PATH")]
    model: PathBuf,
    /// Address to listen on; the default takes connections from this
    /// machine only.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 = any free port; the address is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on the /v1 routes.
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// A Jinja chat template to use instead of the model's.
    #[arg(long, value_name = "PATH")]
    chat_template_file: Option<PathBuf>,
    #[command(flatten)]
    backend: BackendArgs,
    /// Context size in tokens, split evenly over the slots (a request's
    /// prompt and reply together fit one slot's share), as llama-server's
    /// `-c`; 0 = the model's training context. Unset: the training context,
    /// capped at 4096.
    #[arg(long, short = 'c')]
    ctx_size: Option<usize>,
    /// Slots: requests answered at once, batched into one step each token
    /// (llama-server's `--parallel`). A backend that runs one sequence a
    /// step (the GPU backends, so far) serves one, with a warning.
    #[arg(long = "parallel", default_value_t = 4)]
    parallel: usize,
    /// Tokens one batched step evaluates at most: the generating slots'
    /// next tokens, then chunks of the prompts being read.
    #[arg(long = "batch-size", short = 'b', default_value_t = 512)]
    batch_size: usize,
    #[command(flatten)]
    cache_types: CacheTypeArgs,
    /// Tokenize special-token text in chat message content (`<|im_start|>`)
    /// as control tokens, as llama-server does. Off, content is plain text,
    /// so a client cannot forge system or assistant turns in its messages.
    #[arg(long)]
    special_in_content: bool,
    /// Where a chat reply's reasoning goes (llama-server's
    /// `--reasoning-format`): `auto` puts gpt-oss's analysis channel, or
    /// the `<think>` block a Qwen3 or DeepSeek-R1 reply opens with, in
    /// `reasoning_content` and the rest in `content`; `none` returns the
    /// reply's text as the model wrote it.
    #[arg(long, value_enum, default_value_t = ReasoningFlag::Auto)]
    reasoning_format: ReasoningFlag,
    #[command(flatten)]
    limits: limits::LimitArgs,
}

pub fn run(a: Args) -> Result<(), CliError> {
    check_model_path(&a.model)?;
    if a.parallel == 0 {
        return Err("--parallel must be at least 1".into());
    }
    if a.batch_size == 0 {
        return Err("--batch-size must be at least 1".into());
    }
    if a.api_key.as_deref().is_some_and(str::is_empty) {
        return Err("--api-key must not be empty".into());
    }
    let limits = a.limits.limits()?;
    // Bound before the model loads: a port in use fails at once, not after
    // a load that may take minutes.
    let listener = std::net::TcpListener::bind((a.host.as_str(), a.port))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("cannot listen on {}:{}: {e}", a.host, a.port))?;
    let model_id = model_id(&a.model);
    let metrics = Arc::new(Metrics::default());
    let (jobs, queue) = mpsc::channel::<Job>();
    let (ready, started) = mpsc::channel::<Result<ModelInfo, String>>();
    let load = Load {
        model: a.model.clone(),
        chat_template_file: a.chat_template_file.clone(),
        backend: a.backend,
        ctx_size: a.ctx_size,
        cache_types: a.cache_types,
        metrics: metrics.clone(),
        special_in_content: a.special_in_content,
        parallel: a.parallel,
        batch_size: a.batch_size,
    };
    let reasoning_flag = a.reasoning_format;
    // The backend is not `Send`: it is created on the thread that keeps it.
    std::thread::Builder::new()
        .name("rocmforge-model".into())
        .spawn(move || match load.start() {
            Ok(worker) => {
                let info = ModelInfo {
                    n_ctx: worker.session.n_ctx(),
                    slots: worker.session.n_seq(),
                    tool_format: worker.template.tool_format(),
                    reasoning: reasoning_flag.format(&worker.template),
                };
                let _ = ready.send(Ok(info));
                worker.serve(queue);
            }
            Err(e) => {
                let _ = ready.send(Err(e));
            }
        })?;
    let info = started
        .recv()
        .map_err(|_| "the model thread ended while loading")??;
    let state = Arc::new(AppState {
        jobs,
        model_id: model_id.clone(),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        metrics,
        api_key: a.api_key,
        next_id: AtomicU64::new(1),
        limits: limits.clone(),
        body_budget: Default::default(),
        tool_format: info.tool_format,
        reasoning: info.reasoning,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;
        note(&format!(
            "serving {model_id} ({} slot{}, context {} tokens each)",
            info.slots,
            if info.slots == 1 { "" } else { "s" },
            info.n_ctx
        ));
        if addr.ip().is_unspecified() && state.api_key.is_none() {
            note(&format!(
                "warning: listening on every interface ({}) without --api-key: anyone who can reach this machine can use the model",
                addr.ip()
            ));
        }
        // Tests and scripts read the address from this line (port 0).
        note(&format!("listening on http://{addr}"));
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        connections::serve(listener, routes::router(state), &limits, shutdown).await?;
        Ok::<(), CliError>(())
    })
}

/// The id clients name the model by: the file name without `.gguf`.
fn model_id(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

/// What the model thread needs to start.
struct Load {
    model: PathBuf,
    chat_template_file: Option<PathBuf>,
    backend: BackendArgs,
    ctx_size: Option<usize>,
    cache_types: CacheTypeArgs,
    metrics: Arc<Metrics>,
    special_in_content: bool,
    parallel: usize,
    batch_size: usize,
}

impl Load {
    /// Loads the model and starts its session, as `chat` does. Errors are
    /// text: the CLI's error type is not `Send`.
    fn start(self) -> Result<Worker, String> {
        let path = &self.model;
        let model = Arc::new(Model::load(path).map_err(|e| format!("{}: {e}", path.display()))?);
        let tok = Tokenizer::from_gguf(&model.file).map_err(|e| e.to_string())?;
        let template =
            load_template(self.chat_template_file.as_deref(), &model).map_err(|e| e.to_string())?;
        let total = context_size(self.ctx_size, model.config.n_ctx_train);
        let chosen = create_backend(&self.backend).map_err(|e| e.to_string())?;
        let most = chosen.backend.max_sequences();
        let slots = if self.parallel > most {
            note(&format!(
                "warning: the {} backend runs {most} sequence{} a step: serving {most} slot{} instead of --parallel {}",
                chosen.backend.info().name,
                if most == 1 { "" } else { "s" },
                if most == 1 { "" } else { "s" },
                self.parallel
            ));
            most
        } else {
            self.parallel
        };
        // llama-server's split: each slot gets an equal share of -c.
        let n_ctx = total / slots;
        if n_ctx < 2 {
            return Err(format!(
                "a context of {total} tokens split over {slots} slots leaves {n_ctx} a slot; use a larger -c or a smaller --parallel"
            ));
        }
        let session = start_session(
            model,
            chosen.backend,
            n_ctx,
            self.cache_types.types(),
            slots,
        )
        .map_err(|e| {
            chosen.failures.record_failure(e.as_ref());
            e.to_string()
        })?;
        let metrics = self.metrics;
        metrics::Metrics::set(&metrics.slots, slots as u64);
        let render = RenderOptions {
            add_generation_prompt: true,
            bos_token: token_text(&tok, tok.bos()),
            eos_token: token_text(&tok, tok.eos()),
            enable_thinking: None,
            tools: None,
        };
        Ok(Worker {
            session,
            tok,
            template,
            render,
            metrics,
            special_in_content: self.special_in_content,
            step_tokens: self.batch_size,
            grammars: None,
        })
    }
}
