use std::path::Path;

use super::backends::{self, BackendChoice, Resolved};
use super::llama_bench::{self, LlamaBenchError};
use super::llama_schema::{self, RunInfo};
use super::measure::TokenStream;
use super::measure::{Plan, Test};
use super::model_source;
use super::report::{self, BackendResult, ModelInfo, OutputFormat, Printer, TestResult};
use rocmforge_core::plan::{KvType, KvTypes};
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
    // Rows without n_depth (llama-bench before -d) are at depth 0.
    assert!(r.tests.iter().all(|t| t.n_depth == 0));
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
        launches: None,
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
        type_k: "f16",
        type_v: "f16",
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
fn a_gpu_backends_launches_are_a_line_after_the_table() {
    let mut backends = sample_backends();
    backends[2].launches = Some(435);
    let md = render(OutputFormat::Md, &backends);
    assert!(
        md.contains("\nbackend rocm: 435 launches a decode token\n"),
        "{md}"
    );
    assert!(!md.contains("cpu: 0 launches"), "{md}");
    // The rows keep their columns.
    for row in md.lines().filter(|l| l.starts_with("| qwen2")) {
        assert_eq!(row.matches('|').count(), 9, "{row}");
    }
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
        "model,size_bytes,n_params,backend,device,n_threads,test,n_prompt,n_gen,n_depth,mean_ts,sd_ts,reason"
    );
    // 3 backends × 2 tests, plus vulkan's reason row.
    assert_eq!(lines.len(), 1 + 7);
    assert_eq!(
        lines[1],
        "qwen2 494M Q4_0,1572864,494030000,cpu,\"cpu device, rev 2\",2,pp8,8,0,0,100.0000,1.0000,"
    );
    assert!(lines[3].starts_with("qwen2 494M Q4_0,1572864,494030000,vulkan,,,"));
    // Every row has the header's columns.
    for line in &lines {
        // Quoted fields (the devices) dropped, with their commas.
        let plain: String = line.split('"').step_by(2).collect();
        assert_eq!(plain.matches(',').count(), 12, "{line}");
    }
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

/// `result`'s tests, run again at depth 16.
fn at_depth_16(mut b: BackendResult) -> BackendResult {
    let deep: Vec<TestResult> = b
        .tests
        .iter()
        .map(|t| TestResult {
            test: report::test_name(t.n_prompt, t.n_gen, 16),
            n_depth: 16,
            ..t.clone()
        })
        .collect();
    b.tests.extend(deep);
    b
}

#[test]
fn depth_in_every_format() {
    let backends = [at_depth_16(result("cpu", 100.0, 10.0))];
    let json = render(OutputFormat::Json, &backends);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let depths: Vec<u64> = rows
        .iter()
        .map(|r| r["n_depth"].as_u64().unwrap())
        .collect();
    assert_eq!(depths, [0, 0, 16, 16], "{json}");
    assert_eq!(
        (rows[2]["n_prompt"].as_u64(), rows[3]["n_gen"].as_u64()),
        (Some(8), Some(4))
    );

    let md = render(OutputFormat::Md, &backends);
    let tests: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| qwen2"))
        .map(|l| l.split(" | ").nth(6).unwrap())
        .collect();
    assert_eq!(tests, ["pp8", "tg4", "pp8 @ d16", "tg4 @ d16"], "{md}");

    let csv = render(OutputFormat::Csv, &backends);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[3].contains(",2,pp8 @ d16,8,0,16,"), "{csv}");
    assert!(lines[4].contains(",2,tg4 @ d16,0,4,16,"), "{csv}");
}

#[test]
fn ratios_pair_equal_depths() {
    let cpu = at_depth_16(result("cpu", 100.0, 10.0));
    let mut rocm = at_depth_16(result("rocm", 400.0, 40.0));
    // rocm measured pp8 at depth 16 only.
    rocm.tests.remove(0);
    let md = render(OutputFormat::Md, &[cpu, rocm]);
    assert!(
        md.contains("| backend | pp8 | tg4 | pp8 @ d16 | tg4 @ d16 |"),
        "{md}"
    );
    assert!(md.contains("| rocm | - | 4.00 | 4.00 | 4.00 |"), "{md}");
}

#[test]
fn llama_bench_depth_rows_and_arguments() {
    let json = r#"[
      {"n_prompt": 512, "n_gen": 0, "n_depth": 4096, "avg_ts": 90.0, "stddev_ts": 1.0},
      {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 20.0, "stddev_ts": 0.5}
    ]"#;
    let r = llama_bench::parse(json).unwrap();
    let got: Vec<(&str, usize)> = r
        .tests
        .iter()
        .map(|t| (t.test.as_str(), t.n_depth))
        .collect();
    assert_eq!(got, [("pp512 @ d4096", 4096), ("tg128", 0)]);

    let typed_args = |n_depth: &[usize], kv_types: KvTypes| -> Vec<String> {
        let s = llama_bench::Settings {
            model: Path::new("m.gguf"),
            n_prompt: &[512],
            n_gen: &[128],
            n_depth,
            kv_types,
            repetitions: 3,
            threads: &[2],
        };
        llama_bench::args(&s)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    };
    let args = |n_depth: &[usize]| typed_args(n_depth, KvTypes::default());
    assert_eq!(
        args(&[0, 4096]).join(" "),
        "-m m.gguf -p 512 -n 128 -d 0,4096 -r 3 -t 2 -o json"
    );
    // Depth 0 alone is llama-bench's default: no -d, which builds older
    // than the flag would refuse.
    assert_eq!(
        args(&[0]).join(" "),
        "-m m.gguf -p 512 -n 128 -r 3 -t 2 -o json"
    );
    // Quantized caches are passed on as llama-bench spells them.
    let q8 = KvTypes {
        k: KvType::Q8_0,
        v: KvType::Q8_0,
    };
    assert_eq!(
        typed_args(&[0], q8).join(" "),
        "-m m.gguf -p 512 -n 128 -ctk q8_0 -ctv q8_0 -r 3 -t 2 -o json"
    );
}

#[test]
fn test_time_is_rfc3339_utc() {
    assert_eq!(llama_schema::rfc3339(0), "1970-01-01T00:00:00Z");
    // 2024-02-29 12:34:56 UTC, a leap day.
    assert_eq!(llama_schema::rfc3339(1_709_210_096), "2024-02-29T12:34:56Z");
    assert_eq!(llama_schema::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
}

fn plan(n_prompts: &[usize], n_gens: &[usize], n_depths: &[usize]) -> Plan {
    Plan {
        n_prompts: n_prompts.to_vec(),
        n_gens: n_gens.to_vec(),
        n_depths: n_depths.to_vec(),
        repetitions: 1,
        n_batch: 2048,
        n_ubatch: 512,
        n_cpu_moe: 0,
        kv_types: KvTypes::default(),
    }
}

#[test]
fn tests_run_in_llama_bench_order() {
    assert_eq!(
        plan(&[128, 0, 512], &[16, 32], &[0]).tests(),
        [
            Test::prompt(128, 0),
            Test::prompt(512, 0),
            Test::generate(16, 0),
            Test::generate(32, 0)
        ]
    );
    // Every pp and tg at the first depth, then all of them at the next
    // (llama-bench loops over depths outside the tests).
    let tests = plan(&[8], &[4, 0], &[0, 16]).tests();
    assert_eq!(
        tests,
        [
            Test::prompt(8, 0),
            Test::generate(4, 0),
            Test::prompt(8, 16),
            Test::generate(4, 16)
        ]
    );
    let names: Vec<String> = tests.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["pp8", "tg4", "pp8 @ d16", "tg4 @ d16"]);
    assert_eq!(tests[3].positions(), 20);
}

#[test]
fn test_names_follow_llama_bench() {
    assert_eq!(report::test_name(512, 0, 0), "pp512");
    assert_eq!(report::test_name(0, 128, 0), "tg128");
    assert_eq!(report::test_name(512, 128, 0), "pp512+tg128");
    assert_eq!(report::test_name(512, 0, 4096), "pp512 @ d4096");
    assert_eq!(report::test_name(0, 128, 4096), "tg128 @ d4096");
    assert_eq!(report::test_name(512, 128, 4096), "pp512+tg128 @ d4096");
}

#[test]
fn session_holds_the_deepest_test() {
    // Depth 0: as before the flag, prompt + generation.
    let o = plan(&[8, 512], &[128], &[0]).session_options();
    assert_eq!((o.n_ctx, o.n_batch), (640, 512));
    let o = plan(&[512], &[128], &[0, 4096]).session_options();
    assert_eq!((o.n_ctx, o.n_batch), (4096 + 512 + 128, 512));
    // A tg-only plan fills its depth in -ub steps, not single tokens.
    let o = plan(&[0], &[16], &[1024]).session_options();
    assert_eq!((o.n_ctx, o.n_batch), (1040, 512));
    // A prompt shorter than -ub stays one step whatever the depth.
    let o = plan(&[100], &[4], &[0, 4096]).session_options();
    assert_eq!((o.n_ctx, o.n_batch), (4200, 100));
}

#[test]
fn a_depth_past_the_model_context_is_a_warning() {
    let tests = plan(&[512], &[128], &[0, 4096]).tests();
    assert_eq!(
        super::context_warning(&tests, 4096).as_deref(),
        Some(
            "pp512 @ d4096 needs 4608 cache positions, past the model's trained context \
             of 4096; it runs, as in llama-bench (output quality past that length is the \
             model's)"
        )
    );
    assert_eq!(super::context_warning(&tests, 4608), None);
    assert_eq!(super::context_warning(&[], 1), None);
}

/// `cargo xtask bench` arguments as clap parses them.
fn parse_args(args: &[&str]) -> Result<super::BenchArgs, clap::Error> {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        bench: super::BenchArgs,
    }
    let all = std::iter::once("bench").chain(args.iter().copied());
    Cli::try_parse_from(all).map(|c| c.bench)
}

#[test]
fn depth_arguments() {
    assert_eq!(parse_args(&[]).unwrap().n_depth, [0]);
    assert_eq!(parse_args(&["-d", "0,16"]).unwrap().n_depth, [0, 16]);
    assert_eq!(parse_args(&["--n-depth", "4096"]).unwrap().n_depth, [4096]);
    // A later list replaces an earlier one, as -p and -n do.
    assert_eq!(parse_args(&["-d", "1,2", "-d", "3"]).unwrap().n_depth, [3]);
    assert!(parse_args(&["-d", "-1"]).is_err());
    assert!(parse_args(&["-d", "x"]).is_err());
}

#[test]
fn depth_reaches_the_cache_untimed() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/reference/tiny-qwen2-Q8_0.gguf");
    let model = std::sync::Arc::new(rocmforge_core::model::Model::load(&path).unwrap());
    let opts = rocmforge::registry::BackendOptions {
        threads: 1,
        ..Default::default()
    };
    let backend = rocmforge::registry::create("cpu", &opts).unwrap();
    let plan = plan(&[8], &[4], &[0, 16]);
    let mut runner = super::measure::Runner::start(backend, model, &plan, 1).unwrap();
    for (test, n_past) in plan.tests().into_iter().zip([8, 4, 24, 20]) {
        let t = runner.run(test).unwrap();
        // The last repetition left its depth and its own tokens.
        assert_eq!(runner.n_past(), n_past, "{test:?}");
        assert_eq!((t.test.as_str(), t.n_depth), (&*test.name(), test.n_depth));
        // The rate counts the timed tokens only.
        let ns = t.samples_ns[0] as f64;
        assert!((t.samples[0] - 1e9 * test.n_tokens as f64 / ns).abs() < 1e-6 * t.samples[0]);
    }
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
