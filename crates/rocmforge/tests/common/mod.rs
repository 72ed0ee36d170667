//! What the CLI test files share: running the binary and reading its
//! one-line errors.

#![allow(dead_code)] // each test file uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference")
        .join(name)
}

/// The binary with a private probe-verdict cache, so tests neither read
/// the user's verdicts nor leave theirs behind.
pub fn command(cache: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rocmforge"));
    c.env("ROCMFORGE_CACHE_DIR", scratch_dir(cache));
    c.env_remove("ROCMFORGE_INJECT_FAULT");
    c
}

pub fn run(args: &[&str]) -> Output {
    command("cli").args(args).output().unwrap()
}

/// Runs `cmd` with `input` on its stdin, then closed, and collects its
/// output.
pub fn run_with_stdin(mut cmd: Command, input: &str) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A directory of this test process's own under the system temp dir.
pub fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rocmforge-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr's lines that start with "error:".
pub fn error_lines(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("error:"))
        .map(str::to_string)
        .collect()
}

/// A failure prints exactly one line, starting with "error:", and no
/// backtrace.
pub fn assert_one_line_error(o: &Output, code: i32, needle: &str) {
    assert_eq!(o.status.code(), Some(code), "stderr: {}", stderr(o));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {err}");
    assert!(lines[0].starts_with("error:"), "{err}");
    assert!(lines[0].contains(needle), "expected '{needle}' in: {err}");
}

/// As [`assert_one_line_error`], allowing "warning:" lines before it.
pub fn assert_error_after_warnings(o: &Output, code: i32, needle: &str) {
    assert_eq!(o.status.code(), Some(code), "stderr: {}", stderr(o));
    let err = stderr(o);
    for l in err.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            l.starts_with("error:") || l.starts_with("warning:"),
            "unexpected line {l:?} in: {err}"
        );
    }
    let errors = error_lines(o);
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].contains(needle), "expected '{needle}' in: {err}");
}
