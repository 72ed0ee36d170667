//! What a user sees when things go wrong: each fault gives one clear line
//! and a clean exit, and output already streamed is kept.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{
    assert_error_after_warnings, assert_one_line_error, command, error_lines, fixture, run,
    scratch_dir, stderr, stdout,
};

fn llama() -> String {
    fixture("tiny-llama-Q4_K_M.gguf").display().to_string()
}

fn generate(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["generate", "--gguf", &llama(), "--temp", "0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run_owned(args: &[String]) -> std::process::Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args)
}

#[test]
fn a_device_lost_mid_run_keeps_the_streamed_text() {
    let o = command("lost")
        .args(generate(&[
            "--backend",
            "cpu",
            "--prompt",
            "Once upon",
            "-n",
            "10",
            "--ids",
        ]))
        .env("ROCMFORGE_INJECT_FAULT", "cpu:lost@step:4")
        .output()
        .unwrap();
    // BOS + "Once upon" is 3 tokens, prefilled in steps 1 and 2 (2 + 1);
    // the first token is sampled from them and the second from step 3, so
    // two tokens were printed before step 4 failed.
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("stopped: device failure"),
        "{}",
        stderr(&o)
    );
    let errors = error_lines(&o);
    assert_eq!(errors.len(), 1, "{}", stderr(&o));
    assert!(
        errors[0].contains("device lost: injected fault at step 4"),
        "{errors:?}"
    );
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_missing_runtime_is_one_line() {
    let o = command("noruntime")
        .args(generate(&["--backend", "rocm", "--prompt", "hi"]))
        .env("ROCM_PATH", "/nonexistent")
        .env("ROCMFORGE_HIP_RUNTIME", "hip")
        // Keep a real ROCm install, if any, out of this test's sight.
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .output()
        .unwrap();
    if o.status.success() {
        return; // this machine has a HIP runtime in the loader's default path
    }
    assert_one_line_error(&o, 1, "HIP runtime not found");
}

#[test]
fn a_broken_runtime_library_is_one_line() {
    let dir = scratch_dir("broken-runtime");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    // Not a shared object at all.
    std::fs::write(lib.join("libamdhip64.so"), b"\x7fELF but not really").unwrap();
    let o = command("broken")
        .args(generate(&["--backend", "rocm", "--prompt", "hi"]))
        .env("ROCM_PATH", &dir)
        .env("ROCMFORGE_HIP_RUNTIME", "hip")
        .output()
        .unwrap();
    assert_one_line_error(&o, 1, "libamdhip64.so could not be loaded");
    // A Vulkan loader that is not one.
    std::fs::write(lib.join("libvulkan.so.1"), b"garbage").unwrap();
    let o = command("broken")
        .args(generate(&[
            "--backend",
            "vulkan",
            "--device",
            "0",
            "--prompt",
            "hi",
        ]))
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .unwrap();
    assert_one_line_error(&o, 1, "no Vulkan loader");
}

#[test]
fn a_model_larger_than_memory_is_refused_before_allocating() {
    let o = run_owned(&generate(&[
        "--backend",
        "cpu",
        "--prompt",
        "hi",
        "--ctx-size",
        "4000000000",
    ]));
    assert_error_after_warnings(&o, 1, "the model needs");
    let err = error_lines(&o).remove(0);
    assert!(err.contains("KV cache") && err.contains("is free"), "{err}");
}

#[test]
fn a_context_past_the_training_context_warns() {
    // tiny-llama was trained on 4096 positions.
    let o = run_owned(&generate(&[
        "--backend",
        "cpu",
        "--prompt",
        "hi",
        "-n",
        "2",
        "-c",
        "8192",
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "warning: context size 8192 is longer than the model's training context 4096"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn empty_prompts() {
    // Llama adds BOS: generation starts from it, as in llama.cpp.
    let o = run_owned(&generate(&[
        "--backend",
        "cpu",
        "--prompt",
        "",
        "-n",
        "3",
        "--ids",
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 3);
    // Without BOS there is nothing to start from.
    let o = run_owned(&generate(&["--backend", "cpu", "--prompt", "", "--no-bos"]));
    assert_one_line_error(&o, 1, "the prompt is empty");
}

#[test]
fn thread_counts() {
    let o = run_owned(&generate(&[
        "--backend",
        "cpu",
        "--prompt",
        "hi",
        "--threads",
        "100000",
    ]));
    assert_one_line_error(&o, 1, "at most 512");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let more = (cores + 1).to_string();
    let o = run_owned(&generate(&[
        "--backend",
        "cpu",
        "--prompt",
        "hi",
        "-n",
        "2",
        "--threads",
        &more,
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("oversubscribes"), "{}", stderr(&o));
}

#[test]
fn a_device_index_on_the_cpu_is_refused() {
    let o = run_owned(&generate(&[
        "--backend",
        "cpu",
        "--prompt",
        "hi",
        "--device",
        "5",
    ]));
    assert_one_line_error(&o, 1, "the cpu backend has one device");
}

#[test]
fn a_directory_as_the_model_says_so() {
    let dir = scratch_dir("dir-model");
    let d = dir.display().to_string();
    let o = run(&["generate", "--gguf", &d, "--prompt", "hi"]);
    assert_one_line_error(&o, 1, "is a directory");
    let o = run(&["info", &d]);
    assert_one_line_error(&o, 1, "is a directory");
}

#[test]
fn a_closed_stderr_pipe_does_not_panic() {
    // A pipe whose reader is gone: every write to stderr fails with EPIPE,
    // which makes `eprintln!` panic.
    let closed_pipe = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        Stdio::from(writer)
    };
    let o = command("stderr")
        .args(generate(&["--backend", "cpu", "--prompt", "hi", "-n", "3"]))
        .stderr(closed_pipe())
        .output()
        .unwrap();
    assert!(o.status.success(), "status {:?}", o.status);
    assert!(stdout(&o).starts_with("hi"), "{}", stdout(&o));
    // The error path, which prints only to stderr, still exits 1.
    let o = command("stderr")
        .args(["generate", "--gguf", "/nonexistent", "--prompt", "hi"])
        .stderr(closed_pipe())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn ctrl_c_stops_prints_the_timings_and_exits_130() {
    let mut child = command("ctrlc")
        .args(generate(&[
            "--backend",
            "cpu",
            "--prompt",
            "Once",
            "-n",
            "4000",
            "--ids",
        ]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    // Wait for the first generated token, so the signal lands mid-run.
    let mut first = [0u8; 1];
    out.read_exact(&mut first).unwrap();
    // SAFETY: signals our own child process.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let start = Instant::now();
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(start.elapsed() < Duration::from_secs(30));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("stopped: interrupted"), "{err}");
    let text = [&first[..], &rest].concat();
    let text = String::from_utf8(text).unwrap();
    assert!(text.ends_with('\n'), "{text:?}");
    let n = text.lines().count();
    assert!((1..4000).contains(&n), "{n} tokens");
}
