use std::path::Path;

use super::backends::{self, BackendChoice, Resolved};
use super::llama_bench::{self, LlamaBenchError};
use super::llama_schema::{self, RunInfo};
use super::measure::TokenStream;
use super::measure::{Plan, Test};
use super::model_source;
use super::report::{self, BackendResult, ModelInfo, OutputFormat, Printer, TestResult};
use rocmforge_genmodel::presets;

/// A llama-bench `-o json` result as it prints it (fields trimmed to a
/// representative subset, values hand-written).
const LLAMA_BENCH_JSON: &str = r#"[
  {
    "build_commit": "abc1234", "build_number": 4000,
    "cpu_info": "AMD EPYC 7B13", "gpu_info": "", "backends": "CPU",
    "model_filename": "m.gguf", "model_type": "qwen2 1B Q4_0",
    "model_size": 352970752, "model_n_params": 494032768,
    "n_batch": 2048, "n_threads": 2, "n_prompt": 512, "n_gen": 0,
    "avg_ns": 5000000000, "stddev_ns": 10000000,
    "avg_ts": 102.5, "stddev_ts": 2.5,
    "samples_ns": [5000000000, 5100000000, 4900000000],
    "samples_ts": [100.0, 102.5, 105.0]
  },
  {
    "cpu_info": "AMD EPYC 7B13", "gpu_info": "", "backends": "CPU",
    "n_prompt": 0, "n_gen": 128,
    "avg_ts": 20.0, "stddev_ts": 0.5,
    "samples_ts": [19.5, 20.0, 20.5]
  },
  {
    "cpu_info": "AMD EPYC 7B13", "gpu_info": "", "backends": "CPU",
    "n_prompt": 512, "n_gen": 128, "avg_ts": 60.0, "stddev_ts": 1.0,
    "samples_ts": [60.0]
  }
]"#;

#[test]
fn mean_and_sample_sd() {
    let (mean, sd) = report::mean_sd(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(mean, 2.5);
    // Σ(x−2.5)² = 5, over n−1 = 3.
    assert!((sd - (5.0f64 / 3.0).sqrt()).abs() < 1e-12, "{sd}");
    assert_eq!(report::mean_sd(&[7.0]), (7.0, 0.0));
    assert_eq!(report::mean_sd(&[]), (0.0, 0.0));
}

#[test]
fn parses_llama_bench_json() {
    let r = llama_bench::parse(LLAMA_BENCH_JSON).unwrap();
    assert_eq!(r.backend, "llama.cpp");
    assert_eq!(r.device.as_deref(), Some("CPU: AMD EPYC 7B13"));
    let names: Vec<&str> = r.tests.iter().map(|t| t.test.as_str()).collect();
    assert_eq!(names, ["pp512", "tg128", "pp512+tg128"]);
    assert_eq!((r.tests[0].n_prompt, r.tests[0].n_gen), (512, 0));
    assert_eq!((r.tests[0].mean, r.tests[0].sd), (102.5, 2.5));
    assert_eq!(r.tests[1].samples, [19.5, 20.0, 20.5]);
}

#[test]
fn rejects_bad_llama_bench_json() {
    assert!(matches!(
        llama_bench::parse("[]"),
        Err(LlamaBenchError::Empty)
    ));
    assert!(matches!(
        llama_bench::parse("main: error: failed to load model"),
        Err(LlamaBenchError::Parse(_))
    ));
    // A result without its throughput is not a result.
    assert!(matches!(
        llama_bench::parse(r#"[{"n_prompt": 1, "n_gen": 0}]"#),
        Err(LlamaBenchError::Parse(_))
    ));
}

#[test]
fn backend_names() {
    assert_eq!(
        backends::parse_choice("CPU"),
        Ok(BackendChoice::One(Resolved::Registry("cpu")))
    );
    assert_eq!(
        backends::parse_choice("hip"),
        Ok(BackendChoice::One(Resolved::Registry("rocm")))
    );
    assert_eq!(backends::parse_choice("all"), Ok(BackendChoice::All));
    let err = backends::parse_choice("cuda").unwrap_err();
    assert!(
        err.contains("unknown backend 'cuda'") && err.contains("vulkan"),
        "{err}"
    );
}

#[test]
fn all_expands_without_repeats() {
    let cpu = BackendChoice::One(Resolved::Registry("cpu"));
    let targets = backends::resolve(&[cpu, BackendChoice::All]);
    let names: Vec<(&str, bool)> = targets
        .iter()
        .map(|t| (t.backend.name(), t.by_name))
        .collect();
    // The named one first; then the rest of the registry and the planned
    // backends this build lacks, in whatever order the registry has them.
    assert_eq!(names[0], ("cpu", true));
    let mut rest = names[1..].to_vec();
    rest.sort();
    assert_eq!(rest, [("rocm", false), ("vulkan", false)]);
}

fn result(backend: &str, pp: f64, tg: f64) -> BackendResult {
    // pp8 takes 8 tokens, tg4 4: nanoseconds for the given rates.
    let ns = |tokens: f64, rate: f64| (1e9 * tokens / rate).round() as u64;
    BackendResult {
        backend: backend.to_string(),
        device: Some(format!("{backend} device, rev 2")),
        reason: None,
        tests: vec![
            TestResult::from_ns(
                "pp8".into(),
                8,
                0,
                2,
                vec![ns(8.0, pp - 1.0), ns(8.0, pp), ns(8.0, pp + 1.0)],
            ),
            TestResult::from_ns("tg4".into(), 0, 4, 2, vec![ns(4.0, tg), ns(4.0, tg)]),
        ],
    }
}

fn sample_model() -> ModelInfo {
    ModelInfo {
        path: "m.gguf".into(),
        desc: "qwen2 494M Q4_0".into(),
        llama_type: "qwen2 494M Q4_0".into(),
        size_bytes: 3 << 19,
        n_params: 494_030_000,
    }
}

fn sample_backends() -> Vec<BackendResult> {
    vec![
        result("cpu", 100.0, 10.0),
        BackendResult::unavailable("vulkan", "not built into this binary".into()),
        result("rocm", 400.0, 25.0),
        result("llama.cpp", 50.0, 20.0),
    ]
}

fn run_info() -> RunInfo {
    RunInfo {
        build_commit: "abc1234".into(),
        build_number: 42,
        cpu_info: "AMD EPYC 7B13".into(),
        n_batch: 2048,
        n_ubatch: 512,
        n_gpu_layers: -1,
        main_gpu: 0,
        n_cpu_moe: 0,
    }
}

/// What the bench prints for `backends`, driven through the [`Printer`]
/// as a run drives it: the preamble, then each backend's rows (or its
/// failure), then the end.
fn render(format: OutputFormat, backends: &[BackendResult]) -> String {
    let mut out = Vec::new();
    let mut p = Printer::new(format, Some(sample_model()), run_info(), &mut out);
    p.preamble(backends);
    p.begin();
    for b in backends {
        match &b.reason {
            Some(_) => p.failed(b),
            None => {
                for t in &b.tests {
                    p.row(&b.backend, b.device.as_deref().unwrap_or(""), t);
                }
            }
        }
    }
    p.end(backends);
    String::from_utf8(out).unwrap()
}

#[test]
fn markdown_layout() {
    let md = render(OutputFormat::Md, &sample_backends());
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(lines[0], "backend cpu: cpu device, rev 2");
    assert_eq!(lines[1], "backend vulkan: not built into this binary");
    assert_eq!(lines[4], "");
    assert_eq!(
        lines[5],
        "| model | size | params | backend | device | threads | test | t/s |"
    );
    let rows: Vec<&str> = lines[7..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .copied()
        .collect();
    assert_eq!(rows.len(), 6, "{md}");
    for row in &rows {
        assert_eq!(row.matches('|').count(), 9, "{row}");
    }
    assert_eq!(
        rows[0],
        "| qwen2 494M Q4_0 | 1.50 MiB | 494.03 M | cpu | cpu device, rev 2 | 2 | pp8 | 100.00 ± 1.00 |"
    );
    // rocm ÷ cpu: 400/100 and 25/10; rocmforge ÷ llama.cpp: 100/50, 10/20.
    assert!(md.contains("| rocm | 4.00 | 2.50 |"), "{md}");
    assert!(md.contains("| cpu | 2.00 | 0.50 |"), "{md}");
    assert!(md.contains("| rocm | 8.00 | 1.25 |"), "{md}");
}

#[test]
fn a_backend_failing_after_it_started_is_named_after_the_table() {
    let mut backends = sample_backends();
    backends[2].tests.clear();
    let mut out = Vec::new();
    let mut p = Printer::new(OutputFormat::Md, Some(sample_model()), run_info(), &mut out);
    p.preamble(&backends);
    p.begin();
    backends[2].reason = Some("device lost".into());
    p.end(&backends);
    let md = String::from_utf8(out).unwrap();
    assert!(md.starts_with("backend cpu:"), "{md}");
    assert!(md.contains("\nbackend rocm: failed: device lost\n"), "{md}");
}

#[test]
fn no_ratio_table_for_one_backend() {
    let mut backends = sample_backends();
    backends.truncate(2);
    let md = render(OutputFormat::Md, &backends);
    assert!(!md.contains("relative") && !md.contains("÷"), "{md}");
}

#[test]
fn ratios_pair_equal_thread_counts() {
    let mut cpu = result("cpu", 100.0, 10.0);
    let mut four = result("cpu", 300.0, 20.0);
    for t in &mut four.tests {
        t.n_threads = 4;
    }
    cpu.tests.append(&mut four.tests);
    let mut rocm = result("rocm", 400.0, 40.0);
    rocm.tests[0].n_threads = 4;
    let md = render(OutputFormat::Md, &[cpu, rocm]);
    assert!(
        md.contains("| backend | pp8 t2 | tg4 t2 | pp8 t4 | tg4 t4 |"),
        "{md}"
    );
    // rocm's pp8 ran with 4 threads: 400/300; its tg4 with 2: 40/10.
    assert!(md.contains("| rocm | - | 4.00 | 1.33 | - |"), "{md}");
}

#[test]
fn csv_rows() {
    let csv = render(OutputFormat::Csv, &sample_backends());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "model,size_bytes,n_params,backend,device,n_threads,test,n_prompt,n_gen,mean_ts,sd_ts,reason"
    );
    // 3 backends × 2 tests, plus vulkan's reason row.
    assert_eq!(lines.len(), 1 + 7);
    assert_eq!(
        lines[1],
        "qwen2 494M Q4_0,1572864,494030000,cpu,\"cpu device, rev 2\",2,pp8,8,0,100.0000,1.0000,"
    );
    assert!(lines[3].starts_with("qwen2 494M Q4_0,1572864,494030000,vulkan,,,"));
}

/// The keys compare-llama-bench.py requires of every row
/// (`LLAMA_BENCH_KEY_PROPERTIES` plus build_commit, test_time, avg_ts), and
/// its other database fields, from llama.cpp's scripts/compare-llama-bench.py.
const LLAMA_BENCH_REQUIRED: &[&str] = &[
    "cpu_info",
    "gpu_info",
    "backends",
    "n_gpu_layers",
    "n_cpu_moe",
    "tensor_buft_overrides",
    "model_filename",
    "model_type",
    "n_batch",
    "n_ubatch",
    "embeddings",
    "cpu_mask",
    "cpu_strict",
    "poll",
    "n_threads",
    "type_k",
    "type_v",
    "load_mode",
    "no_kv_offload",
    "split_mode",
    "main_gpu",
    "tensor_split",
    "flash_attn",
    "n_prompt",
    "n_gen",
    "n_depth",
    "fit_target",
    "fit_min_ctx",
    "build_commit",
    "test_time",
    "avg_ts",
    "build_number",
    "model_size",
    "model_n_params",
    "no_op_offload",
    "avg_ns",
    "stddev_ns",
    "stddev_ts",
];

#[test]
fn json_rows_use_llama_bench_schema() {
    let json = render(OutputFormat::Json, &sample_backends());
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    // cpu and rocm, two tests each; llama.cpp's own rows and vulkan's
    // reason are not llama-bench rows.
    assert_eq!(rows.len(), 4, "{json}");
    for row in &rows {
        for key in LLAMA_BENCH_REQUIRED {
            assert!(row.get(key).is_some(), "{key} missing: {row}");
        }
    }
    let pp = &rows[0];
    assert_eq!(pp["backends"], "CPU");
    assert_eq!(pp["gpu_info"], "");
    assert_eq!(pp["model_filename"], "m.gguf");
    assert_eq!(
        (pp["n_prompt"].as_u64(), pp["n_gen"].as_u64()),
        (Some(8), Some(0))
    );
    assert_eq!(pp["n_threads"], 2);
    assert_eq!(pp["samples_ns"].as_array().unwrap().len(), 3);
    let ts: Vec<f64> = serde_json::from_value(pp["samples_ts"].clone()).unwrap();
    assert!((ts[1] - 100.0).abs() < 1e-6, "{ts:?}");
    assert!((pp["avg_ts"].as_f64().unwrap() - 100.0).abs() < 1e-6);
    // avg_ns is the mean of the nanoseconds: 8 tokens at 99, 100, 101 t/s.
    let want_ns = (8e9 / 99.0 + 8e9 / 100.0 + 8e9 / 101.0) / 3.0;
    assert!(
        (pp["avg_ns"].as_f64().unwrap() - want_ns).abs() <= 1.0,
        "{pp}"
    );
    assert_eq!(rows[2]["backends"], "ROCm");
    assert_eq!(rows[2]["gpu_info"], "rocm device, rev 2");

    let jsonl = render(OutputFormat::Jsonl, &sample_backends());
    let lines: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, rows);
}

#[test]
fn test_time_is_rfc3339_utc() {
    assert_eq!(llama_schema::rfc3339(0), "1970-01-01T00:00:00Z");
    // 2024-02-29 12:34:56 UTC, a leap day.
    assert_eq!(llama_schema::rfc3339(1_709_210_096), "2024-02-29T12:34:56Z");
    assert_eq!(llama_schema::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
}

#[test]
fn tests_run_in_llama_bench_order() {
    let plan = Plan {
        n_prompts: vec![128, 0, 512],
        n_gens: vec![16, 32],
        repetitions: 1,
        n_batch: 2048,
        n_ubatch: 512,
        n_cpu_moe: 0,
    };
    assert_eq!(
        plan.tests(),
        [
            Test::Prompt(128),
            Test::Prompt(512),
            Test::Generate(16),
            Test::Generate(32)
        ]
    );
}

#[test]
fn paths_print_clean() {
    assert_eq!(
        report::clean_path(Path::new("/src/rocmforge/xtask/../target/./models/m.gguf")),
        "/src/rocmforge/target/models/m.gguf"
    );
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(report::clean_path(&cwd.join("a/../b/m.gguf")), "b/m.gguf");
    assert_eq!(report::clean_path(Path::new("../m.gguf")), "../m.gguf");
}

#[test]
fn human_sizes() {
    assert_eq!(report::size(284_082_340), "270.92 MiB");
    assert_eq!(report::size(3 << 30), "3.00 GiB");
    assert_eq!(report::params(494_032_768), "494.03 M");
    assert_eq!(report::params(1_235_814_400), "1.24 B");
}

#[test]
fn random_tokens_stay_in_vocab() {
    let mut a = TokenStream::new(10);
    let ids: Vec<u32> = (0..1000).map(|_| a.next_id()).collect();
    assert!(ids.iter().all(|&id| id < 10));
    // Every id is drawn: the stream is not stuck on a few values.
    assert!((0..10).all(|id| ids.contains(&id)));
    let mut b = TokenStream::new(10);
    assert_eq!(ids[0], b.next_id());
}

#[test]
fn model_info_of_reference_fixture() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/reference/tiny-qwen2-Q8_0.gguf");
    let model = rocmforge_core::model::Model::load(&path).unwrap();
    let info = ModelInfo::of(&model, &path);
    let file_len = std::fs::metadata(&path).unwrap().len();
    // The data section holds every tensor, each padded to the alignment.
    let data = file_len - model.file.data_offset();
    let padding = model.file.tensors().len() as u64 * model.file.alignment();
    assert!(
        info.size_bytes <= data && info.size_bytes + padding >= data,
        "{info:?}"
    );
    let c = &model.config;
    // The embedding alone is n_vocab × n_embd parameters.
    assert!(info.n_params > (c.n_vocab * c.n_embd) as u64);
    assert!(
        info.desc.starts_with("qwen2 ") && info.desc.ends_with(" Q8_0"),
        "{}",
        info.desc
    );
}

#[test]
fn model_label_is_the_file_type_not_the_majority_tensor_type() {
    // tiny-llama is a Q4_K_M file: mostly Q4_K tensors, some Q6_K.
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/reference/tiny-llama-Q4_K_M.gguf");
    let model = rocmforge_core::model::Model::load(&path).unwrap();
    let info = ModelInfo::of(&model, &path);
    assert!(
        info.desc.starts_with("llama ") && info.desc.ends_with(" Q4_K_M"),
        "{}",
        info.desc
    );
    assert!(
        info.llama_type.ends_with(" Q4_K - Medium"),
        "{}",
        info.llama_type
    );
    assert!(!info.path.contains(".."), "{}", info.path);
}

#[test]
fn cached_model_name() {
    let preset = presets::find("qwen2-0.5b").unwrap();
    let ty = rocmforge_core::quant::QuantType::from_name("Q4_0").unwrap();
    assert_eq!(
        model_source::cached_path(Path::new("/t"), preset, ty),
        Path::new("/t/models/qwen2-0.5b-Q4_0.gguf")
    );
}
