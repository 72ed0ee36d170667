//! `cargo xtask bench`: llama-bench style throughput (prompt processing and
//! token generation, in tokens/s) of one model on each requested backend.

mod backends;
mod llama_bench;
mod measure;
mod model_source;
mod report;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use rocmforge::registry::BackendOptions;
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;

use backends::{BackendChoice, Resolved, Target};
use report::{BackendResult, OutputFormat, Report};
use rocmforge_genmodel::presets::{self, Preset};

#[derive(Debug, clap::Args)]
// A later -p/-n/-r replaces an earlier one, so scripts can append overrides.
#[command(args_override_self = true)]
pub struct BenchArgs {
    /// Backends to compare, comma separated: cpu, rocm, hip, vulkan, or all
    /// (every backend this binary knows, including absent ones, with the
    /// reason they cannot run).
    #[arg(long, value_name = "NAMES", value_delimiter = ',', default_value = "all",
          value_parser = backends::parse_choice)]
    pub backend: Vec<BackendChoice>,
    /// GGUF model to benchmark (instead of a generated preset).
    #[arg(short, long, value_name = "PATH", conflicts_with_all = ["preset", "ty"])]
    pub model: Option<PathBuf>,
    /// Preset of the generated model, cached under target/models/.
    #[arg(long, value_name = "NAME", value_parser = presets::parse_preset,
          default_value = "qwen2-0.5b")]
    pub preset: &'static Preset,
    /// Weight type of the generated model.
    #[arg(long = "type", value_name = "TYPE", default_value = "Q4_0",
          value_parser = backends::parse_weight_type)]
    pub ty: QuantType,
    /// Prompt tokens evaluated as one batch (the ppN test); 0 skips it.
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_name = "N",
        default_value_t = 512
    )]
    pub n_prompt: usize,
    /// Single-token decode steps (the tgN test); 0 skips it.
    #[arg(short = 'n', long = "n-gen", value_name = "N", default_value_t = 128)]
    pub n_gen: usize,
    /// Timed repetitions of each test, after one untimed warm-up.
    #[arg(short = 'r', long = "repetitions", value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repetitions: u32,
    /// CPU threads (0 = one per core).
    #[arg(short = 't', long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Device index for GPU backends (default: the backend's choice,
    /// discrete GPUs first; naming a software device selects it).
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,
    /// Keep the expert weights of the first N layers in host memory,
    /// computed on the CPU (llama-bench's --n-cpu-moe); GPU backends only.
    #[arg(long = "n-cpu-moe", value_name = "N", default_value_t = 0)]
    pub n_cpu_moe: usize,
    /// Seconds any wait for the GPU may take.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub gpu_timeout: u64,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Md)]
    pub output: OutputFormat,
    /// Also run this llama-bench binary on the same model and settings, and
    /// report rocmforge's speed relative to it.
    #[arg(long, value_name = "PATH")]
    pub vs_llama_bench: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("nothing to measure: -p and -n are both 0")]
    NoTests,
    #[error("generating the model: {0}")]
    Generate(#[from] rocmforge_genmodel::GenError),
    #[error("cannot create {}: {source}", path.display())]
    ModelDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot load {}: {source}", path.display())]
    Load {
        path: PathBuf,
        source: rocmforge_core::model::ModelError,
    },
    #[error("llama-bench: {0}")]
    LlamaBench(#[from] llama_bench::LlamaBenchError),
    #[error("a backend asked for by name cannot run: {0}")]
    Unavailable(String),
}

impl BenchError {
    /// Argument errors exit 2 like clap's; everything else 1.
    fn exit_code(&self) -> u8 {
        match self {
            BenchError::NoTests => 2,
            _ => 1,
        }
    }
}

pub fn main(args: &BenchArgs) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(args: &BenchArgs) -> Result<(), BenchError> {
    if args.n_prompt == 0 && args.n_gen == 0 {
        return Err(BenchError::NoTests);
    }
    if let Some(binary) = &args.vs_llama_bench {
        // Checked up front so a typo does not cost a whole benchmark first.
        // A bare name is looked up on PATH when run, so only paths are checked.
        let is_path = binary.components().count() > 1;
        if is_path && !binary.is_file() {
            return Err(BenchError::LlamaBench(
                llama_bench::LlamaBenchError::Missing(binary.clone()),
            ));
        }
    }
    let targets = backends::resolve(&args.backend);
    // A list of absent backends needs no model: don't generate one just to
    // say so.
    let needs_model = args.vs_llama_bench.is_some()
        || targets
            .iter()
            .any(|t| matches!(t.backend, Resolved::Registry(_)));
    let loaded = if needs_model {
        Some(load_model(args)?)
    } else {
        None
    };
    let plan = measure::Plan {
        n_prompt: args.n_prompt,
        n_gen: args.n_gen,
        repetitions: args.repetitions as usize,
        n_cpu_moe: args.n_cpu_moe,
    };
    let opts = BackendOptions {
        threads: args.threads,
        device: args.device,
        allow_software_devices: false,
        gpu_timeout: Some(std::time::Duration::from_secs(args.gpu_timeout.max(1))),
    };

    let mut results = Vec::new();
    let mut failed_by_name = Vec::new();
    for target in &targets {
        let result = run_target(target, loaded.as_ref(), &plan, &opts);
        if let (Some(reason), true) = (&result.reason, target.by_name) {
            failed_by_name.push(format!("backend {}: {reason}", result.backend));
        }
        results.push(result);
    }
    if let (Some(binary), Some((_, path))) = (&args.vs_llama_bench, &loaded) {
        let threads = if args.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            args.threads
        };
        eprintln!("bench: running {}", binary.display());
        let settings = llama_bench::Settings {
            model: path,
            n_prompt: args.n_prompt,
            n_gen: args.n_gen,
            repetitions: args.repetitions,
            threads,
        };
        results.push(llama_bench::run(binary, &settings)?);
    }

    let report = Report {
        model: loaded
            .as_ref()
            .map(|(model, path)| report::ModelInfo::of(model, path)),
        backends: results,
    };
    print!("{}", report.render(args.output));
    match failed_by_name.first() {
        // Every reason is already in the report; stderr repeats the first so
        // the failure is one line there too.
        Some(first) => Err(BenchError::Unavailable(first.clone())),
        None => Ok(()),
    }
}

/// Creates, loads and measures one backend, turning any failure into the
/// reason shown in its row.
fn run_target(
    target: &Target,
    loaded: Option<&(Arc<Model>, PathBuf)>,
    plan: &measure::Plan,
    opts: &BackendOptions,
) -> BackendResult {
    let name = match target.backend {
        Resolved::Registry(name) => name,
        Resolved::Absent(name) => {
            return BackendResult::unavailable(name, backends::absent_reason(name));
        }
    };
    let Some((model, _)) = loaded else {
        return BackendResult::unavailable(name, "no model loaded".to_string());
    };
    eprintln!("bench: {name}: loading model and warming up");
    match measure::measure(name, Arc::clone(model), plan, opts) {
        Ok((device, tests)) => BackendResult {
            backend: name.to_string(),
            device: Some(device),
            reason: None,
            tests,
        },
        Err(reason) => BackendResult::unavailable(name, reason),
    }
}

/// The model file (given, or generated and cached) and the model loaded from it.
fn load_model(args: &BenchArgs) -> Result<(Arc<Model>, PathBuf), BenchError> {
    let path = match &args.model {
        Some(path) => path.clone(),
        None => model_source::generated_model(args.preset, args.ty)?,
    };
    eprintln!("bench: loading {}", path.display());
    let model = Model::load(&path).map_err(|source| BenchError::Load {
        path: path.clone(),
        source,
    })?;
    Ok((Arc::new(model), path))
}
