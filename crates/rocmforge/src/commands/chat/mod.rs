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
//!
//! A reply's reasoning (gpt-oss's analysis channel, a Qwen3 `<think>`
//! block; `--reasoning-format`) is shown on stderr and left out of stdout
//! and of the history, as the templates want past turns back (gpt-oss's
//! refuses a turn whose content holds its channel markers).

mod conversation;
mod interrupt;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use rocmforge_core::backend::Backend;
use rocmforge_core::chat::{
    CachedText, ChatTemplate, RenderOptions, StopStrings, TemplateError, TemplateOrigin,
};
use rocmforge_core::grammar::Grammars;
use rocmforge_core::model::Model;
use rocmforge_core::sampler::Sampler;
use rocmforge_core::session::{MemoryNeeds, Session, SessionOptions};
use rocmforge_core::tokenizer::Tokenizer;

use super::backend_choice::{create_backend, load_bar, BackendArgs};
use super::generate::context_size;
use super::reasoning_args::ReasoningFlag;
use super::sampling_args::SamplingArgs;
use super::text_input::read_text;
use super::{check_model_path, note, CliError};
use crate::commands::cache_types::CacheTypeArgs;
use conversation::Chat;
use rocmforge_core::plan::KvTypes;

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
    #[command(flatten)]
    backend: BackendArgs,
    /// Context size in tokens, the whole conversation's; 0 = the model's
    /// training context. Unset: the training context, capped at 4096.
    #[arg(long, short = 'c')]
    ctx_size: Option<usize>,
    #[command(flatten)]
    cache_types: CacheTypeArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// A GBNF grammar (llama.cpp's) every reply follows.
    #[arg(long, value_name = "GBNF", conflicts_with = "grammar_file")]
    grammar: Option<String>,
    /// A file holding a GBNF grammar every reply follows.
    #[arg(long, value_name = "PATH")]
    grammar_file: Option<PathBuf>,
    /// `auto`: a reply's reasoning (gpt-oss's analysis channel, a Qwen3
    /// `<think>` block) goes to stderr and only the rest to stdout and the
    /// conversation, as the template wants it back; `none`: the reply as
    /// the model wrote it.
    #[arg(long, value_enum, default_value_t = ReasoningFlag::Auto)]
    reasoning_format: ReasoningFlag,
}

/// The grammar `--grammar` or `--grammar-file` gives, checked for this
/// vocabulary: its text, compiled again for each reply.
fn reply_grammar(a: &Args, tok: &Tokenizer) -> Result<Option<(Grammars, String)>, CliError> {
    let (flag, text) = match (&a.grammar, &a.grammar_file) {
        (None, None) => return Ok(None),
        (Some(g), _) => ("--grammar", g.clone()),
        (_, Some(path)) => ("--grammar-file", read_text(path, "the grammar")?),
    };
    let grammars = Grammars::new(tok).map_err(|e| format!("{flag}: {e}"))?;
    grammars.gbnf(&text).map_err(|e| format!("{flag}: {e}"))?;
    Ok(Some((grammars, text)))
}

pub fn run(a: Args) -> Result<(), CliError> {
    let seed = a.sampling.seed.resolve();
    let sampler = Sampler::new(a.sampling.config(seed))?;
    if a.n_predict < -1 {
        return Err(format!("-n/--n-predict must be -1 or more, got {}", a.n_predict).into());
    }
    // Installed first, so that Ctrl-C while the model loads ends the
    // program (exit 130) whatever the mode.
    interrupt::install(std::io::stdin().is_terminal());
    // The user's input is checked before any backend starts.
    check_model_path(&a.model)?;
    let model = Arc::new(Model::load(&a.model).map_err(|e| format!("{}: {e}", a.model.display()))?);
    let tok = Tokenizer::from_gguf(&model.file)?;
    let template = load_template(a.chat_template_file.as_deref(), &model)?;
    let grammar = reply_grammar(&a, &tok)?;
    let reasoning = a.reasoning_format.format(&template);
    let n_ctx = context_size(a.ctx_size, model.config.n_ctx_train);
    let chosen = create_backend(&a.backend)?;
    let print_seed = a.sampling.prints_seed();
    let result =
        start_session(model, chosen.backend, n_ctx, a.cache_types.types(), 1).and_then(|session| {
            // After the load, so anything refused before stays one line.
            if print_seed {
                note(&format!(
                    "seed: {seed} (random; -s {seed} repeats this chat)"
                ));
            }
            let render = RenderOptions {
                add_generation_prompt: true,
                bos_token: token_text(&tok, tok.bos()),
                eos_token: token_text(&tok, tok.eos()),
                enable_thinking: a.no_think.then_some(false),
                tools: None,
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
                grammar,
                reasoning,
            };
            chat.clear();
            chat.converse()
        });
    if let Err(e) = &result {
        chosen.failures.record_failure(e.as_ref());
    }
    result
}

/// The template to chat with: `--chat-template-file`, else the model's,
/// else ChatML. A model template that does not parse falls back to ChatML
/// with a warning, as llama.cpp does, since the file is not the user's to
/// fix; a template file given on the command line must parse.
pub(crate) fn load_template(
    file: Option<&std::path::Path>,
    model: &Model,
) -> Result<ChatTemplate, CliError> {
    if let Some(path) = file {
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

pub(crate) fn token_text(tok: &Tokenizer, id: Option<u32>) -> String {
    id.and_then(|id| tok.token_text(id))
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn start_session(
    model: Arc<Model>,
    backend: Box<dyn Backend>,
    n_ctx: usize,
    kv_types: KvTypes,
    n_seq: usize,
) -> Result<Session, CliError> {
    let bar = load_bar();
    let mut progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let opts = SessionOptions {
        n_ctx,
        kv_types,
        n_seq,
        ..SessionOptions::default()
    };
    let mut report = |needs: &MemoryNeeds| note(&needs.summary());
    let session = Session::new_reporting(model, backend, opts, &mut progress, &mut report);
    bar.finish_and_clear();
    let session = session?;
    let info = session.backend().info();
    note(&format!("backend: {} on {}", info.name, info.device));
    Ok(session)
}
