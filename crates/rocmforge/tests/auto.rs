//! `--backend auto`: probes in child processes, the verdict cache, and
//! falling back from a backend that hangs or fails.

mod common;

use std::time::{Duration, Instant};

use common::{command, fixture, scratch_dir, stderr};

fn generate(cache: &str, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let gguf = fixture("tiny-llama-Q4_K_M.gguf");
    let mut c = command(cache);
    c.args([
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "hi",
        "-n",
        "3",
    ])
    .args(["--temp", "0"])
    .args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The backend the run used, from its "backend: NAME on DEVICE" line.
fn used(o: &std::process::Output) -> String {
    let err = stderr(o);
    err.lines()
        .find_map(|l| l.strip_prefix("backend: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no backend line in: {err}"))
        .to_string()
}

fn auto_line(o: &std::process::Output) -> Option<String> {
    stderr(o)
        .lines()
        .find(|l| l.starts_with("backend auto:"))
        .map(str::to_string)
}

/// Whether lavapipe (or another Vulkan device 0) must run here: CI installs
/// it and says so.
fn vulkan_required() -> bool {
    std::env::var("ROCMFORGE_REQUIRE_BACKENDS").is_ok_and(|v| v.split(',').any(|b| b == "vulkan"))
}

#[test]
fn auto_says_why_it_passed_over_each_backend_and_caches_it() {
    let cache = "explain";
    let _ = std::fs::remove_dir_all(scratch_dir(cache));
    let o = generate(cache, &[], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let chosen = used(&o);
    let line = auto_line(&o);
    match chosen.as_str() {
        // The first choice: nothing to explain.
        "rocm" => assert!(line.is_none(), "{line:?}"),
        other => {
            let line = line.unwrap_or_else(|| panic!("no explanation: {}", stderr(&o)));
            assert!(
                line.starts_with(&format!("backend auto: using {other};")),
                "{line}"
            );
            assert!(line.contains("rocm failed: "), "{line}");
            if other == "cpu" {
                assert!(line.contains("vulkan failed: "), "{line}");
            }
            assert!(!line.contains("(cached"), "{line}");
        }
    }
    // The second run reuses the verdicts without probing.
    let o = generate(cache, &[], &[]);
    assert_eq!(used(&o), chosen);
    if chosen != "rocm" {
        assert!(
            auto_line(&o).unwrap().contains("(cached; --reprobe"),
            "{}",
            stderr(&o)
        );
        let o = generate(cache, &["--reprobe"], &[]);
        assert!(
            !auto_line(&o).unwrap().contains("(cached"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn a_hanging_backend_is_killed_and_passed_over() {
    let cache = "hang";
    let _ = std::fs::remove_dir_all(scratch_dir(cache));
    let start = Instant::now();
    // The vulkan probe hangs forever in load, as a driver call can.
    let o = generate(
        cache,
        &["--device", "0", "--probe-timeout", "5"],
        &[("ROCMFORGE_INJECT_FAULT", "vulkan:hang@load")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // Two probes at most 5 s each, plus the kill's grace, plus the run.
    assert!(
        start.elapsed() < Duration::from_secs(40),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(used(&o), "cpu");
    let line = auto_line(&o).unwrap();
    assert!(line.starts_with("backend auto: using cpu;"), "{line}");
    if vulkan_required() {
        assert!(line.contains("vulkan failed: hung"), "{line}");
    }
}

#[test]
fn a_working_vulkan_device_is_chosen_and_a_failure_in_a_run_is_remembered() {
    let cache = "remember";
    let _ = std::fs::remove_dir_all(scratch_dir(cache));
    let o = generate(cache, &["--device", "0", "--probe-timeout", "120"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    if used(&o) != "vulkan" {
        assert!(!vulkan_required(), "vulkan must run here: {}", stderr(&o));
        return;
    }
    // The device is lost at the third step of the real run (the probe
    // makes two): the run fails with one line...
    let o = generate(
        cache,
        &["--device", "0"],
        &[("ROCMFORGE_INJECT_FAULT", "vulkan:lost@step:3")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("error: device lost"), "{}", stderr(&o));
    // ...and the next run falls back without probing again.
    let o = generate(cache, &["--device", "0"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(used(&o), "cpu");
    let line = auto_line(&o).unwrap();
    assert!(
        line.contains("vulkan failed: failed in an earlier run: device lost"),
        "{line}"
    );
}

/// The children of `pid`, from procfs.
fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Gone, or a zombie waiting for a reaper.
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn a_probe_dies_with_the_run_that_started_it() {
    let gguf = fixture("tiny-llama-Q4_K_M.gguf");
    let mut parent = command("orphan")
        .args([
            "generate",
            "--gguf",
            gguf.to_str().unwrap(),
            "--prompt",
            "hi",
        ])
        .args(["--device", "0", "--probe-timeout", "300", "--reprobe"])
        .env("ROCMFORGE_INJECT_FAULT", "vulkan:hang@load")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the hanging vulkan probe (the rocm one ends at once here).
    let start = Instant::now();
    let mut probe = None;
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(&c) = children(parent.id()).first() {
            let cmdline = std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains("vulkan") {
                probe = Some(c);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Some(probe) = probe else {
        let _ = parent.kill();
        let _ = parent.wait();
        assert!(!vulkan_required(), "no vulkan probe started");
        return;
    };
    // The parent dies without any chance to clean up...
    parent.kill().unwrap();
    parent.wait().unwrap();
    // ...and its probe follows it.
    let start = Instant::now();
    while !dead(probe) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "probe {probe} outlived its parent"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
