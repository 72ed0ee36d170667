//! `rocmforge generate`: stream a completion to stdout, timings to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::backend::Backend;
use rocmforge_core::model::Model;
use rocmforge_core::sampler::{Sampler, SamplerConfig};
use rocmforge_core::session::{MemoryNeeds, Session, SessionOptions};
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};

use super::backend_choice::{create_backend, load_bar, remember_failure, BackendRequest};
use super::{check_model_path, note, write_stdout, CliError};

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
    /// Compute backend: auto (rocm, then vulkan, then cpu; GPU backends are
    /// probed in a child process first), rocm, vulkan or cpu.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// With --backend auto: probe the GPU backends again instead of using
    /// the verdicts cached for this device, driver and build.
    #[arg(long)]
    reprobe: bool,
    /// With --backend auto: seconds a probe may take before its backend is
    /// declared hung and passed over.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    probe_timeout: f64,
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
    /// Keep the expert weights of the first N layers in host memory and
    /// compute them on the CPU, the rest on the GPU (llama.cpp's
    /// --n-cpu-moe, for mixture-of-experts models larger than the card).
    #[arg(long, value_name = "N", default_value_t = 0)]
    n_cpu_moe: usize,
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
    // The user's input is checked before any backend starts: probing one
    // takes seconds, a typo in a path should not.
    let input = read_input(&a)?;
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
    let result = generate(&a, &mut sampler, input, chosen.backend);
    remember_failure(&chosen.auto_cache, backend_name, a.device, &result);
    result
}

/// The model, its tokenizer and the prompt, checked.
struct Input {
    model: Arc<Model>,
    tok: Tokenizer,
    prompt: Vec<u32>,
    n_ctx: usize,
    t_load: Instant,
}

fn read_input(a: &Args) -> Result<Input, CliError> {
    check_model_path(&a.gguf)?;
    let t_load = Instant::now();
    let model = Arc::new(Model::load(&a.gguf).map_err(|e| format!("{}: {e}", a.gguf.display()))?);
    let tok = Tokenizer::from_gguf(&model.file)?;
    let n_ctx = context_size(a.ctx_size, model.config.n_ctx_train);
    let prompt = tok.encode(&a.prompt, tok.add_bos_default() && !a.no_bos, true);
    if prompt.is_empty() {
        return Err(
            "the prompt is empty and the model adds no BOS token: give some text with --prompt"
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
        prompt,
        n_ctx,
        t_load,
    })
}

fn generate(
    a: &Args,
    sampler: &mut Sampler,
    input: Input,
    backend: Box<dyn Backend>,
) -> Result<Finished, CliError> {
    let Input {
        model,
        tok,
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
        ..SessionOptions::default()
    };
    let host_opts = BackendOptions {
        threads: a.threads,
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

    install_interrupt_handler();
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
    let mut failure = None;
    while generated < a.max_tokens {
        if INTERRUPTED.load(Ordering::SeqCst) {
            stop_reason = "interrupted";
            break;
        }
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
    // What was generated stays on stdout, ended by a newline, before any
    // error: a failure mid-run loses nothing already streamed.
    if !a.ids {
        let rest = decoder.finish();
        write_stdout(&mut out, format!("{rest}\n").as_bytes())?;
    }
    out.flush()?;
    let gen_s = t_gen.elapsed().as_secs_f64();
    note(&format!(
        "prompt: {} tokens in {:.2} s ({:.1} t/s); generated: {} tokens in {:.2} s ({:.1} t/s); stopped: {}",
        prompt.len(),
        prompt_s,
        prompt.len() as f64 / prompt_s.max(1e-9),
        generated,
        gen_s,
        generated as f64 / gen_s.max(1e-9),
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

/// The context size for `--ctx-size` (0 = the model's training context,
/// capped at 4096), warning when it is longer than the model was trained on.
pub fn context_size(requested: usize, n_ctx_train: usize) -> usize {
    let n_ctx = match requested {
        0 => n_ctx_train.min(4096),
        n => n,
    };
    if n_ctx > n_ctx_train {
        note(&format!(
            "warning: context size {n_ctx} is longer than the model's training context {n_ctx_train}; output past {n_ctx_train} tokens is likely to degrade"
        ));
    }
    n_ctx
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
