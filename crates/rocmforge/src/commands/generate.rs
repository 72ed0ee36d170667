//! `rocmforge generate`: stream a completion to stdout, timings to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::model::Model;
use rocmforge_core::sampler::{Sampler, SamplerConfig};
use rocmforge_core::session::{Session, SessionOptions};
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};

use super::{write_stdout, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Model file.
    #[arg(long)]
    gguf: PathBuf,
    /// Prompt text (special tokens such as `<|im_start|>` are recognised).
    #[arg(long)]
    prompt: String,
    /// Tokens to generate at most.
    #[arg(long, short = 'n', default_value_t = 128)]
    max_tokens: usize,
    /// Compute backend.
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// CPU threads (0 = one per core).
    #[arg(long, short = 't', default_value_t = 0)]
    threads: usize,
    /// GPU device index (default: the backend's choice, discrete GPUs first).
    #[arg(long)]
    device: Option<usize>,
    /// Seconds any wait for the GPU may take before the run stops with an
    /// error naming the work in flight.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    gpu_timeout: f64,
    /// Context size in tokens (0 = the model's training context, capped at 4096).
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
    /// Sampling seed: the same seed gives the same output.
    #[arg(long, short = 's', default_value_t = 0)]
    seed: u64,
    /// Print generated token ids, one per line, instead of text.
    #[arg(long)]
    ids: bool,
    /// Do not add the BOS token even if the model asks for it.
    #[arg(long)]
    no_bos: bool,
}

fn load_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("loading {bar:30} {bytes}/{total_bytes} {msg}")
            .expect("valid template"),
    );
    bar
}

pub fn run(a: Args) -> Result<(), CliError> {
    let sampler_cfg = SamplerConfig {
        temperature: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repeat_penalty: a.repeat_penalty,
        repeat_last_n: a.repeat_last_n,
        seed: a.seed,
    };
    let mut sampler = Sampler::new(sampler_cfg)?;
    let backend = registry::create(
        &a.backend,
        &BackendOptions {
            threads: a.threads,
            device: a.device,
            allow_software_devices: false,
            gpu_timeout: Some(gpu_timeout(a.gpu_timeout)?),
        },
    )?;

    let t_load = Instant::now();
    let model = Arc::new(Model::load(&a.gguf).map_err(|e| format!("{}: {e}", a.gguf.display()))?);
    let tok = Tokenizer::from_gguf(&model.file)?;
    let n_ctx = match a.ctx_size {
        0 => model.config.n_ctx_train.min(4096),
        n => n,
    };
    let prompt = tok.encode(&a.prompt, tok.add_bos_default() && !a.no_bos, true);
    if prompt.is_empty() {
        return Err("the prompt is empty (and the model adds no BOS token)".into());
    }
    if prompt.len() >= n_ctx {
        return Err(format!(
            "the prompt has {} tokens, more than the context size {n_ctx} allows (raise --ctx-size)",
            prompt.len()
        )
        .into());
    }
    let bar = load_bar();
    let mut progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let opts = SessionOptions {
        n_ctx,
        ..SessionOptions::default()
    };
    let mut session = Session::new(Arc::clone(&model), backend, opts, &mut progress)?;
    bar.finish_and_clear();
    let load_s = t_load.elapsed().as_secs_f64();
    let info = session.backend().info();
    eprintln!(
        "backend: {} on {}; model loaded in {:.2} s",
        info.name, info.device, load_s
    );

    let mut out = std::io::stdout().lock();
    if !a.ids {
        write_stdout(&mut out, a.prompt.as_bytes())?;
    }
    let t_prompt = Instant::now();
    let mut logits = session.eval(&prompt)?.to_vec();
    let prompt_s = t_prompt.elapsed().as_secs_f64();
    for &t in &prompt {
        sampler.accept(t);
    }

    let t_gen = Instant::now();
    let mut decoder = StreamDecoder::new();
    let mut generated = 0;
    let mut stop_reason = "max tokens";
    while generated < a.max_tokens {
        let id = sampler.sample(&logits);
        sampler.accept(id);
        generated += 1;
        if a.ids {
            write_stdout(&mut out, format!("{id}\n").as_bytes())?;
        } else if !tok.is_eog(id) {
            write_stdout(&mut out, decoder.push(&tok, id).as_bytes())?;
        }
        if tok.is_eog(id) {
            stop_reason = "end of generation";
            break;
        }
        if session.n_past() >= session.n_ctx() {
            stop_reason = "context full";
            break;
        }
        if generated < a.max_tokens {
            logits.copy_from_slice(session.eval(&[id])?);
        }
    }
    if !a.ids {
        let rest = decoder.finish();
        write_stdout(&mut out, format!("{rest}\n").as_bytes())?;
    }
    out.flush()?;
    let gen_s = t_gen.elapsed().as_secs_f64();
    eprintln!(
        "prompt: {} tokens in {:.2} s ({:.1} t/s); generated: {} tokens in {:.2} s ({:.1} t/s); stopped: {}",
        prompt.len(),
        prompt_s,
        prompt.len() as f64 / prompt_s.max(1e-9),
        generated,
        gen_s,
        generated as f64 / gen_s.max(1e-9),
        stop_reason
    );
    Ok(())
}

/// `--gpu-timeout` as a duration: positive and finite.
fn gpu_timeout(secs: f64) -> Result<std::time::Duration, String> {
    if secs.is_finite() && secs > 0.0 && secs < 1e9 {
        Ok(std::time::Duration::from_secs_f64(secs))
    } else {
        Err(format!(
            "--gpu-timeout must be a positive number of seconds, got {secs}"
        ))
    }
}
