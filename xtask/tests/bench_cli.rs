//! `cargo xtask bench` as a user sees it: exit codes, one-line errors, and the
//! report on stdout. Runs use the tiny reference model and a few tokens.

use std::path::PathBuf;
use std::process::{Command, Output};

fn model() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/reference/tiny-qwen2-Q8_0.gguf")
        .display()
        .to_string()
}

/// `xtask bench --model <tiny> -p 8 -n 4 -r 2` plus `args`.
fn bench(args: &[&str]) -> Output {
    bench_env(args, &[])
}

/// As [`bench`], with extra environment variables.
fn bench_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let model = model();
    let mut all = vec!["bench", "--model", &model, "-p", "8", "-n", "4", "-r", "2"];
    all.extend_from_slice(args);
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(&all)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// `bench` with `ROCMFORGE_HIP_RUNTIME` naming no runtime, so the rocm
/// backend cannot start on any machine.
fn bench_without_hip(args: &[&str]) -> Output {
    bench_env(args, &[("ROCMFORGE_HIP_RUNTIME", "none")])
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit `code` and a single-line `error:` on stderr mentioning `needle`
/// (status lines from the run before the failure are allowed above it).
fn assert_error(out: &Output, code: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err:?}");
    assert!(
        errors[0].contains(needle),
        "{err:?} should mention {needle:?}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn argument_errors_exit_2() {
    assert_error(&bench(&["-o", "xml"]), 2, "xml");
    assert_error(&bench(&["-r", "0"]), 2, "repetitions");
    assert_error(&bench(&["--backend", "cuda"]), 2, "unknown backend 'cuda'");
    assert_error(&bench(&["-p", "0", "-n", "0"]), 2, "nothing to measure");
    for out in [bench(&["-o", "xml"]), bench(&["--backend", "cpu,nope"])] {
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
}

#[test]
fn unavailable_backend_by_name_exits_1_with_reason() {
    let out = bench_without_hip(&["--backend", "rocm"]);
    assert_error(&out, 1, "backend rocm: backend 'rocm' cannot run here");
    assert!(
        stdout(&out).starts_with("backend rocm: backend 'rocm' cannot run here"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn all_reports_unavailable_backends_and_runs_cpu() {
    let out = bench_without_hip(&["--backend", "all"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        text.contains("backend rocm: backend 'rocm' cannot run here"),
        "{text}"
    );
    // Built in: it runs where a GPU is, or says in its line why not.
    assert!(text.contains("backend vulkan: "), "{text}");
    assert!(text.contains("backend cpu: "), "{text}");
    let cpu_rows: Vec<&str> = text.lines().filter(|l| l.contains("| cpu |")).collect();
    assert_eq!(cpu_rows.len(), 2, "{text}");
    // The model is labelled by its file type; its path prints clean.
    assert!(
        cpu_rows[0].starts_with("| qwen2 ") && cpu_rows[0].contains(" Q8_0 |"),
        "{text}"
    );
    assert!(!stderr(&out).contains(".."), "{}", stderr(&out));
    assert!(cpu_rows[0].contains("| pp8 |") && cpu_rows[1].contains("| tg4 |"));
    assert!(cpu_rows[0].contains(" ± "), "{text}");
}

#[test]
fn json_rows_follow_llama_bench_with_every_sample() {
    let out = bench(&["--backend", "cpu", "-r", "3", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert!(row["model_n_params"].as_u64().unwrap() > 0);
        assert_eq!(row["backends"], "CPU");
        // The reference model is a Q8_0 file.
        assert!(
            row["model_type"].as_str().unwrap().ends_with(" Q8_0"),
            "{row}"
        );
        let filename = row["model_filename"].as_str().unwrap();
        assert!(filename.ends_with("tiny-qwen2-Q8_0.gguf") && !filename.contains(".."));
        let ts = row["samples_ts"].as_array().unwrap();
        assert_eq!(ts.len(), 3, "{row}");
        assert_eq!(row["samples_ns"].as_array().unwrap().len(), 3, "{row}");
        let mean = ts.iter().map(|s| s.as_f64().unwrap()).sum::<f64>() / 3.0;
        assert!(
            (row["avg_ts"].as_f64().unwrap() - mean).abs() < 1e-6 * mean,
            "{row}"
        );
    }
    assert_eq!(
        (rows[0]["n_prompt"].as_u64(), rows[0]["n_gen"].as_u64()),
        (Some(8), Some(0))
    );
    assert_eq!(
        (rows[1]["n_prompt"].as_u64(), rows[1]["n_gen"].as_u64()),
        (Some(0), Some(4))
    );
}

#[test]
fn lists_of_sizes_and_threads_as_llama_bench_takes_them() {
    let out = bench(&[
        "--backend",
        "cpu",
        "-p",
        "4,8",
        "-n",
        "2",
        "-t",
        "1,2",
        "-r",
        "1",
        "-ngl",
        "99",
        "-o",
        "jsonl",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<(u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["n_threads"].as_u64().unwrap(),
                r["n_prompt"].as_u64().unwrap(),
                r["n_gen"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, 4, 0),
            (1, 8, 0),
            (1, 0, 2),
            (2, 4, 0),
            (2, 8, 0),
            (2, 0, 2)
        ]
    );
    assert!(rows.iter().all(|r| r["n_gpu_layers"] == 99));
}

#[test]
fn depths_fill_the_cache_before_each_test() {
    let out = bench(&["--backend", "cpu", "-d", "0,16", "-r", "1", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let got: Vec<(u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["n_prompt"].as_u64().unwrap(),
                r["n_gen"].as_u64().unwrap(),
                r["n_depth"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [(8, 0, 0), (0, 4, 0), (8, 0, 16), (0, 4, 16)]);
    assert!(rows.iter().all(|r| r["avg_ts"].as_f64().unwrap() > 0.0));

    let out = bench(&["--backend", "cpu", "-d", "0,16", "-r", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let tests: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("| cpu |"))
        .filter_map(|l| l.split(" | ").nth(6))
        .collect();
    assert_eq!(tests, ["pp8", "tg4", "pp8 @ d16", "tg4 @ d16"], "{text}");
}

#[test]
fn a_depth_past_the_model_context_runs_with_a_warning() {
    // The reference model's context length is 4096; llama-bench runs such
    // a test too.
    let out = bench(&[
        "--backend",
        "cpu",
        "-p",
        "8",
        "-n",
        "0",
        "-d",
        "4090",
        "-r",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "warning: pp8 @ d4090 needs 4098 cache positions, past the model's trained \
             context of 4096"
        ),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("pp8 @ d4090"), "{}", stdout(&out));
}

#[test]
fn csv_header_and_rows() {
    let out = bench(&["--backend", "cpu", "-o", "csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("model,size_bytes,n_params,backend,device,n_threads,test,"));
    assert_eq!(lines.len(), 3, "{text}");
}

#[test]
fn missing_llama_bench_is_one_line() {
    let out = bench(&[
        "--backend",
        "cpu",
        "--vs-llama-bench",
        "/no/such/llama-bench",
    ]);
    assert_error(&out, 1, "/no/such/llama-bench");
}

/// A stand-in llama-bench: a shell script printing fixed JSON (or failing),
/// so the whole --vs-llama-bench path runs without llama.cpp.
#[cfg(unix)]
fn fake_llama_bench(tag: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::temp_dir().join(format!("fake-llama-bench-{tag}-{}", std::process::id()));
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[cfg(unix)]
#[test]
fn compares_with_llama_bench() {
    let json = r#"[{"n_prompt":8,"n_gen":0,"n_threads":2,"avg_ts":1.0e9,"stddev_ts":1.0,"samples_ts":[1.0e9,1.0e9]},
{"n_prompt":0,"n_gen":4,"n_threads":2,"avg_ts":2.0e9,"stddev_ts":1.0,"samples_ts":[2.0e9,2.0e9]}]"#;
    let fake = fake_llama_bench("ok", &format!("cat <<'EOF'\n{json}\nEOF"));
    let out = bench(&[
        "--backend",
        "cpu",
        "--vs-llama-bench",
        fake.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&fake);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        text.contains("| llama.cpp | llama-bench | 2 | pp8 | 1000000000.00 ± 1.00 |"),
        "{text}"
    );
    // No real engine is a billion times faster than this tiny model's
    // llama-bench stand-in: the ratio rounds to 0.00.
    assert!(text.contains("rocmforge ÷ llama.cpp"), "{text}");
    assert!(text.contains("| cpu | 0.00 | 0.00 |"), "{text}");
}

#[cfg(unix)]
#[test]
fn depths_pass_on_to_llama_bench() {
    let json = r#"[{"n_prompt":8,"n_gen":0,"n_depth":0,"n_threads":2,"avg_ts":1.0e9,"stddev_ts":1.0},
{"n_prompt":0,"n_gen":4,"n_depth":0,"n_threads":2,"avg_ts":1.0e9,"stddev_ts":1.0},
{"n_prompt":8,"n_gen":0,"n_depth":16,"n_threads":2,"avg_ts":3.0e9,"stddev_ts":1.0},
{"n_prompt":0,"n_gen":4,"n_depth":16,"n_threads":2,"avg_ts":4.0e9,"stddev_ts":1.0}]"#;
    let args_file =
        std::env::temp_dir().join(format!("fake-llama-bench-args-{}", std::process::id()));
    let fake = fake_llama_bench(
        "depth",
        &format!(
            "echo \"$@\" > '{}'\ncat <<'EOF'\n{json}\nEOF",
            args_file.display()
        ),
    );
    let out = bench(&[
        "--backend",
        "cpu",
        "-d",
        "0,16",
        "-r",
        "1",
        "--vs-llama-bench",
        fake.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&fake);
    let args = std::fs::read_to_string(&args_file).unwrap_or_default();
    let _ = std::fs::remove_file(&args_file);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(args.contains(" -d 0,16 "), "{args}");
    let text = stdout(&out);
    assert!(
        text.contains("| llama.cpp | llama-bench | 2 | tg4 @ d16 | 4000000000.00 ± 1.00 |"),
        "{text}"
    );
    assert!(
        text.contains("| backend | pp8 | tg4 | pp8 @ d16 | tg4 @ d16 |"),
        "{text}"
    );
}

#[cfg(unix)]
#[test]
fn failing_llama_bench_is_one_line() {
    let fake = fake_llama_bench(
        "fail",
        "echo 'loading...' >&2; echo 'error: boom' >&2; exit 3",
    );
    let out = bench(&[
        "--backend",
        "cpu",
        "--vs-llama-bench",
        fake.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&fake);
    assert_error(&out, 1, "error: boom");
}

/// The mixture-of-experts path end to end at tiny size (issue 23): a
/// generated Qwen3-MoE (Q4_0) and gpt-oss (MXFP4 experts) file, benched on
/// every backend that runs here (the CPU always, Vulkan on lavapipe too,
/// required where `ROCMFORGE_REQUIRE_BACKENDS` names it, as in CI), each
/// row a real measurement.
#[test]
fn moe_presets_bench_at_tiny_size() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for (preset, ty, arch) in [
        ("tiny-qwen3moe", "Q4_0", "| qwen3moe "),
        ("tiny-gpt-oss", "MXFP4", "| gpt-oss "),
    ] {
        let path = dir.join(format!("bench-{preset}-{ty}.gguf"));
        let gen = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["gen-model", "--preset", preset, "--type", ty, "--out"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(gen.status.code(), Some(0), "{}", stderr(&gen));
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args([
                "bench",
                "--backend",
                "all",
                "-p",
                "40",
                "-n",
                "4",
                "-r",
                "1",
            ])
            .arg("--model")
            .arg(&path)
            .env("ROCMFORGE_HIP_RUNTIME", "none")
            .env("ROCMFORGE_VULKAN_ALLOW_CPU", "1")
            .output()
            .unwrap();
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{preset}: {}", stderr(&out));
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(arch)).collect();
        assert!(rows.len() >= 2, "{preset}: {text}");
        for row in &rows {
            let ts: f64 = row
                .rsplit('|')
                .nth(1)
                .and_then(|cell| cell.split('±').next())
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{preset}: no t/s in {row}"));
            assert!(ts > 0.0, "{preset}: {row}");
        }
        assert!(rows.iter().any(|r| r.contains("| cpu |")), "{text}");
        // Where CI requires Vulkan (lavapipe), its rows must be there too.
        let required = std::env::var("ROCMFORGE_REQUIRE_BACKENDS").unwrap_or_default();
        if required.split(',').any(|b| b == "vulkan") {
            assert!(rows.iter().any(|r| r.contains("| vulkan |")), "{text}");
        }
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}
