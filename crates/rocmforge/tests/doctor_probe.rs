//! `rocmforge doctor --probe`: the sweep's table, and a hanging case
//! reported without stopping the sweep. Run on the CPU backend (its own
//! reference, so every row agrees) with faults injected, since no GPU is
//! required here.

mod common;

use common::{command, stderr, stdout};

fn sweep(types: &str, extra: &[&str], fault: Option<&str>) -> std::process::Output {
    let mut c = command("doctor-probe");
    c.args([
        "doctor",
        "--probe",
        "--probe-backends",
        "cpu",
        "--probe-shapes",
        "odd",
    ])
    .args(["--probe-types", types])
    .args(extra);
    if let Some(f) = fault {
        c.env("ROCMFORGE_INJECT_FAULT", f);
    }
    c.output().unwrap()
}

/// The table's rows for one weight type: (tokens, result).
fn rows(out: &str, ty: &str) -> Vec<(String, String)> {
    out.lines()
        .filter(|l| l.starts_with(&format!("| cpu | {ty} | odd |")))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[4].to_string(), cells[5].to_string())
        })
        .collect()
}

#[test]
fn every_prompt_length_gets_a_row() {
    let o = sweep("Q4_0", &[], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let r = rows(&out, "Q4_0");
    let tokens: Vec<&str> = r.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tokens, ["1", "3", "33", "127", "129"], "{out}");
    assert!(r.iter().all(|(_, s)| s == "ok"), "{out}");
    assert!(out.contains("5 ok, 0 failed"), "{out}");
}

#[test]
fn a_hang_is_reported_and_the_sweep_goes_on() {
    // Steps 1-2 are the 1-token prompt (prefill, decode); step 3 is the
    // first of the 3-token prompt, which never returns.
    let o = sweep(
        "Q4_0,Q8_0",
        &["--probe-timeout", "10"],
        Some("cpu:hang@step:3"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    for ty in ["Q4_0", "Q8_0"] {
        let r = rows(&out, ty);
        let results: Vec<&str> = r.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(
            results,
            ["ok", "HANG", "not run", "not run", "not run"],
            "{ty}: {out}"
        );
    }
    assert!(out.contains("2 ok, 2 failed"), "{out}");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: some probe cases failed"), "{err}");
}

#[test]
fn bad_sweep_options_are_one_line() {
    for (flag, value, needle) in [
        ("--probe-types", "Q9_9", "not a supported weight type"),
        ("--probe-shapes", "huge", "unknown shape 'huge'"),
        ("--probe-backends", "cuda", "unknown backend 'cuda'"),
    ] {
        let o = command("doctor-probe")
            .args(["doctor", "--probe", flag, value])
            .output()
            .unwrap();
        common::assert_one_line_error(&o, 1, needle);
    }
}
