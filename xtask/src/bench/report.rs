//! The results and their three renderings: a markdown table for people, CSV
//! for spreadsheets, JSON (with every sample) for scripts.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use rocmforge_core::model::Model;
use serde::{Deserialize, Serialize};

/// The backend name rows from `--vs-llama-bench` carry.
pub const LLAMA_CPP: &str = "llama.cpp";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Md,
    Csv,
    Json,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub path: String,
    /// llama-bench's model column, e.g. `qwen2 494M Q4_0`.
    pub desc: String,
    /// Bytes of tensor data (what llama-bench calls size: no header).
    pub size_bytes: u64,
    pub n_params: u64,
}

impl ModelInfo {
    pub fn of(model: &Model, path: &Path) -> ModelInfo {
        let tensors = model.file.tensors();
        let size_bytes = tensors.iter().map(|t| t.n_bytes).sum();
        let n_params = tensors.iter().map(|t| t.n_elements()).sum();
        // The type holding most bytes names the file, as the quantization
        // it was made with (a few tensors always stay F32 or fall back).
        let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
        for t in tensors {
            *by_type.entry(t.ty.name()).or_default() += t.n_bytes;
        }
        let ty = by_type
            .iter()
            .max_by_key(|(_, bytes)| **bytes)
            .map_or("?", |(name, _)| name);
        ModelInfo {
            path: path.display().to_string(),
            desc: format!(
                "{} {} {ty}",
                model.config.arch.name(),
                short_count(n_params)
            ),
            size_bytes,
            n_params,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    /// `pp512`, `tg128`, or `pp512+tg128` for a llama-bench combined test.
    pub test: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    /// Tokens per second.
    pub mean: f64,
    pub sd: f64,
    pub samples: Vec<f64>,
}

impl TestResult {
    pub fn from_samples(test: String, n_prompt: usize, n_gen: usize, samples: Vec<f64>) -> Self {
        let (mean, sd) = mean_sd(&samples);
        TestResult {
            test,
            n_prompt,
            n_gen,
            mean,
            sd,
            samples,
        }
    }
}

/// Mean and sample standard deviation (n − 1, as llama-bench); sd is 0 for
/// fewer than two samples.
pub fn mean_sd(samples: &[f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    if samples.len() < 2 {
        return (mean, 0.0);
    }
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendResult {
    pub backend: String,
    pub device: Option<String>,
    /// Why it did not run; `None` when it did.
    pub reason: Option<String>,
    pub tests: Vec<TestResult>,
}

impl BackendResult {
    pub fn unavailable(name: &str, reason: String) -> BackendResult {
        BackendResult {
            backend: name.to_string(),
            device: None,
            reason: Some(reason),
            tests: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// `None` when no backend needed the model (all were absent).
    pub model: Option<ModelInfo>,
    pub backends: Vec<BackendResult>,
}

impl Report {
    pub fn render(&self, format: OutputFormat) -> String {
        match format {
            OutputFormat::Md => self.markdown(),
            OutputFormat::Csv => self.csv(),
            OutputFormat::Json => {
                // Only strings, numbers and vectors: serialisation cannot fail.
                let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
                s.push('\n');
                s
            }
        }
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        for b in &self.backends {
            let line = match (&b.reason, &b.device) {
                (Some(reason), _) => reason.as_str(),
                (None, Some(device)) => device.as_str(),
                (None, None) => "",
            };
            let _ = writeln!(out, "backend {}: {line}", b.backend);
        }
        let rows: Vec<(&BackendResult, &TestResult)> = self
            .backends
            .iter()
            .flat_map(|b| b.tests.iter().map(move |t| (b, t)))
            .collect();
        let Some(model) = self.model.as_ref().filter(|_| !rows.is_empty()) else {
            return out;
        };
        out.push_str("\n| model | size | params | backend | device | test | t/s |\n");
        out.push_str("| --- | ---: | ---: | --- | --- | ---: | ---: |\n");
        for (b, t) in rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {:.2} ± {:.2} |",
                model.desc,
                size(model.size_bytes),
                params(model.n_params),
                b.backend,
                b.device.as_deref().unwrap_or(""),
                t.test,
                t.mean,
                t.sd
            );
        }
        let ran: Vec<&BackendResult> = self
            .backends
            .iter()
            .filter(|b| !b.tests.is_empty() && b.backend != LLAMA_CPP)
            .collect();
        if ran.len() >= 2 {
            let base = ran[0];
            let _ = writeln!(
                out,
                "\nspeed relative to {} (t/s ÷ its t/s):\n",
                base.backend
            );
            ratio_table(&mut out, &ran, base);
        }
        if let Some(llama) = self
            .backends
            .iter()
            .find(|b| b.backend == LLAMA_CPP && !b.tests.is_empty())
        {
            out.push_str("\nrocmforge ÷ llama.cpp (t/s ratio):\n\n");
            ratio_table(&mut out, &ran, llama);
        }
        out
    }

    fn csv(&self) -> String {
        let mut out = String::from(
            "model,size_bytes,n_params,backend,device,test,n_prompt,n_gen,mean_ts,sd_ts,reason\n",
        );
        let model = match &self.model {
            Some(m) => [
                csv_field(&m.desc),
                m.size_bytes.to_string(),
                m.n_params.to_string(),
            ]
            .join(","),
            None => ",,".to_string(),
        };
        for b in &self.backends {
            let device = csv_field(b.device.as_deref().unwrap_or(""));
            let backend = csv_field(&b.backend);
            if let Some(reason) = &b.reason {
                let _ = writeln!(out, "{model},{backend},{device},,,,,,{}", csv_field(reason));
            }
            for t in &b.tests {
                let _ = writeln!(
                    out,
                    "{model},{backend},{device},{},{},{},{:.4},{:.4},",
                    csv_field(&t.test),
                    t.n_prompt,
                    t.n_gen,
                    t.mean,
                    t.sd
                );
            }
        }
        out
    }
}

/// Rows: `backends`; columns: `base`'s tests; cells: mean ÷ base's mean.
fn ratio_table(out: &mut String, backends: &[&BackendResult], base: &BackendResult) {
    let tests: Vec<&TestResult> = base.tests.iter().collect();
    let header: Vec<&str> = tests.iter().map(|t| t.test.as_str()).collect();
    let _ = writeln!(out, "| backend | {} |", header.join(" | "));
    let _ = writeln!(out, "| --- |{}", " ---: |".repeat(tests.len()));
    for b in backends {
        let cells: Vec<String> = tests
            .iter()
            .map(|bt| match b.tests.iter().find(|t| t.test == bt.test) {
                Some(t) if bt.mean > 0.0 => format!("{:.2}", t.mean / bt.mean),
                _ => "-".to_string(),
            })
            .collect();
        let _ = writeln!(out, "| {} | {} |", b.backend, cells.join(" | "));
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let b = bytes as f64;
    if b >= 1024.0 * MIB {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    } else {
        format!("{:.2} MiB", b / MIB)
    }
}

pub fn params(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else {
        format!("{:.2} K", n / 1e3)
    }
}

/// `494032768` → `494M`, for the model description.
fn short_count(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.1}B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.0}M", n / 1e6)
    } else {
        format!("{:.0}K", n / 1e3)
    }
}
