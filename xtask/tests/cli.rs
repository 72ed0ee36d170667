//! The `xtask` binary as a user sees it: exit codes, one-line errors, and the
//! file left behind.

use std::path::PathBuf;
use std::process::{Command, Output};

use rocmforge_core::gguf::GgufFile;

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("xtask-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn assert_one_line_error(out: &Output, code: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.contains(needle), "{err:?} should mention {needle:?}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn unknown_preset() {
    let out = xtask(&[
        "gen-model",
        "--preset",
        "gpt-5",
        "--type",
        "Q4_0",
        "--out",
        "x.gguf",
    ]);
    assert_one_line_error(&out, 2, "unknown preset 'gpt-5'");
}

#[test]
fn unknown_type() {
    let out = xtask(&[
        "gen-model",
        "--preset",
        "tiny-llama",
        "--type",
        "Q7_3",
        "--out",
        "x.gguf",
    ]);
    assert_one_line_error(&out, 2, "unknown weight type 'Q7_3'");
}

#[test]
fn missing_arguments() {
    let out = xtask(&["gen-model", "--preset", "tiny-llama"]);
    assert_one_line_error(&out, 2, "--type");
}

#[test]
fn unknown_subcommand() {
    let out = xtask(&["gen-modle"]);
    assert_one_line_error(&out, 2, "gen-modle");
}

#[test]
fn unwritable_path() {
    let out = xtask(&[
        "gen-model",
        "--preset",
        "tiny-qwen3",
        "--type",
        "Q8_0",
        "--out",
        "/nonexistent-dir/model.gguf",
    ]);
    assert_one_line_error(&out, 1, "/nonexistent-dir/model.gguf.tmp.");
}

#[test]
fn writes_a_complete_file_and_no_temporary() {
    let dir = TempDir::new("ok");
    let path = dir.0.join("m.gguf");
    let out = xtask(&[
        "gen-model",
        "--preset",
        "tiny-qwen2",
        "--type",
        "Q8_0",
        "--seed",
        "7",
        "--out",
        path.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("F16 instead of Q8_0"),
        "fallback reported: {err}"
    );
    let entries: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, ["m.gguf"]);
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.architecture(), Some("qwen2"));
    assert!(file.tensor("blk.2.attn_v.bias").is_some());
}
