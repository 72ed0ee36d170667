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
