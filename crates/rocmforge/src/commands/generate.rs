//! `rocmforge generate`: stream a completion to stdout, timings to stderr
//! (or print one JSON object with both, `--json`). Flags follow llama.cpp's
//! `llama-cli` where they overlap (`-m -p -f -n -c -t -s --temp -ngl`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::backend::Backend;
use rocmforge_core::grammar::{Constraint, Grammars};
use rocmforge_core::model::Model;
use rocmforge_core::sampler::Sampler;
use rocmforge_core::session::{MemoryNeeds, Session, SessionOptions};
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};

use super::backend_choice::{create_backend, load_bar, BackendArgs, Chosen};
use super::sampling_args::SamplingArgs;
use super::text_input::read_text;
use super::{check_model_path, note, write_stdout, CliError};
use crate::commands::cache_types::CacheTypeArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Model file.
    #[arg(
        long = "gguf",
        short = 'm',
        visible_alias = "model",
        value_name = "PATH",
        required_unless_present = "list_devices"
    )]
    gguf: Option<PathBuf>,
    /// Prompt text, or `-` to read it from stdin (special tokens such as
    /// `<|im_start|>` are recognised).
    #[arg(
        long,
        short = 'p',
        conflicts_with = "file",
        required_unless_present_any = ["file", "list_devices"]
    )]
    prompt: Option<String>,
    /// File holding the prompt, or `-` for stdin. One trailing newline is
    /// dropped, as llama.cpp's `-f` does.
    #[arg(long, short = 'f', value_name = "PATH")]
    file: Option<PathBuf>,
    /// Tokens to generate at most; -1 generates until the end-of-generation
    /// token or a full context.
    #[arg(
        long = "n-predict",
        short = 'n',
        visible_alias = "max-tokens",
        value_name = "N",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    #[command(flatten)]
    backend: BackendArgs,
    /// Context size in tokens; 0 = the model's training context, as
    /// llama.cpp's. Unset: the training context, capped at 4096.
    #[arg(long, short = 'c', allow_negative_numbers = true)]
    ctx_size: Option<usize>,
    #[command(flatten)]
    cache_types: CacheTypeArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Print generated token ids, one per line, instead of text.
    #[arg(long, conflicts_with = "json")]
    ids: bool,
    /// Print one JSON object at the end instead of streaming text: token
    /// counts, timings, seed, backend and the generated text.
    #[arg(long)]
    json: bool,
    /// List every backend of this build with its device, or why it cannot
    /// run here, and exit.
    #[arg(long)]
    list_devices: bool,
    /// Do not add the BOS token even if the model asks for it.
    #[arg(long)]
    no_bos: bool,
    /// Keep the expert weights of the first N layers in host memory and
    /// compute them on the CPU, the rest on the GPU (llama.cpp's
    /// --n-cpu-moe, for mixture-of-experts models larger than the card).
    #[arg(long, value_name = "N", default_value_t = 0)]
    n_cpu_moe: usize,
    /// A GBNF grammar (llama.cpp's) the completion follows.
    #[arg(long, value_name = "GBNF", conflicts_with_all = ["grammar_file", "json_schema"])]
    grammar: Option<String>,
    /// A file holding a GBNF grammar the completion follows.
    #[arg(long, value_name = "PATH", conflicts_with = "json_schema")]
    grammar_file: Option<PathBuf>,
    /// A JSON schema the completion is a value of (llama-cli's -j).
    #[arg(long, short = 'j', value_name = "SCHEMA")]
    json_schema: Option<String>,
}

/// How a generation ended, for the exit code.
pub enum Finished {
    Done,
    /// Stopped by Ctrl-C (exit 130).
    Interrupted,
}

/// Set by the first Ctrl-C; the generation loop stops at the next token.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Ctrl-C stops the generation at the next token, keeping what was printed
/// and printing the timings; a second Ctrl-C (a prompt evaluation can take
/// a while on the CPU) ends the process at once.
fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            let _ = std::io::stdout().flush();
            // SAFETY: _exit ends the process immediately; this thread touches
            // nothing afterwards.
            unsafe { libc::_exit(130) };
        }
    });
}

pub fn run(a: Args) -> Result<Finished, CliError> {
    if a.list_devices {
        super::devices::list(&a.backend)?;
        return Ok(Finished::Done);
    }
    let max_tokens = match a.n_predict {
        -1 => None,
        n => Some(usize::try_from(n).map_err(|_| {
            format!(
                "-n/--n-predict takes a token count or -1 (until the end of generation), got {n}"
            )
        })?),
    };
    let seed = a.sampling.seed.resolve();
    let mut sampler = Sampler::new(a.sampling.config(seed))?;
    // The user's input is checked before any backend starts: probing one
    // takes seconds, a typo in a path should not.
    let input = read_input(&a)?;
    let Chosen { backend, failures } = create_backend(&a.backend)?;
    let run = Run {
        max_tokens,
        seed,
        // Greedy decoding (--temp 0) draws no random numbers: its seed
        // would be noise.
        print_seed: a.sampling.prints_seed(),
        sampler: &mut sampler,
    };
    let result = generate(&a, run, input, backend);
    if let Err(e) = &result {
        failures.record_failure(e.as_ref());
    }
    result
}

/// What `run` worked out from the flags for the generation loop.
struct Run<'s> {
    /// None: until the end of generation or a full context.
    max_tokens: Option<usize>,
    seed: u64,
    /// Say which random seed was picked, so the run can be repeated.
    print_seed: bool,
    sampler: &'s mut Sampler,
}

/// The model, its tokenizer and the prompt, checked.
struct Input {
    model: Arc<Model>,
    tok: Tokenizer,
    /// The grammar the completion follows (`--grammar`, `--json-schema`).
    constraint: Option<Constraint>,
    /// The prompt as given, echoed before the completion.
    text: String,
    prompt: Vec<u32>,
    n_ctx: usize,
    t_load: Instant,
}

/// The prompt's text from `-p` or `-f`, either of which may be `-` for
/// stdin.
fn prompt_text(a: &Args) -> Result<String, CliError> {
    match (&a.prompt, &a.file) {
        (Some(p), _) if p == "-" => read_text(Path::new("-"), "the prompt"),
        (Some(p), _) => Ok(p.clone()),
        (None, Some(f)) => read_text(f, "the prompt"),
        // clap requires one of them unless --list-devices is given.
        (None, None) => Err("give a prompt with -p TEXT or -f FILE".into()),
    }
}

/// The grammar `--grammar`, `--grammar-file` or `--json-schema` gives, if
/// any, compiled for this vocabulary.
fn constraint(a: &Args, tok: &Tokenizer) -> Result<Option<Constraint>, CliError> {
    let (flag, compiled) = match (&a.grammar, &a.grammar_file, &a.json_schema) {
        (None, None, None) => return Ok(None),
        (Some(g), _, _) => ("--grammar", Grammars::new(tok).and_then(|gs| gs.gbnf(g))),
        (_, Some(path), _) => {
            let g = read_text(path, "the grammar")?;
            (
                "--grammar-file",
                Grammars::new(tok).and_then(|gs| gs.gbnf(&g)),
            )
        }
        (_, _, Some(schema)) => {
            let schema: serde_json::Value = serde_json::from_str(schema)
                .map_err(|e| format!("--json-schema is not JSON: {e}"))?;
            (
                "--json-schema",
                Grammars::new(tok).and_then(|gs| gs.json_schema(&schema)),
            )
        }
    };
    compiled
        .map(Some)
        .map_err(|e| format!("{flag}: {e}").into())
}

/// The model path, which clap requires unless --list-devices is given.
fn model_path(path: &Option<PathBuf>) -> Result<&PathBuf, CliError> {
    path.as_ref()
        .ok_or_else(|| "give the model file with -m PATH".into())
}

fn read_input(a: &Args) -> Result<Input, CliError> {
    let path = model_path(&a.gguf)?;
    check_model_path(path)?;
    let text = prompt_text(a)?;
    let t_load = Instant::now();
    let model = Arc::new(Model::load(path).map_err(|e| format!("{}: {e}", path.display()))?);
    let tok = Tokenizer::from_gguf(&model.file)?;
    let constraint = constraint(a, &tok)?;
    let n_ctx = context_size(a.ctx_size, model.config.n_ctx_train);
    let prompt = tok.encode(&text, tok.add_bos_default() && !a.no_bos, true);
    if prompt.is_empty() {
        return Err(
            "the prompt is empty and the model adds no BOS token: give some text with -p or -f"
                .into(),
        );
    }
    if prompt.len() >= n_ctx {
        return Err(format!(
            "the prompt has {} tokens, more than the context size {n_ctx} allows (raise --ctx-size)",
            prompt.len()
        )
        .into());
    }
    Ok(Input {
        model,
        tok,
        constraint,
        text,
        prompt,
        n_ctx,
        t_load,
    })
}

/// `generate --json`'s object. Field names follow llama.cpp's server
/// `timings` where one exists (`prompt_n`, `prompt_ms`, ...).
#[derive(serde::Serialize)]
struct Report<'a> {
    backend: &'a str,
    device: &'a str,
    seed: u64,
    prompt_n: usize,
    prompt_ms: f64,
    prompt_per_second: f64,
    predicted_n: usize,
    predicted_ms: f64,
    predicted_per_second: f64,
    stop_reason: &'a str,
    text: &'a str,
    tokens: &'a [u32],
}

/// Where generated tokens go: streamed as text or ids, or kept for the
/// JSON report.
enum Sink {
    Text(StreamDecoder),
    Ids,
    Json {
        text: String,
        decoder: StreamDecoder,
    },
}

fn generate(
    a: &Args,
    run: Run<'_>,
    input: Input,
    backend: Box<dyn Backend>,
) -> Result<Finished, CliError> {
    let Run {
        max_tokens,
        seed,
        print_seed,
        sampler,
    } = run;
    let Input {
        model,
        tok,
        mut constraint,
        text,
        prompt,
        n_ctx,
        t_load,
    } = input;
    let bar = load_bar();
    let mut progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let opts = SessionOptions {
        n_ctx,
        kv_types: a.cache_types.types(),
        ..SessionOptions::default()
    };
    let host_opts = BackendOptions {
        threads: a.backend.threads,
        ..BackendOptions::default()
    };
    let backend = registry::with_cpu_experts(backend, &model, a.n_cpu_moe, &host_opts)?;
    let mut report = |needs: &MemoryNeeds| note(&needs.summary());
    let session = Session::new_reporting(
        Arc::clone(&model),
        backend,
        opts,
        &mut progress,
        &mut report,
    );
    bar.finish_and_clear();
    let mut session = session?;
    let load_s = t_load.elapsed().as_secs_f64();
    let info = session.backend().info();
    note(&format!(
        "backend: {} on {}; model loaded in {:.2} s",
        info.name, info.device, load_s
    ));
    // Printed once the model is loaded, so that anything refused before
    // (a bad path, a model too large) is still one line.
    if print_seed {
        note(&format!(
            "seed: {seed} (random; -s {seed} repeats this run)"
        ));
    }

    install_interrupt_handler();
    let mut out = std::io::stdout().lock();
    let mut sink = if a.json {
        Sink::Json {
            text: String::new(),
            decoder: StreamDecoder::new(),
        }
    } else if a.ids {
        Sink::Ids
    } else {
        write_stdout(&mut out, text.as_bytes())?;
        Sink::Text(StreamDecoder::new())
    };
    let t_prompt = Instant::now();
    let mut logits = session.eval(&prompt)?.to_vec();
    let prompt_s = t_prompt.elapsed().as_secs_f64();
    for &t in &prompt {
        sampler.accept(t);
    }

    let t_gen = Instant::now();
    let mut tokens = Vec::new();
    let mut stop_reason = "max tokens";
    let mut failure = None;
    while max_tokens.is_none_or(|m| tokens.len() < m) {
        if INTERRUPTED.load(Ordering::SeqCst) {
            stop_reason = "interrupted";
            break;
        }
        let id = match constraint.as_mut() {
            None => sampler.sample(&logits),
            Some(c) => c.sample(&mut logits, sampler).map_err(|e| e.to_string())?,
        };
        sampler.accept(id);
        tokens.push(id);
        match &mut sink {
            Sink::Ids => write_stdout(&mut out, format!("{id}\n").as_bytes())?,
            Sink::Text(decoder) if !tok.is_eog(id) => {
                write_stdout(&mut out, decoder.push(&tok, id).as_bytes())?
            }
            Sink::Json { text, decoder } if !tok.is_eog(id) => {
                text.push_str(&decoder.push(&tok, id))
            }
            _ => {}
        }
        if tok.is_eog(id) {
            stop_reason = "end of generation";
            break;
        }
        if session.n_past() >= session.n_ctx() {
            stop_reason = "context full";
            break;
        }
        if max_tokens.is_none_or(|m| tokens.len() < m) {
            match session.eval(&[id]) {
                Ok(l) => logits.copy_from_slice(l),
                Err(e) => {
                    stop_reason = "device failure";
                    failure = Some(e);
                    break;
                }
            }
        }
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        stop_reason = "interrupted";
    }
    let gen_s = t_gen.elapsed().as_secs_f64();
    let per_second = |n: usize, s: f64| n as f64 / s.max(1e-9);
    // What was generated stays on stdout, ended by a newline, before any
    // error: a failure mid-run loses nothing already streamed.
    match sink {
        Sink::Text(mut decoder) => {
            let rest = decoder.finish();
            write_stdout(&mut out, format!("{rest}\n").as_bytes())?;
        }
        Sink::Ids => {}
        Sink::Json {
            mut text,
            mut decoder,
        } => {
            text.push_str(&decoder.finish());
            let report = Report {
                backend: info.name,
                device: &info.device,
                seed,
                prompt_n: prompt.len(),
                prompt_ms: prompt_s * 1e3,
                prompt_per_second: per_second(prompt.len(), prompt_s),
                predicted_n: tokens.len(),
                predicted_ms: gen_s * 1e3,
                predicted_per_second: per_second(tokens.len(), gen_s),
                stop_reason,
                text: &text,
                tokens: &tokens,
            };
            let json = serde_json::to_string(&report)?;
            write_stdout(&mut out, format!("{json}\n").as_bytes())?;
        }
    }
    out.flush()?;
    note(&format!(
        "prompt: {} tokens in {:.2} s ({:.1} t/s); generated: {} tokens in {:.2} s ({:.1} t/s); stopped: {}",
        prompt.len(),
        prompt_s,
        per_second(prompt.len(), prompt_s),
        tokens.len(),
        gen_s,
        per_second(tokens.len(), gen_s),
        stop_reason
    ));
    if let Some(e) = failure {
        return Err(e.into());
    }
    Ok(if stop_reason == "interrupted" {
        Finished::Interrupted
    } else {
        Finished::Done
    })
}

/// `--gpu-timeout` as a duration: positive and finite.
pub fn gpu_timeout(secs: f64) -> Result<Duration, String> {
    positive_secs("--gpu-timeout", secs)
}

/// A flag's seconds as a duration: positive and finite.
pub fn positive_secs(flag: &str, secs: f64) -> Result<Duration, String> {
    if secs.is_finite() && secs > 0.0 && secs < 1e9 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(format!(
            "{flag} must be a positive number of seconds, got {secs}"
        ))
    }
}

/// The context without `--ctx-size`, at most.
pub const DEFAULT_CTX: usize = 4096;

/// The context a session gets: `--ctx-size N`, 0 for the model's whole
/// training context (llama.cpp's `-c 0`), or without the flag the training
/// context capped at [`DEFAULT_CTX`] (a model trained at 128k would
/// otherwise reserve a KV cache of many GiB by default). A warning when it
/// exceeds the training context.
pub fn context_size(requested: Option<usize>, n_ctx_train: usize) -> usize {
    let n_ctx = match requested {
        None => n_ctx_train.min(DEFAULT_CTX),
        Some(0) => n_ctx_train,
        Some(n) => n,
    };
    if n_ctx > n_ctx_train {
        note(&format!(
            "warning: context size {n_ctx} is longer than the model's training context {n_ctx_train}; output past {n_ctx_train} tokens is likely to degrade"
        ));
    }
    n_ctx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_the_training_context_and_no_flag_caps_it() {
        assert_eq!(context_size(None, 131072), DEFAULT_CTX);
        assert_eq!(context_size(None, 2048), 2048);
        assert_eq!(context_size(Some(0), 131072), 131072);
        assert_eq!(context_size(Some(512), 2048), 512);
    }
}
