//! `--vs-llama-bench`: runs llama.cpp's `llama-bench` on the same model and
//! settings and reads its `-o json` output, so the two engines are compared
//! on one machine in one invocation.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocmforge_core::plan::KvTypes;
use serde::Deserialize;

use super::report::{test_name, BackendResult, TestResult, LLAMA_CPP};

#[derive(Debug, thiserror::Error)]
pub enum LlamaBenchError {
    #[error("{} does not exist or is not a file", .0.display())]
    Missing(PathBuf),
    #[error("cannot run {}: {source}", path.display())]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} failed ({status}): {stderr}", path.display())]
    Failed {
        path: PathBuf,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("cannot parse its JSON output: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("its JSON output has no results")]
    Empty,
}

/// The fields we read of one llama-bench JSON result; it writes many more.
#[derive(Debug, Deserialize)]
struct Row {
    n_prompt: usize,
    n_gen: usize,
    /// Absent from llama-bench builds older than its `-d`: depth 0.
    #[serde(default)]
    n_depth: usize,
    #[serde(default)]
    n_threads: usize,
    avg_ts: f64,
    stddev_ts: f64,
    #[serde(default)]
    samples_ts: Vec<f64>,
    #[serde(default)]
    cpu_info: String,
    #[serde(default)]
    gpu_info: String,
    #[serde(default)]
    backends: String,
}

pub struct Settings<'a> {
    pub model: &'a Path,
    pub n_prompt: &'a [usize],
    pub n_gen: &'a [usize],
    /// `-d`: passed on only when some depth is not 0, so a llama-bench
    /// older than the flag still runs the tests without one.
    pub n_depth: &'a [usize],
    /// `-ctk` / `-ctv`: passed on only when not f16 (llama-bench's
    /// default).
    pub kv_types: KvTypes,
    pub repetitions: u32,
    pub threads: &'a [usize],
}

/// A list as llama-bench takes it: `128,512`.
fn list(values: &[usize]) -> String {
    values
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The arguments after the binary.
pub fn args(s: &Settings) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["-m".into(), s.model.into()];
    let mut push = |flag: &str, value: String| args.extend([flag.into(), value.into()]);
    push("-p", list(s.n_prompt));
    push("-n", list(s.n_gen));
    if s.n_depth.iter().any(|&d| d > 0) {
        push("-d", list(s.n_depth));
    }
    if s.kv_types != KvTypes::default() {
        push("-ctk", s.kv_types.k.name().to_string());
        push("-ctv", s.kv_types.v.name().to_string());
    }
    push("-r", s.repetitions.to_string());
    push("-t", list(s.threads));
    push("-o", "json".to_string());
    args
}

pub fn run(binary: &Path, s: &Settings) -> Result<BackendResult, LlamaBenchError> {
    let output = Command::new(binary)
        .args(args(s))
        .output()
        .map_err(|source| LlamaBenchError::Spawn {
            path: binary.to_path_buf(),
            source,
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // Its last line is the error; the rest is model-loading chatter.
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(LlamaBenchError::Failed {
            path: binary.to_path_buf(),
            status: output.status,
            stderr: last.unwrap_or("no message").trim().to_string(),
        });
    }
    parse(&String::from_utf8_lossy(&output.stdout))
}

/// llama-bench's `-o json` (an array of result objects) as the `llama.cpp`
/// backend's results.
pub fn parse(json: &str) -> Result<BackendResult, LlamaBenchError> {
    let rows: Vec<Row> = serde_json::from_str(json)?;
    let first = rows.first().ok_or(LlamaBenchError::Empty)?;
    let hardware = if first.gpu_info.trim().is_empty() {
        first.cpu_info.trim()
    } else {
        first.gpu_info.trim()
    };
    let device = match (first.backends.trim(), hardware) {
        ("", "") => "llama-bench".to_string(),
        ("", hw) => hw.to_string(),
        (b, "") => b.to_string(),
        (b, hw) => format!("{b}: {hw}"),
    };
    let tests = rows
        .into_iter()
        .map(|r| TestResult {
            mean: r.avg_ts,
            sd: r.stddev_ts,
            n_depth: r.n_depth,
            ..TestResult::from_samples(
                test_name(r.n_prompt, r.n_gen, r.n_depth),
                r.n_prompt,
                r.n_gen,
                r.n_threads,
                r.samples_ts,
            )
        })
        .collect();
    Ok(BackendResult {
        backend: LLAMA_CPP.to_string(),
        device: Some(device),
        reason: None,
        tests,
        launches: None,
    })
}
