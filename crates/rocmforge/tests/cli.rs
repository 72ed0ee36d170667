//! The `rocmforge` binary end to end: output on good input, one-line errors
//! and non-zero exits on bad input.

mod common;

use std::path::PathBuf;

use common::{assert_one_line_error, fixture, run, stderr};

const PROMPT: &str = "The quick brown fox jumps over the lazy dog. Once upon a time";

#[test]
fn greedy_ids_match_the_reference() {
    // tiny-qwen3's reference continuation has no near-tie: all 24 tokens must match.
    let gguf = fixture("tiny-qwen3-Q8_0.gguf");
    let o = run(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        PROMPT,
        "--max-tokens",
        "24",
        "--temp",
        "0",
        "--ids",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ours: Vec<u32> = String::from_utf8(o.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let reference: Vec<u32> = std::fs::read_to_string(fixture("tiny-qwen3-Q8_0.greedy"))
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ours, reference);
    let err = stderr(&o);
    assert!(
        err.contains("prompt:") && err.contains("t/s"),
        "timings on stderr: {err}"
    );
    // The memory a session needs is reported before it loads.
    assert!(
        err.contains("memory: ") && err.contains("KV cache") && err.contains("needed"),
        "memory report on stderr: {err}"
    );
}

#[test]
fn generate_text_is_streamed_after_the_prompt() {
    let gguf = fixture("tiny-llama-Q4_K_M.gguf");
    let o = run(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "Hello",
        "-n",
        "8",
        "--seed",
        "7",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.starts_with("Hello") && text.len() > "Hello".len(),
        "{text:?}"
    );
    // Same seed, same text.
    let again = run(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "Hello",
        "-n",
        "8",
        "--seed",
        "7",
    ]);
    assert_eq!(String::from_utf8(again.stdout).unwrap(), text);
}

#[test]
fn tokenize_matches_the_reference_tokens() {
    let gguf = fixture("tiny-llama-Q4_K_M.gguf");
    let o = run(&["tokenize", "--gguf", gguf.to_str().unwrap(), PROMPT]);
    assert!(o.status.success(), "{}", stderr(&o));
    let expect = std::fs::read_to_string(fixture("tiny-llama-Q4_K_M.tokens")).unwrap();
    let expect: Vec<&str> = expect.split_whitespace().collect();
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().trim(),
        expect.join(" ")
    );
}

#[test]
fn info_lists_metadata_and_tensors() {
    let gguf = fixture("tiny-qwen2-Q8_0.gguf");
    let o = run(&["info", gguf.to_str().unwrap()]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.contains("general.architecture") && out.contains("\"qwen2\""),
        "{out}"
    );
    assert!(
        out.contains("token_embd.weight") && out.contains("Q8_0") && out.contains("64 x 151936"),
        "{out}"
    );
}

#[test]
fn missing_file_is_one_line() {
    let o = run(&[
        "generate",
        "--gguf",
        "/nonexistent/model.gguf",
        "--prompt",
        "hi",
    ]);
    assert_one_line_error(&o, 1, "/nonexistent/model.gguf");
}

#[test]
fn truncated_file_is_one_line() {
    let dir = std::env::temp_dir().join(format!("rocmforge-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cut.gguf");
    let bytes = std::fs::read(fixture("tiny-qwen2-Q8_0.gguf")).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let o = run(&[
        "generate",
        "--gguf",
        path.to_str().unwrap(),
        "--prompt",
        "hi",
    ]);
    assert_one_line_error(&o, 1, "cut.gguf");
    let o = run(&["info", path.to_str().unwrap()]);
    assert_one_line_error(&o, 1, "cut.gguf");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn vocab_only_file_cannot_generate() {
    let vocab = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tokenizer/ggml-vocab-qwen2.gguf");
    let o = run(&[
        "generate",
        "--gguf",
        vocab.to_str().unwrap(),
        "--prompt",
        "hi",
    ]);
    assert_one_line_error(&o, 1, "");
}

#[test]
fn bad_sampling_options_are_rejected() {
    let gguf = fixture("tiny-qwen2-Q8_0.gguf");
    let o = run(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "hi",
        "--top-p",
        "1.5",
    ]);
    assert_one_line_error(&o, 1, "");
    let o = run(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "hi",
        "--backend",
        "cuda",
    ]);
    assert_one_line_error(&o, 1, "unknown backend 'cuda'");
}

#[test]
fn prompt_longer_than_context_is_rejected() {
    let gguf = fixture("tiny-qwen2-Q8_0.gguf");
    let long = "word ".repeat(100);
    let o = run(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        &long,
        "-c",
        "16",
    ]);
    assert_one_line_error(&o, 1, "context size");
}

#[test]
fn unknown_flag_is_a_usage_error() {
    let o = run(&["generate", "--frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `generate` with `args` on the CPU, `input` on stdin.
fn generate_with_stdin(args: &[&str], input: &str) -> std::process::Output {
    let mut cmd = common::command("cli");
    cmd.arg("generate").args(args);
    common::run_with_stdin(cmd, input)
}

#[test]
fn llama_cpp_flags_give_the_reference_greedy_ids() {
    // -m -p -n -s -t -c -ngl as llama-cli spells them; the prompt from -p,
    // from a file (-f, whose final newline is dropped as llama.cpp does)
    // and from stdin (-p - and -f -) must all give the reference's ids.
    let gguf = fixture("tiny-qwen3-Q8_0.gguf");
    let reference: Vec<String> = std::fs::read_to_string(fixture("tiny-qwen3-Q8_0.greedy"))
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let dir = common::scratch_dir("prompt-file");
    let file = dir.join("prompt.txt");
    std::fs::write(&file, format!("{PROMPT}\n")).unwrap();
    let common = [
        "-m",
        gguf.to_str().unwrap(),
        "-n",
        "24",
        "--temp",
        "0",
        "-s",
        "1",
        "-t",
        "2",
        "-c",
        "256",
        "-ngl",
        "99",
        "--backend",
        "cpu",
        "--ids",
    ];
    let ids = |o: &std::process::Output| -> Vec<String> {
        assert!(o.status.success(), "{}", stderr(o));
        common::stdout(o).lines().map(str::to_string).collect()
    };
    let with = |extra: &[&str]| {
        let mut args = common.to_vec();
        args.extend_from_slice(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let argv = with(&["-p", PROMPT]);
    let o = run(&std::iter::once("generate")
        .chain(argv.iter().map(String::as_str))
        .collect::<Vec<_>>());
    assert_eq!(ids(&o), reference, "-p");
    let argv = with(&["-f", file.to_str().unwrap()]);
    let o = run(&std::iter::once("generate")
        .chain(argv.iter().map(String::as_str))
        .collect::<Vec<_>>());
    assert_eq!(ids(&o), reference, "-f");
    for flag in ["-p", "-f"] {
        let argv = with(&[flag, "-"]);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let o = generate_with_stdin(&argv, &format!("{PROMPT}\n"));
        assert_eq!(ids(&o), reference, "{flag} -");
    }
    // A fixed seed prints no seed line.
    assert!(!stderr(&o).contains("seed:"), "{}", stderr(&o));
}

#[test]
fn the_default_seed_is_random_printed_and_repeatable() {
    let gguf = fixture("tiny-llama-Q4_K_M.gguf");
    let args = |seed: Option<&str>| {
        let mut a = vec![
            "generate",
            "-m",
            gguf.to_str().unwrap(),
            "-p",
            "Hello",
            "-n",
            "12",
            "--backend",
            "cpu",
            "--ids",
        ];
        if let Some(s) = seed {
            a.extend(["-s", s]);
        }
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let seed_of = |o: &std::process::Output| -> String {
        assert!(o.status.success(), "{}", stderr(o));
        let err = stderr(o);
        let line = err
            .lines()
            .find(|l| l.starts_with("seed: "))
            .unwrap_or_else(|| panic!("no seed line in: {err}"));
        line["seed: ".len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let run_args = |a: Vec<String>| run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let first = run_args(args(None));
    let second = run_args(args(Some("-1")));
    let (s1, s2) = (seed_of(&first), seed_of(&second));
    assert_ne!(s1, s2, "two random seeds");
    // The printed seed repeats the run.
    let again = run_args(args(Some(&s1)));
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(again.stdout, first.stdout);
}

#[test]
fn n_predict_minus_one_runs_to_a_full_context() {
    let gguf = fixture("tiny-llama-Q4_K_M.gguf");
    let o = run(&[
        "generate",
        "-m",
        gguf.to_str().unwrap(),
        "-p",
        "Hello",
        "-n",
        "-1",
        "-c",
        "24",
        "--temp",
        "0",
        "--backend",
        "cpu",
        "--ids",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let generated = common::stdout(&o).lines().count();
    // The last token is sampled from the full context without being
    // evaluated, so a context of 24 yields 24 - prompt + 1 tokens.
    let prompt: usize = err
        .split("prompt: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no prompt count in: {err}"));
    if err.contains("stopped: context full") {
        assert_eq!(generated, 24 - prompt + 1, "{err}");
    } else {
        assert!(err.contains("stopped: end of generation"), "{err}");
    }
}

#[test]
fn json_reports_counts_timings_and_text() {
    let gguf = fixture("tiny-qwen3-Q8_0.gguf");
    let o = run(&[
        "generate",
        "-m",
        gguf.to_str().unwrap(),
        "-p",
        PROMPT,
        "-n",
        "24",
        "--temp",
        "0",
        "-s",
        "5",
        "--backend",
        "cpu",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = common::stdout(&o);
    assert_eq!(out.lines().count(), 1, "one JSON object: {out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let reference = std::fs::read_to_string(fixture("tiny-qwen3-Q8_0.tokens")).unwrap();
    assert_eq!(
        v["prompt_n"].as_u64().unwrap() as usize,
        reference.split_whitespace().count()
    );
    assert_eq!(v["predicted_n"], 24);
    assert_eq!(v["seed"], 5);
    assert_eq!(v["backend"], "cpu");
    assert_eq!(v["stop_reason"], "max tokens");
    assert_eq!(v["tokens"].as_array().unwrap().len(), 24);
    for key in [
        "prompt_ms",
        "prompt_per_second",
        "predicted_ms",
        "predicted_per_second",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {out}");
    }
    assert!(!v["text"].as_str().unwrap().is_empty(), "{out}");
    assert!(v["device"].is_string());
}

#[test]
fn list_devices_names_every_backend() {
    let o = run(&["generate", "--list-devices", "--probe-timeout", "60"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = common::stdout(&o);
    for name in ["cpu", "vulkan", "rocm"] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in: {out}"));
        // A device, or the reason it is unavailable.
        assert!(line.len() > name.len() + 4, "{line}");
    }
    assert!(!out.contains("cpu      unavailable"), "{out}");
}

#[test]
fn bad_llama_flag_values_are_one_line() {
    let gguf = fixture("tiny-qwen2-Q8_0.gguf");
    let gguf = gguf.to_str().unwrap();
    for (flags, code, needle) in [
        (&["-n", "-2"][..], 1, "-n/--n-predict"),
        (&["-n", "many"][..], 2, "--n-predict"),
        (&["-s", "abc"][..], 2, "--seed"),
        (&["-s", "-5"][..], 2, "--seed"),
        (&["-ngl", "-3"][..], 1, "-ngl"),
        (&["-ngl", "all"][..], 2, "--n-gpu-layers"),
        (&["-c", "-1"][..], 2, "--ctx-size"),
        (&["-t", "x"][..], 2, "--threads"),
        (&["-t", "-2"][..], 2, "--threads"),
        (&["--temp", "hot"][..], 2, "--temp"),
        (&["-ctk", "q5_1"][..], 2, "unknown cache type 'q5_1'"),
        (&["-ctv", "f32"][..], 2, "--cache-type-v"),
    ] {
        let mut args = vec!["generate", "-m", gguf, "-p", "hi"];
        args.extend_from_slice(flags);
        let o = run(&args);
        assert_one_line_error(&o, code, needle);
    }
    // A prompt from both -p and -f, or from neither, is a usage error.
    let o = run(&["generate", "-m", gguf, "-p", "hi", "-f", "x.txt"]);
    assert_one_line_error(&o, 2, "--file");
    let o = run(&["generate", "-m", gguf]);
    assert_one_line_error(&o, 2, "--prompt");
    let o = run(&["generate", "-m", gguf, "-f", "/nonexistent/prompt.txt"]);
    assert_one_line_error(&o, 1, "/nonexistent/prompt.txt");
}

/// `rocmforge perplexity`'s printed `[k]` values and final line.
fn parse_perplexity(out: &str) -> (Vec<f64>, f64, f64) {
    let mut lines = out.lines();
    let running = lines
        .next()
        .unwrap()
        .split(',')
        .filter(|s| !s.is_empty())
        .enumerate()
        .map(|(k, s)| {
            let (index, value) = s.split_once(']').unwrap();
            assert_eq!(index, format!("[{}", k + 1));
            value.parse().unwrap()
        })
        .collect();
    let fin = lines.next().unwrap();
    let fin = fin.strip_prefix("Final estimate: PPL = ").unwrap();
    let (ppl, err) = fin.split_once(" +/- ").unwrap();
    (running, ppl.parse().unwrap(), err.parse().unwrap())
}

fn perplexity_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/perplexity")
        .join(name)
}

#[test]
fn perplexity_prints_llama_perplexity_figures() {
    let gguf = fixture("tiny-llama-Q4_K_M.gguf");
    let text = perplexity_fixture("text.txt");
    let o = run(&[
        "perplexity",
        "-m",
        gguf.to_str().unwrap(),
        "-f",
        text.to_str().unwrap(),
        "-c",
        "128",
        "-b",
        "32",
        "-t",
        "2",
        "--backend",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (running, ppl, err) = parse_perplexity(&common::stdout(&o));
    let reference = std::fs::read_to_string(perplexity_fixture("tiny-llama-Q4_K_M.ppl")).unwrap();
    let (want_running, want_ppl, want_err) = parse_perplexity(&reference);
    assert_eq!(running.len(), want_running.len());
    assert_eq!(
        *running.last().unwrap(),
        ppl,
        "the last [k] is the estimate"
    );
    // The bounds the conformance suite derives for this model and text
    // (crates/rocmforge-conformance/tests/perplexity.rs): 0.029 in ln PPL
    // after 378 scored tokens, 0.047 in ln ±.
    assert!(
        (ppl.ln() - want_ppl.ln()).abs() < 0.029,
        "{ppl} vs {want_ppl}"
    );
    assert!(
        (err.ln() - want_err.ln()).abs() < 0.047,
        "{err} vs {want_err}"
    );
}

#[test]
fn perplexity_refuses_what_it_cannot_score_in_one_line() {
    let gguf = fixture("tiny-llama-Q4_K_M.gguf");
    let gguf = gguf.to_str().unwrap();
    let text = perplexity_fixture("text.txt");
    let text = text.to_str().unwrap();
    let o = run(&["perplexity", "-m", gguf, "-f", text, "--backend", "cpu"]);
    // 840 tokens: two chunks of the default 512 do not fit.
    assert_one_line_error(&o, 1, "needs at least 1024");
    let o = run(&["perplexity", "-m", gguf, "-f", text, "-c", "2"]);
    assert_one_line_error(&o, 1, "at least 3");
    let o = run(&["perplexity", "-m", gguf, "-f", "/nonexistent/wiki.txt"]);
    assert_one_line_error(&o, 1, "/nonexistent/wiki.txt");
    let o = run(&["perplexity", "-m", gguf, "-f", text, "-b", "0"]);
    assert_one_line_error(&o, 1, "--batch-size");
    let o = run(&["perplexity", "-m", gguf, "-f", text, "-c", "big"]);
    assert_one_line_error(&o, 2, "--ctx-size");
    let o = run(&["perplexity", "-f", text]);
    assert_one_line_error(&o, 2, "--model");
}

/// `-ctk` / `-ctv` as llama-cli spells them: a quantized cache on the CPU
/// generates and the memory line says its types.
#[test]
fn cache_types_take_llama_cpp_flags() {
    let gguf = fixture("tiny-qwen2-Q8_0.gguf");
    let gguf = gguf.to_str().unwrap();
    let o = run(&[
        "generate",
        "-m",
        gguf,
        "-p",
        "hi",
        "-n",
        "4",
        "--temp",
        "0",
        "--backend",
        "cpu",
        "-ctk",
        "q8_0",
        "-ctv",
        "q4_0",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("(K q8_0, V q4_0)"), "{err}");
}

/// `--json-schema` and `--grammar` (llama-cli's) constrain the completion;
/// a schema or grammar that cannot be compiled is one line and a non-zero
/// exit, before anything is generated.
#[test]
fn grammars_and_schemas_constrain_the_completion() {
    let gguf = fixture("tiny-qwen3-Q8_0.gguf");
    let gen = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "-m",
            gguf.to_str().unwrap(),
            "-p",
            "Data:",
            "-n",
            "120",
            "--temp",
            "0.8",
            "-s",
            "3",
            "--backend",
            "cpu",
            "--json",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let schema = r#"{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}}, "required": ["n", "ok"], "additionalProperties": false}"#;
    let o = gen(&["--json-schema", schema]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&common::stdout(&o)).unwrap();
    assert_eq!(v["stop_reason"], "end of generation", "{v}");
    let reply: serde_json::Value = serde_json::from_str(v["text"].as_str().unwrap()).unwrap();
    assert!(reply["n"].as_u64().is_some_and(|n| n <= 99), "{reply}");
    assert!(reply["ok"].is_boolean(), "{reply}");
    let o = gen(&["--grammar", r#"root ::= ("yes" | "no") "!""#]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&common::stdout(&o)).unwrap();
    let text = v["text"].as_str().unwrap();
    assert!(text == "yes!" || text == "no!", "{text:?}");
    for (bad, needle) in [
        (
            &["--json-schema", "{not json"][..],
            "--json-schema is not JSON",
        ),
        (
            &["--json-schema", r#"{"type": "no-such-type"}"#],
            "--json-schema:",
        ),
        (
            &["--grammar", "root ::= [a-z"],
            "--grammar: a character class",
        ),
        (&["--grammar-file", "/nonexistent/grammar.gbnf"], "grammar"),
    ] {
        let o = gen(bad);
        assert_one_line_error(&o, 1, needle);
    }
}
