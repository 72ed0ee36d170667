//! `rocmforge perplexity`: the perplexity of a text file, printed as
//! llama.cpp's `llama-perplexity` prints it (`[k]value` after each chunk,
//! then `Final estimate: PPL = X +/- Y`), by its method
//! ([`rocmforge_core::perplexity`]).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rocmforge_core::model::Model;
use rocmforge_core::perplexity::{self, ChunkPlan, PerplexityError};
use rocmforge_core::session::{MemoryNeeds, Session, SessionOptions};
use rocmforge_core::tokenizer::Tokenizer;

use super::backend_choice::{create_backend, BackendArgs, Chosen};
use super::text_input::read_text;
use super::{check_model_path, note, write_stdout, CliError};
use crate::commands::cache_types::CacheTypeArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Model file.
    #[arg(
        long = "model",
        short = 'm',
        visible_alias = "gguf",
        value_name = "PATH"
    )]
    model: PathBuf,
    /// The text to score, or `-` for stdin. One trailing newline is
    /// dropped, as llama.cpp's `-f` does.
    #[arg(long, short = 'f', value_name = "PATH")]
    file: PathBuf,
    /// Tokens per chunk; the second half of each chunk is scored.
    #[arg(
        long,
        short = 'c',
        value_name = "N",
        default_value_t = 512,
        allow_negative_numbers = true
    )]
    ctx_size: usize,
    /// Most tokens evaluated in one step (capped at the chunk size). Speed
    /// and memory depend on it; the result only through rounding.
    #[arg(
        long,
        short = 'b',
        value_name = "N",
        default_value_t = 2048,
        allow_negative_numbers = true
    )]
    batch_size: usize,
    /// Score only the first N chunks (default: every whole chunk).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    chunks: Option<usize>,
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    cache_types: CacheTypeArgs,
}

pub fn run(a: Args) -> Result<(), CliError> {
    if a.batch_size == 0 {
        return Err("-b/--batch-size must be at least 1".into());
    }
    if a.chunks == Some(0) {
        return Err("--chunks must be at least 1".into());
    }
    let path = &a.model;
    check_model_path(path)?;
    let text = read_text(&a.file, "the text")?;
    let t_load = Instant::now();
    let model = Arc::new(Model::load(path).map_err(|e| format!("{}: {e}", path.display()))?);
    let tok = Tokenizer::from_gguf(&model.file)?;
    if tok.add_eos_default() {
        return Err("the model's tokenizer appends EOS to every text (add_eos_token); llama-perplexity's method does not apply to such models".into());
    }
    // As llama-perplexity: BOS as the file says, no special-token parsing
    // (a text that contains `<|im_end|>` is scored as plain text).
    let add_bos = tok.add_bos_default();
    let tokens = tok.encode(&text, add_bos, false);
    let plan = ChunkPlan::new(tokens.len(), a.ctx_size, a.chunks)?;
    if plan.n_ctx > model.config.n_ctx_train {
        note(&format!(
            "warning: chunks of {} tokens are longer than the model's training context {}",
            plan.n_ctx, model.config.n_ctx_train
        ));
    }
    let Chosen { backend, failures } = create_backend(&a.backend)?;
    let opts = SessionOptions {
        n_ctx: plan.n_ctx,
        n_batch: a.batch_size.min(plan.n_ctx),
        all_logits: true,
        kv_types: a.cache_types.types(),
        n_seq: 1,
    };
    let mut report = |needs: &MemoryNeeds| note(&needs.summary());
    let result = Session::new_reporting(model, backend, opts, &mut |_, _| {}, &mut report)
        .map_err(CliError::from)
        .and_then(|mut session| {
            let info = session.backend().info();
            note(&format!(
                "backend: {} on {}; model loaded in {:.2} s",
                info.name,
                info.device,
                t_load.elapsed().as_secs_f64()
            ));
            note(&format!(
                "perplexity: {} tokens; {} chunks of {}, scoring the last {} tokens of each",
                tokens.len(),
                plan.n_chunks,
                plan.n_ctx,
                plan.scored_per_chunk()
            ));
            score(
                &mut session,
                &tokens,
                plan,
                add_bos.then(|| tok.bos()).flatten(),
            )
        });
    if let Err(e) = &result {
        failures.record_failure(e.as_ref());
    }
    result
}

fn score(
    session: &mut Session,
    tokens: &[u32],
    plan: ChunkPlan,
    bos: Option<u32>,
) -> Result<(), CliError> {
    let t = Instant::now();
    let mut out = std::io::stdout().lock();
    let mut write_error = None;
    let mut on_chunk = |k: usize, estimate: f64| {
        if write_error.is_none() {
            if let Err(e) = write_stdout(&mut out, format!("[{k}]{estimate:.4},").as_bytes()) {
                write_error = Some(e);
            }
        }
    };
    let result = perplexity::evaluate(session, tokens, plan, bos, &mut on_chunk);
    if let Some(e) = write_error {
        return Err(e);
    }
    let result = result.map_err(|e| match e {
        // Unwrapped so that `main` sees a device failure for what it is.
        PerplexityError::Session(s) => CliError::from(s),
        e => e.into(),
    })?;
    let final_line = match result.standard_error() {
        Some(err) => format!(
            "\nFinal estimate: PPL = {:.4} +/- {:.5}\n",
            result.estimate(),
            err
        ),
        None => format!("\nFinal estimate: PPL = {:.4}\n", result.estimate()),
    };
    write_stdout(&mut out, final_line.as_bytes())?;
    out.flush()?;
    let secs = t.elapsed().as_secs_f64();
    note(&format!(
        "perplexity: {} chunks in {:.2} s ({:.1} tokens/s)",
        plan.n_chunks,
        secs,
        (plan.n_chunks * plan.n_ctx) as f64 / secs.max(1e-9)
    ));
    Ok(())
}
