//! `cargo xtask bench`: llama-bench style throughput (prompt processing and
//! token generation, in tokens/s) of one model on each requested backend.

mod backends;
mod llama_bench;
mod llama_schema;
mod measure;
pub(crate) mod model_source;
mod report;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::backend::Backend;
use rocmforge_core::model::Model;
use rocmforge_core::plan::{KvType, KvTypes};
use rocmforge_core::quant::QuantType;

pub(crate) use backends::parse_weight_type;
use backends::{BackendChoice, Resolved, Target};
use llama_schema::RunInfo;
use report::{BackendResult, OutputFormat, Printer};
use rocmforge_genmodel::presets::{self, Preset};

#[derive(Debug, clap::Args)]
// A later -p/-n/-d/-r/-t replaces an earlier one (a list as a whole), so
// scripts can append overrides.
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
    /// Prompt sizes, comma separated: one ppN test each (a prompt of N
    /// tokens evaluated from an empty cache); 0 skips it.
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_name = "N,...",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Generation lengths, comma separated: one tgN test each (N
    /// single-token decode steps); 0 skips it.
    #[arg(
        short = 'n',
        long = "n-gen",
        value_name = "N,...",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Depths, comma separated (llama-bench's -d): every pp and tg test
    /// runs at each, after that many untimed prompt tokens are in the KV
    /// cache (rows `pp512 @ d4096`); 0 is an empty cache.
    #[arg(
        short = 'd',
        long = "n-depth",
        value_name = "N,...",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "0"
    )]
    pub n_depth: Vec<usize>,
    /// Timed repetitions of each test, after one untimed warm-up.
    #[arg(short = 'r', long = "repetitions", value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repetitions: u32,
    /// CPU thread counts, comma separated: every test runs with each (0 =
    /// one per core).
    #[arg(
        short = 't',
        long,
        value_name = "N,...",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "0"
    )]
    pub threads: Vec<usize>,
    /// Most prompt tokens passed to one evaluation (llama-bench's -b); a
    /// longer prompt is passed in pieces.
    #[arg(short = 'b', long = "batch-size", value_name = "N", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    /// Most tokens computed in one step (llama-bench's -ub); an evaluation
    /// is cut into steps of this size.
    #[arg(long = "ubatch-size", value_name = "N", default_value_t = 512,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub ubatch_size: u32,
    /// KV cache type for K (llama-bench's -ctk): f16, q8_0 or q4_0; one
    /// per run.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16",
          value_parser = KvType::parse)]
    pub cache_type_k: KvType,
    /// KV cache type for V (llama-bench's -ctv): f16, q8_0 or q4_0.
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16",
          value_parser = KvType::parse)]
    pub cache_type_v: KvType,
    /// Accepted for llama-bench habits (`-ngl 99`) and written to the JSON
    /// rows: the GPU backends always hold every layer, whatever the value.
    #[arg(long = "n-gpu-layers", value_name = "N", default_value_t = -1,
          allow_negative_numbers = true)]
    pub n_gpu_layers: i64,
    /// Keep the expert weights of the first N layers in host memory,
    /// computed on the CPU (llama-bench's --n-cpu-moe); GPU backends only.
    #[arg(long = "n-cpu-moe", value_name = "N", default_value_t = 0)]
    pub n_cpu_moe: usize,
    /// Device index for GPU backends (default: the backend's choice,
    /// discrete GPUs first; naming a software device selects it).
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,
    /// Seconds any wait for the GPU may take.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub gpu_timeout: u64,
    /// Output format: a markdown table, CSV, or llama-bench's JSON (an
    /// array) and JSONL (a line per row) schema.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Md)]
    pub output: OutputFormat,
    /// Also run this llama-bench binary on the same model and settings, and
    /// report rocmforge's speed relative to it.
    #[arg(long, value_name = "PATH")]
    pub vs_llama_bench: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("nothing to measure: every -p and -n size is 0")]
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
    let plan = measure::Plan {
        n_prompts: args.n_prompt.clone(),
        n_gens: args.n_gen.clone(),
        n_depths: args.n_depth.clone(),
        repetitions: args.repetitions as usize,
        n_batch: args.batch_size as usize,
        n_ubatch: args.ubatch_size as usize,
        n_cpu_moe: args.n_cpu_moe,
        kv_types: KvTypes {
            k: args.cache_type_k,
            v: args.cache_type_v,
        },
    };
    let tests = plan.tests();
    if tests.is_empty() {
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
    if let Some((model, _)) = &loaded {
        if let Some(warning) = context_warning(&tests, model.config.n_ctx_train) {
            eprintln!("warning: {warning}");
        }
    }
    let thread_counts: Vec<usize> = args.threads.iter().map(|&t| resolve_threads(t)).collect();
    // clap gives at least one count (the default is 0).
    let first_threads = thread_counts.first().copied().unwrap_or(1);
    let opts = |threads: usize| BackendOptions {
        threads,
        device: args.device,
        allow_software_devices: false,
        gpu_timeout: Some(std::time::Duration::from_secs(args.gpu_timeout.max(1))),
    };

    // Every backend is started first, so the report opens with what each
    // runs on (or why it cannot) and the table below it streams.
    let mut started: Vec<(Target, Started)> = targets
        .iter()
        .map(|&target| {
            let result = match target.backend {
                Resolved::Registry(name) => registry::create(name, &opts(first_threads))
                    .map(|b| {
                        let device = b.info().device;
                        (b, device)
                    })
                    .map_err(|e| e.to_string()),
                Resolved::Absent(name) => Err(backends::absent_reason(name)),
            };
            (target, result)
        })
        .collect();
    let mut results: Vec<BackendResult> = started
        .iter()
        .map(|(t, r)| match r {
            Ok((_, device)) => BackendResult {
                backend: t.backend.name().to_string(),
                device: Some(device.clone()),
                reason: None,
                tests: Vec::new(),
                launches: None,
            },
            Err(reason) => BackendResult::unavailable(t.backend.name(), reason.clone()),
        })
        .collect();

    let model_info = loaded
        .as_ref()
        .map(|(model, path)| report::ModelInfo::of(model, path));
    let run_info = RunInfo {
        n_cpu_moe: args.n_cpu_moe,
        type_k: args.cache_type_k.name(),
        type_v: args.cache_type_v.name(),
        ..RunInfo::collect(
            plan.n_batch,
            plan.n_ubatch,
            args.n_gpu_layers,
            args.device.unwrap_or(0),
        )
    };
    let mut printer = Printer::new(args.output, model_info, run_info.clone(), std::io::stdout());
    printer.preamble(&results);
    printer.begin();

    let mut failed_by_name = Vec::new();
    for ((target, start), result) in started.iter_mut().zip(&mut results) {
        match (
            std::mem::replace(start, Err(String::new())),
            loaded.as_ref(),
        ) {
            (Ok((backend, _)), Some((model, _))) => {
                let run = BackendRun {
                    model,
                    plan: &plan,
                    tests: &tests,
                    thread_counts: &thread_counts,
                    opts: &opts,
                };
                if let Err(reason) = run.measure(backend, result, &mut printer) {
                    result.reason = Some(reason);
                }
            }
            (Ok(_), None) => result.reason = Some("no model loaded".to_string()),
            (Err(_), _) => printer.failed(result),
        }
        if let (Some(reason), true) = (&result.reason, target.by_name) {
            failed_by_name.push(format!("backend {}: {reason}", result.backend));
        }
    }
    if let (Some(binary), Some((_, path))) = (&args.vs_llama_bench, &loaded) {
        eprintln!("bench: running {}", binary.display());
        let settings = llama_bench::Settings {
            model: path,
            n_prompt: &args.n_prompt,
            n_gen: &args.n_gen,
            n_depth: &args.n_depth,
            kv_types: plan.kv_types,
            repetitions: args.repetitions,
            threads: &thread_counts,
        };
        let llama = llama_bench::run(binary, &settings)?;
        for t in &llama.tests {
            printer.row(&llama.backend, llama.device.as_deref().unwrap_or(""), t);
        }
        results.push(llama);
    }
    printer.end(&results);
    match failed_by_name.first() {
        // Every reason is already in the report; stderr repeats the first so
        // the failure is one line there too.
        Some(first) => Err(BenchError::Unavailable(first.clone())),
        None => Ok(()),
    }
}

/// A backend started for the first thread count, with its device; or the
/// one-line reason it cannot run.
type Started = Result<(Box<dyn Backend>, String), String>;

/// What measuring one backend needs.
struct BackendRun<'a> {
    model: &'a Arc<Model>,
    plan: &'a measure::Plan,
    tests: &'a [measure::Test],
    thread_counts: &'a [usize],
    opts: &'a dyn Fn(usize) -> BackendOptions,
}

impl BackendRun<'_> {
    /// Every test with every thread count, each row printed as it finishes
    /// and kept in `result`. `first` is the backend already started for the
    /// first count; the others are started here.
    fn measure(
        &self,
        first: Box<dyn Backend>,
        result: &mut BackendResult,
        printer: &mut Printer<std::io::Stdout>,
    ) -> Result<(), String> {
        let mut first = Some(first);
        for &threads in self.thread_counts {
            let backend = match first.take() {
                Some(b) => b,
                None => registry::create(&result.backend, &(self.opts)(threads))
                    .map_err(|e| e.to_string())?,
            };
            eprintln!(
                "bench: {}: loading model and warming up ({threads} threads)",
                result.backend
            );
            let mut runner =
                measure::Runner::start(backend, Arc::clone(self.model), self.plan, threads)?;
            result.launches = runner.launches();
            for &test in self.tests {
                let t = runner.run(test)?;
                printer.row(&result.backend, &runner.device(), &t);
                result.tests.push(t);
            }
        }
        Ok(())
    }
}

/// `-t 0`: one thread per core, as the CPU backend picks; the rows name the
/// count that ran.
fn resolve_threads(threads: usize) -> usize {
    match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// A test past the model's trained context still runs, as in llama-bench
/// (its context is n_depth + n_prompt + n_gen, whatever the file says, and
/// llama.cpp warns "possible training context overflow"): the line saying
/// so for the deepest such test. Said before any backend runs.
fn context_warning(tests: &[measure::Test], n_ctx_train: usize) -> Option<String> {
    let t = tests.iter().max_by_key(|t| t.positions())?;
    (t.positions() > n_ctx_train).then(|| {
        format!(
            "{} needs {} cache positions, past the model's trained context of \
             {n_ctx_train}; it runs, as in llama-bench (output quality past that length \
             is the model's)",
            t.name(),
            t.positions()
        )
    })
}

/// The model file (given, or generated and cached) and the model loaded from it.
fn load_model(args: &BenchArgs) -> Result<(Arc<Model>, PathBuf), BenchError> {
    let path = match &args.model {
        Some(path) => path.clone(),
        None => model_source::generated_model(args.preset, args.ty)?,
    };
    eprintln!("bench: loading {}", report::clean_path(&path));
    let model = Model::load(&path).map_err(|source| BenchError::Load {
        path: path.clone(),
        source,
    })?;
    Ok((Arc::new(model), path))
}
