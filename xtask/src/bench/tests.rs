use std::path::Path;

use super::backends::{self, BackendChoice, Resolved};
use super::llama_bench::{self, LlamaBenchError};
use super::measure::TokenStream;
use super::model_source;
use super::report::{self, BackendResult, ModelInfo, OutputFormat, Report, TestResult};
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
    BackendResult {
        backend: backend.to_string(),
        device: Some(format!("{backend} device, rev 2")),
        reason: None,
        tests: vec![
            TestResult::from_samples("pp8".into(), 8, 0, vec![pp - 1.0, pp, pp + 1.0]),
            TestResult::from_samples("tg4".into(), 0, 4, vec![tg, tg]),
        ],
    }
}

fn sample_report() -> Report {
    Report {
        model: Some(ModelInfo {
            path: "m.gguf".into(),
            desc: "qwen2 494M Q4_0".into(),
            size_bytes: 3 << 19,
            n_params: 494_030_000,
        }),
        backends: vec![
            result("cpu", 100.0, 10.0),
            BackendResult::unavailable("vulkan", "not built into this binary".into()),
            result("rocm", 400.0, 25.0),
            result("llama.cpp", 50.0, 20.0),
        ],
    }
}

#[test]
fn markdown_layout() {
    let md = sample_report().render(OutputFormat::Md);
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(lines[0], "backend cpu: cpu device, rev 2");
    assert_eq!(lines[1], "backend vulkan: not built into this binary");
    assert_eq!(lines[4], "");
    assert_eq!(
        lines[5],
        "| model | size | params | backend | device | test | t/s |"
    );
    let rows: Vec<&str> = lines[7..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .copied()
        .collect();
    assert_eq!(rows.len(), 6, "{md}");
    for row in &rows {
        assert_eq!(row.matches('|').count(), 8, "{row}");
    }
    assert_eq!(
        rows[0],
        "| qwen2 494M Q4_0 | 1.50 MiB | 494.03 M | cpu | cpu device, rev 2 | pp8 | 100.00 ± 1.00 |"
    );
    // rocm ÷ cpu: 400/100 and 25/10; rocmforge ÷ llama.cpp: 100/50, 10/20.
    assert!(md.contains("| rocm | 4.00 | 2.50 |"), "{md}");
    assert!(md.contains("| cpu | 2.00 | 0.50 |"), "{md}");
    assert!(md.contains("| rocm | 8.00 | 1.25 |"), "{md}");
}

#[test]
fn no_ratio_table_for_one_backend() {
    let mut r = sample_report();
    r.backends.truncate(2);
    let md = r.render(OutputFormat::Md);
    assert!(!md.contains("relative") && !md.contains("÷"), "{md}");
}

#[test]
fn csv_rows() {
    let csv = sample_report().render(OutputFormat::Csv);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "model,size_bytes,n_params,backend,device,test,n_prompt,n_gen,mean_ts,sd_ts,reason"
    );
    // 3 backends × 2 tests, plus vulkan's reason row.
    assert_eq!(lines.len(), 1 + 7);
    assert_eq!(
        lines[1],
        "qwen2 494M Q4_0,1572864,494030000,cpu,\"cpu device, rev 2\",pp8,8,0,100.0000,1.0000,"
    );
    assert!(lines[3].starts_with("qwen2 494M Q4_0,1572864,494030000,vulkan,,,"));
}

#[test]
fn json_round_trip_keeps_every_sample() {
    let report = sample_report();
    let json = report.render(OutputFormat::Json);
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let samples = &value["backends"][0]["tests"][0]["samples"];
    assert_eq!(samples.as_array().unwrap().len(), 3);
    assert_eq!(value["backends"][1]["reason"], "not built into this binary");
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
fn cached_model_name() {
    let preset = presets::find("qwen2-0.5b").unwrap();
    let ty = rocmforge_core::quant::QuantType::from_name("Q4_0").unwrap();
    assert_eq!(
        model_source::cached_path(Path::new("/t"), preset, ty),
        Path::new("/t/models/qwen2-0.5b-Q4_0.gguf")
    );
}
