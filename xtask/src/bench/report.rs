//! The results and their renderings: a markdown table for people, CSV for
//! spreadsheets, and llama-bench's JSON and JSONL (every sample) for its
//! scripts; each written row by row as the tests finish ([`Printer`]).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Component, Path, PathBuf};

use rocmforge_core::gguf::FileType;

use super::llama_schema::{self, RunInfo};
use rocmforge_core::model::Model;
use serde::{Deserialize, Serialize};

/// The backend name rows from `--vs-llama-bench` carry.
pub const LLAMA_CPP: &str = "llama.cpp";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Md,
    Csv,
    /// llama-bench's `-o json`: an array of its row objects.
    Json,
    /// llama-bench's `-o jsonl`: one row object per line.
    Jsonl,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The path as given or generated, relative to the current directory
    /// where it lies under it.
    pub path: String,
    /// llama-bench's model column with llama-quantize's type name, e.g.
    /// `llama 7B Q4_K_M`.
    pub desc: String,
    /// llama-bench's own `model_type`, with `llama_ftype_name`'s spelling
    /// (`llama 7B Q4_K - Medium`), so its scripts match our rows.
    pub llama_type: String,
    /// Bytes of tensor data (what llama-bench calls size: no header).
    pub size_bytes: u64,
    pub n_params: u64,
}

impl ModelInfo {
    pub fn of(model: &Model, path: &Path) -> ModelInfo {
        let tensors = model.file.tensors();
        let size_bytes = tensors.iter().map(|t| t.n_bytes).sum();
        let n_params = tensors.iter().map(|t| t.n_elements()).sum();
        let (name, llama_name) = match FileType::of(&model.file) {
            Some(ft) => (ft.name(), ft.llama_description().to_string()),
            None => {
                // No general.file_type: llama.cpp guesses from the type
                // holding most tensors and says it guessed; so do we, by
                // bytes.
                let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
                for t in tensors {
                    *by_type.entry(t.ty.name()).or_default() += t.n_bytes;
                }
                let ty = by_type
                    .iter()
                    .max_by_key(|(_, bytes)| **bytes)
                    .map_or("?", |(name, _)| name);
                (format!("{ty} (guessed)"), format!("(guessed) {ty}"))
            }
        };
        let head = format!("{} {}", model.config.arch.name(), short_count(n_params));
        ModelInfo {
            path: clean_path(path),
            desc: format!("{head} {name}"),
            llama_type: format!("{head} {llama_name}"),
            size_bytes,
            n_params,
        }
    }
}

/// `path` without `.` and `dir/..` detours, and relative to the current
/// directory when it lies under it: `target/models/m.gguf`, not
/// `/src/rocmforge/xtask/../target/models/m.gguf`.
pub fn clean_path(path: &Path) -> String {
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(clean.components().next_back(), Some(Component::Normal(_))) =>
            {
                clean.pop();
            }
            c => clean.push(c),
        }
    }
    let relative = std::env::current_dir()
        .ok()
        .and_then(|cwd| clean.strip_prefix(cwd).ok().map(Path::to_path_buf));
    match relative {
        Some(r) if !r.as_os_str().is_empty() => r.display().to_string(),
        _ => clean.display().to_string(),
    }
}

/// llama-bench's name of a test: `pp512`, `tg128`, `pp512+tg128` for a
/// combined one, each followed by ` @ d4096` when it ran after that many
/// tokens were in the cache (nothing for depth 0).
pub fn test_name(n_prompt: usize, n_gen: usize, n_depth: usize) -> String {
    let name = match (n_prompt, n_gen) {
        (p, 0) => format!("pp{p}"),
        (0, n) => format!("tg{n}"),
        (p, n) => format!("pp{p}+tg{n}"),
    };
    match n_depth {
        0 => name,
        d => format!("{name} @ d{d}"),
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    /// [`test_name`]: `pp512`, `tg128 @ d4096`, or `pp512+tg128` for a
    /// llama-bench combined test.
    pub test: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    /// Tokens in the KV cache before the timed part began (llama-bench's
    /// `-d`); 0 for a run from an empty cache.
    #[serde(default)]
    pub n_depth: usize,
    /// CPU threads the run used.
    pub n_threads: usize,
    /// Tokens per second.
    pub mean: f64,
    pub sd: f64,
    /// Tokens per second of each run.
    pub samples: Vec<f64>,
    /// Nanoseconds of each run (empty for llama-bench rows read back).
    pub samples_ns: Vec<u64>,
    /// When the test started, RFC 3339 (llama-bench's `test_time`).
    pub started: String,
}

impl TestResult {
    pub fn from_samples(
        test: String,
        n_prompt: usize,
        n_gen: usize,
        n_threads: usize,
        samples: Vec<f64>,
    ) -> Self {
        let (mean, sd) = mean_sd(&samples);
        TestResult {
            test,
            n_prompt,
            n_gen,
            n_depth: 0,
            n_threads,
            mean,
            sd,
            samples,
            samples_ns: Vec::new(),
            started: String::new(),
        }
    }

    /// From each run's nanoseconds; its tokens/s as llama-bench computes
    /// them, `1e9 · (n_prompt + n_gen) / ns`.
    pub fn from_ns(
        test: String,
        n_prompt: usize,
        n_gen: usize,
        n_threads: usize,
        samples_ns: Vec<u64>,
    ) -> Self {
        let tokens = (n_prompt + n_gen) as f64;
        let samples = samples_ns
            .iter()
            .map(|&ns| 1e9 * tokens / ns.max(1) as f64)
            .collect();
        TestResult {
            samples_ns,
            ..TestResult::from_samples(test, n_prompt, n_gen, n_threads, samples)
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
    /// Kernel launches a decode token replays, on a backend that launches
    /// any (issue 25's dispatches per token): a line at the markdown's end.
    pub launches: Option<usize>,
}

impl BackendResult {
    pub fn unavailable(name: &str, reason: String) -> BackendResult {
        BackendResult {
            backend: name.to_string(),
            device: None,
            reason: Some(reason),
            tests: Vec::new(),
            launches: None,
        }
    }
}

/// Writes the results as they come: the markdown table's and CSV's rows,
/// and llama-bench's JSON objects, each when its test finishes (llama-bench
/// does the same), so a long run shows progress and a killed one keeps
/// what it measured.
pub struct Printer<W: std::io::Write> {
    format: OutputFormat,
    model: Option<ModelInfo>,
    run: RunInfo,
    out: W,
    /// What the current call writes, passed to `out` at its end.
    buf: String,
    /// Backends the preamble named as running; a later failure of one is
    /// reported after the table.
    announced: Vec<String>,
    json_rows: usize,
}

impl<W: std::io::Write> Printer<W> {
    pub fn new(format: OutputFormat, model: Option<ModelInfo>, run: RunInfo, out: W) -> Self {
        Printer {
            format,
            model,
            run,
            out,
            buf: String::new(),
            announced: Vec::new(),
            json_rows: 0,
        }
    }

    /// Passes what the call wrote to `out` and flushes, so each row shows
    /// as it finishes. A closed stdout is not the printer's to report: the
    /// run goes on, and its exit status says how it ended.
    fn flush(&mut self) {
        let _ = self.out.write_all(self.buf.as_bytes());
        let _ = self.out.flush();
        self.buf.clear();
    }

    /// A KV cache other than llama-bench's default f16.
    fn typed_cache(&self) -> bool {
        (self.run.type_k, self.run.type_v) != ("f16", "f16")
    }

    /// Markdown: one line per backend, its device or why it cannot run.
    pub fn preamble(&mut self, backends: &[BackendResult]) {
        self.write_preamble(backends);
        self.flush();
    }

    fn write_preamble(&mut self, backends: &[BackendResult]) {
        for b in backends {
            if b.reason.is_none() {
                self.announced.push(b.backend.clone());
            }
            if self.format == OutputFormat::Md {
                let line = match (&b.reason, &b.device) {
                    (Some(reason), _) => reason.as_str(),
                    (None, Some(device)) => device.as_str(),
                    (None, None) => "",
                };
                let _ = writeln!(self.buf, "backend {}: {line}", b.backend);
            }
        }
    }

    /// The table's header, the CSV header, or JSON's opening bracket.
    pub fn begin(&mut self) {
        self.write_begin();
        self.flush();
    }

    fn write_begin(&mut self) {
        match self.format {
            OutputFormat::Md => {
                if self.model.is_some() && !self.announced.is_empty() {
                    // llama-bench adds the cache types' columns when they
                    // are not its default.
                    let (types, rule) = if self.typed_cache() {
                        (" type_k | type_v |", " --- | --- |")
                    } else {
                        ("", "")
                    };
                    let _ = write!(
                        self.buf,
                        "\n| model | size | params | backend | device | threads |{types} test | t/s |\n\
                         | --- | ---: | ---: | --- | --- | ---: |{rule} ---: | ---: |\n"
                    );
                }
            }
            OutputFormat::Csv => self.buf.push_str(
                "model,size_bytes,n_params,backend,device,n_threads,test,n_prompt,n_gen,n_depth,mean_ts,sd_ts,reason\n",
            ),
            OutputFormat::Json => self.buf.push('['),
            OutputFormat::Jsonl => {}
        }
    }

    /// A backend that did not run: CSV gives it a row with the reason; the
    /// markdown preamble already named it (or [`Printer::end`] will).
    pub fn failed(&mut self, b: &BackendResult) {
        self.write_failed(b);
        self.flush();
    }

    fn write_failed(&mut self, b: &BackendResult) {
        if self.format == OutputFormat::Csv {
            let _ = writeln!(
                self.buf,
                "{},{},{},,,,,,,,{}",
                self.csv_model(),
                csv_field(&b.backend),
                csv_field(b.device.as_deref().unwrap_or("")),
                csv_field(b.reason.as_deref().unwrap_or(""))
            );
        }
    }

    pub fn row(&mut self, backend: &str, device: &str, t: &TestResult) {
        self.write_row(backend, device, t);
        self.flush();
    }

    fn write_row(&mut self, backend: &str, device: &str, t: &TestResult) {
        let Some(model) = self.model.as_ref() else {
            return;
        };
        match self.format {
            OutputFormat::Md => {
                let types = if self.typed_cache() {
                    format!(" {} | {} |", self.run.type_k, self.run.type_v)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    self.buf,
                    "| {} | {} | {} | {backend} | {device} | {} |{types} {} | {:.2} ± {:.2} |",
                    model.desc,
                    size(model.size_bytes),
                    params(model.n_params),
                    t.n_threads,
                    t.test,
                    t.mean,
                    t.sd
                );
            }
            OutputFormat::Csv => {
                let _ = writeln!(
                    self.buf,
                    "{},{},{},{},{},{},{},{},{:.4},{:.4},",
                    self.csv_model(),
                    csv_field(backend),
                    csv_field(device),
                    t.n_threads,
                    csv_field(&t.test),
                    t.n_prompt,
                    t.n_gen,
                    t.n_depth,
                    t.mean,
                    t.sd
                );
            }
            // llama-bench's schema describes llama-bench's own runs; rows
            // read back from `--vs-llama-bench` are in its own output.
            OutputFormat::Json | OutputFormat::Jsonl if backend == LLAMA_CPP => {}
            OutputFormat::Json => {
                let row = llama_schema::row(&self.run, model, backend, device, t);
                // Only strings, numbers and arrays: serialisation cannot fail.
                let json = serde_json::to_string_pretty(&row).unwrap_or_default();
                let sep = if self.json_rows == 0 { "\n" } else { ",\n" };
                let _ = write!(self.buf, "{sep}{json}");
                self.json_rows += 1;
            }
            OutputFormat::Jsonl => {
                let row = llama_schema::row(&self.run, model, backend, device, t);
                let json = serde_json::to_string(&row).unwrap_or_default();
                let _ = writeln!(self.buf, "{json}");
            }
        }
    }

    /// Markdown: backends that failed after the preamble named them, then
    /// the ratio tables; JSON's closing bracket.
    pub fn end(&mut self, backends: &[BackendResult]) {
        self.write_end(backends);
        self.flush();
    }

    fn write_end(&mut self, backends: &[BackendResult]) {
        match self.format {
            OutputFormat::Md => self.markdown_end(backends),
            OutputFormat::Json => self.buf.push_str("\n]\n"),
            OutputFormat::Csv | OutputFormat::Jsonl => {}
        }
    }

    fn markdown_end(&mut self, backends: &[BackendResult]) {
        let late: Vec<&BackendResult> = backends
            .iter()
            .filter(|b| b.reason.is_some() && self.announced.contains(&b.backend))
            .collect();
        if !late.is_empty() {
            self.buf.push('\n');
        }
        for b in late {
            let _ = writeln!(
                self.buf,
                "backend {}: failed: {}",
                b.backend,
                b.reason.as_deref().unwrap_or("")
            );
        }
        let launched: Vec<&BackendResult> =
            backends.iter().filter(|b| b.launches.is_some()).collect();
        if !launched.is_empty() {
            self.buf.push('\n');
        }
        for b in launched {
            let n = b.launches.unwrap_or_default();
            let _ = writeln!(
                self.buf,
                "backend {}: {n} launches a decode token",
                b.backend
            );
        }
        let ran: Vec<&BackendResult> = backends
            .iter()
            .filter(|b| !b.tests.is_empty() && b.backend != LLAMA_CPP)
            .collect();
        if ran.len() >= 2 {
            let base = ran[0];
            let _ = writeln!(
                self.buf,
                "\nspeed relative to {} (t/s ÷ its t/s):\n",
                base.backend
            );
            ratio_table(&mut self.buf, &ran, base);
        }
        if let Some(llama) = backends
            .iter()
            .find(|b| b.backend == LLAMA_CPP && !b.tests.is_empty())
        {
            self.buf
                .push_str("\nrocmforge ÷ llama.cpp (t/s ratio):\n\n");
            ratio_table(&mut self.buf, &ran, llama);
        }
    }

    fn csv_model(&self) -> String {
        match &self.model {
            Some(m) => [
                csv_field(&m.desc),
                m.size_bytes.to_string(),
                m.n_params.to_string(),
            ]
            .join(","),
            None => ",,".to_string(),
        }
    }
}

/// Rows: `backends`; columns: `base`'s tests; cells: mean ÷ base's mean,
/// matched by test and thread count. Columns name the thread count when
/// the base ran with several.
fn ratio_table(out: &mut impl std::fmt::Write, backends: &[&BackendResult], base: &BackendResult) {
    let tests: Vec<&TestResult> = base.tests.iter().collect();
    let several_counts = tests.iter().any(|t| t.n_threads != tests[0].n_threads);
    let header: Vec<String> = tests
        .iter()
        .map(|t| match several_counts {
            true => format!("{} t{}", t.test, t.n_threads),
            false => t.test.clone(),
        })
        .collect();
    let _ = writeln!(out, "| backend | {} |", header.join(" | "));
    let _ = writeln!(out, "| --- |{}", " ---: |".repeat(tests.len()));
    for b in backends {
        let cells: Vec<String> = tests
            .iter()
            .map(|bt| {
                let same = |t: &&TestResult| {
                    t.test == bt.test && (!several_counts || t.n_threads == bt.n_threads)
                };
                match b.tests.iter().find(same) {
                    Some(t) if bt.mean > 0.0 => format!("{:.2}", t.mean / bt.mean),
                    _ => "-".to_string(),
                }
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
