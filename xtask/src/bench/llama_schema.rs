//! Our results as llama-bench's `-o json` / `-o jsonl` rows: the same field
//! names, order and types (llama-bench.cpp's `test::get_fields`, plus
//! `samples_ns` and `samples_ts`), so its scripts (`compare-llama-bench.py`,
//! which requires every key property) read our results as they read its own.
//!
//! Fields that name llama.cpp knobs we do not have (CPU masks, polling,
//! tensor overrides, split modes) carry the value llama-bench reports when
//! run without the flag: that is the configuration our run corresponds to,
//! and rows compare only where every key property is equal.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::report::{ModelInfo, TestResult};

/// What every row of a run shares.
#[derive(Clone, Debug, PartialEq)]
pub struct RunInfo {
    pub build_commit: String,
    pub build_number: u64,
    pub cpu_info: String,
    pub n_batch: usize,
    pub n_ubatch: usize,
    /// As given with `-ngl` (accepted, not acted on: GPU backends hold every
    /// layer); llama-bench's default -1 otherwise.
    pub n_gpu_layers: i64,
    pub main_gpu: usize,
    /// `--n-cpu-moe` (0 unless given).
    pub n_cpu_moe: usize,
    /// The KV cache types, by llama.cpp's names (`-ctk` / `-ctv`).
    pub type_k: &'static str,
    pub type_v: &'static str,
}

impl RunInfo {
    /// The build from git (the commit checked out in this workspace and its
    /// commit count, as llama.cpp's build number is), the CPU from
    /// `/proc/cpuinfo`; "unknown" and 0 where they cannot be read.
    pub fn collect(n_batch: usize, n_ubatch: usize, n_gpu_layers: i64, main_gpu: usize) -> RunInfo {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let git = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(&root)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        RunInfo {
            build_commit: git(&["rev-parse", "--short=7", "HEAD"])
                .unwrap_or_else(|| "unknown".into()),
            build_number: git(&["rev-list", "--count", "HEAD"])
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            cpu_info: cpu_name(),
            n_batch,
            n_ubatch,
            n_gpu_layers,
            main_gpu,
            n_cpu_moe: 0,
            type_k: "f16",
            type_v: "f16",
        }
    }
}

/// The CPU's brand string, as llama-bench's `cpu_info`.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// llama.cpp's name of the ggml backend that does what ours does.
pub fn llama_backend_name(backend: &str) -> &str {
    match backend {
        "cpu" => "CPU",
        "vulkan" => "Vulkan",
        // ggml's HIP build registers its backend as ROCm.
        "rocm" => "ROCm",
        other => other,
    }
}

/// One row, in llama-bench's field order.
#[derive(Debug, Serialize)]
pub struct Row<'a> {
    build_commit: &'a str,
    build_number: u64,
    cpu_info: &'a str,
    gpu_info: &'a str,
    backends: &'a str,
    model_filename: &'a str,
    model_type: &'a str,
    model_size: u64,
    model_n_params: u64,
    n_batch: usize,
    n_ubatch: usize,
    n_threads: usize,
    cpu_mask: &'static str,
    cpu_strict: bool,
    poll: u32,
    type_k: &'static str,
    type_v: &'static str,
    n_gpu_layers: i64,
    n_cpu_moe: u32,
    split_mode: &'static str,
    main_gpu: usize,
    no_kv_offload: bool,
    flash_attn: i32,
    devices: &'static str,
    tensor_split: &'static str,
    tensor_buft_overrides: &'static str,
    load_mode: &'static str,
    lazy_mode: &'static str,
    embeddings: bool,
    no_op_offload: u32,
    no_host: bool,
    repack: bool,
    fit_target: u64,
    fit_min_ctx: u32,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    test_time: &'a str,
    avg_ns: u64,
    stddev_ns: u64,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ns: &'a [u64],
    samples_ts: &'a [f64],
}

pub fn row<'a>(
    run: &'a RunInfo,
    model: &'a ModelInfo,
    backend: &'a str,
    device: &'a str,
    t: &'a TestResult,
) -> Row<'a> {
    let (avg_ns, stddev_ns) = mean_sd_ns(&t.samples_ns);
    Row {
        build_commit: &run.build_commit,
        build_number: run.build_number,
        cpu_info: &run.cpu_info,
        gpu_info: if backend == "cpu" { "" } else { device },
        backends: llama_backend_name(backend),
        model_filename: &model.path,
        model_type: &model.llama_type,
        model_size: model.size_bytes,
        model_n_params: model.n_params,
        n_batch: run.n_batch,
        n_ubatch: run.n_ubatch,
        n_threads: t.n_threads,
        cpu_mask: "0x0",
        cpu_strict: false,
        poll: 50,
        type_k: run.type_k,
        type_v: run.type_v,
        n_gpu_layers: run.n_gpu_layers,
        n_cpu_moe: run.n_cpu_moe as u32,
        split_mode: "layer",
        main_gpu: run.main_gpu,
        no_kv_offload: false,
        // llama-bench's default, "auto".
        flash_attn: -1,
        devices: "auto",
        tensor_split: "0.00",
        tensor_buft_overrides: "none",
        load_mode: "auto",
        lazy_mode: "auto",
        embeddings: false,
        no_op_offload: 0,
        no_host: false,
        repack: true,
        fit_target: 0,
        fit_min_ctx: 0,
        n_prompt: t.n_prompt,
        n_gen: t.n_gen,
        n_depth: t.n_depth,
        test_time: &t.started,
        avg_ns,
        stddev_ns,
        avg_ts: t.mean,
        stddev_ts: t.sd,
        samples_ns: &t.samples_ns,
        samples_ts: &t.samples,
    }
}

/// Mean and sample standard deviation of nanoseconds, rounded down to
/// integers as llama-bench's `avg` and `stdev` of `uint64_t` are.
fn mean_sd_ns(samples: &[u64]) -> (u64, u64) {
    let as_f64: Vec<f64> = samples.iter().map(|&ns| ns as f64).collect();
    let (mean, sd) = super::report::mean_sd(&as_f64);
    (mean as u64, sd as u64)
}

/// Now, as llama-bench's `test_time`: RFC 3339 in UTC, to the second.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (days to a civil
/// date by Howard Hinnant's `civil_from_days`).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
