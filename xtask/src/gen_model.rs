//! `cargo xtask gen-model`: the command line over `rocmforge-genmodel`.

use std::path::PathBuf;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rocmforge_core::quant::QuantType;
use rocmforge_genmodel::model::{layout, tokenizer_dir, write_file_with, ModelPlan, Quantizer};
use rocmforge_genmodel::presets::{self, Preset};

pub use rocmforge_genmodel::model::{GenError, DEFAULT_SEED};

#[derive(Debug, clap::Args)]
pub struct GenModelArgs {
    /// Model shape: tiny-llama, tiny-qwen2, tiny-qwen3 (test-sized), or
    /// qwen2-0.5b, qwen3-0.6b, llama3-1b, llama2-7b (real shapes).
    #[arg(long, value_name = "NAME", value_parser = presets::parse_preset)]
    pub preset: &'static Preset,
    /// Storage type of the 2-D weights and embeddings (F32, F16, BF16, Q4_0,
    /// Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4). Norms, biases and
    /// rope_freqs stay F32; rows that are not whole blocks fall back as
    /// llama-quantize does.
    #[arg(long = "type", value_name = "TYPE", value_parser = layout::parse_weight_type)]
    pub ty: QuantType,
    /// Output file; written as PATH.tmp.PID.N and renamed when complete.
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
    /// Seed of the weights; the same seed gives the same bytes.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Q4_K scales from each sub-block's min and max, without ggml's
    /// search: a valid file of the same speed in about a fifteenth of the
    /// time (for benchmark models of tens of GiB), with values that differ
    /// from what llama-quantize writes.
    #[arg(long)]
    pub fast_kquants: bool,
}

/// The `gen-model` command, with a progress bar and a summary line.
pub fn run(args: &GenModelArgs) -> Result<(), GenError> {
    let start = Instant::now();
    let plan = ModelPlan::new(args.preset, args.ty, &tokenizer_dir())?;
    let total = plan.tensor_bytes();
    let progress = ProgressBar::new(total).with_style(
        ProgressStyle::with_template(
            "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta} {msg}",
        )
        .expect("the template is valid"),
    );
    let quantizer = if args.fast_kquants {
        Quantizer::FastKQuants
    } else {
        Quantizer::Reference
    };
    let written = write_file_with(
        args.preset,
        args.ty,
        args.seed,
        &args.out,
        &progress,
        quantizer,
    );
    progress.finish_and_clear();
    // Reported once the file exists, so a failure stays one line.
    written?;
    for note in plan.fallback_notes() {
        eprintln!("fallback: {note}");
    }
    let size = std::fs::metadata(&args.out).map_or(0, |m| m.len());
    eprintln!(
        "wrote {}: {} ({} {}, seed {}, {} tensors) in {:.1} s",
        args.out.display(),
        mib(size),
        args.preset.name,
        args.ty,
        args.seed,
        plan.tensors.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
