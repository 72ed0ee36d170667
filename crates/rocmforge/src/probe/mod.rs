//! Probing a backend in a child process: does it start, does it compute what
//! the CPU computes, and does it finish at all.
//!
//! The seeds of this module are AMD stacks that hang rather than fail: a
//! `hipMalloc` that never returns on RDNA3 with MES firmware bugs, uploads
//! that stall on Strix Halo, MIOpen kernels on RDNA1 that hang above a size
//! boundary. An in-process watchdog cannot rescue a thread stuck in a driver
//! call, so each probe runs the `rocmforge` binary itself (the hidden
//! `probe-case` subcommand) under a hard deadline, and the parent reads the
//! child's progress lines (see [`case`]) whatever way it ends. `--backend
//! auto` probes once per device, driver and build ([`cache`]); `doctor
//! --probe` sweeps every weight type over the [`shapes`].

pub mod cache;
pub mod case;
pub mod child;
pub mod shapes;
pub mod sweep;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

pub use case::{CaseSpec, Event, StepResult, TOLERANCE_SIGMA};
use child::{run_bounded, ChildOutcome};

/// How a probe case ended.
#[derive(Clone, Debug, PartialEq)]
pub enum CaseEnd {
    /// Every prompt length ran (each step says whether it agreed).
    Completed,
    /// The backend cannot start here.
    Unavailable(String),
    /// The backend reported an error.
    Failed(String),
    /// The child was still running at the deadline; `during` names the
    /// work it had not finished.
    Hang { during: String, reaped: bool },
    /// The child died without reporting (a crash in the driver, a signal).
    Crashed(String),
}

#[derive(Clone, Debug)]
pub struct CaseReport {
    pub device: Option<String>,
    pub load_ms: Option<f64>,
    pub steps: Vec<StepResult>,
    pub end: CaseEnd,
    pub elapsed: Duration,
}

impl CaseReport {
    /// The first step whose logits are too far from the CPU's.
    pub fn first_disagreement(&self) -> Option<&StepResult> {
        self.steps.iter().find(|s| !s.agrees())
    }

    /// Completed, and every step agreed with the CPU.
    pub fn passed(&self) -> bool {
        self.end == CaseEnd::Completed && self.first_disagreement().is_none()
    }

    /// One line on what went wrong, or None when it passed.
    pub fn problem(&self) -> Option<String> {
        match &self.end {
            CaseEnd::Completed => self.first_disagreement().map(|s| {
                format!(
                    "wrong results ({:.2}σ from the CPU at {} prompt tokens, tolerance {TOLERANCE_SIGMA}σ)",
                    s.max_diff_sigma, s.n_prompt
                )
            }),
            CaseEnd::Unavailable(m) => Some(m.clone()),
            CaseEnd::Failed(m) => Some(m.clone()),
            CaseEnd::Hang { during, reaped } => Some(format!(
                "hung {during} (no answer in {:.0} s{})",
                self.elapsed.as_secs_f64(),
                if *reaped {
                    ""
                } else {
                    "; the probe process could not be killed, it is stuck in the driver"
                }
            )),
            CaseEnd::Crashed(m) => Some(format!("crashed: {m}")),
        }
    }
}

/// Runs `spec` in a child `exe probe-case ...`, killed after `timeout`.
pub fn run_case(exe: &Path, spec: &CaseSpec, timeout: Duration) -> std::io::Result<CaseReport> {
    let mut cmd = Command::new(exe);
    cmd.arg("probe-case")
        .args(["--backend", &spec.backend])
        .args(["--type", spec.ty.name()])
        .args(["--shape", spec.shape.name])
        .arg("--prompts")
        .arg(
            spec.prompts
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
        )
        .arg("--gpu-timeout")
        .arg(spec.gpu_timeout.as_secs_f64().to_string());
    if let Some(d) = spec.device {
        cmd.args(["--device", &d.to_string()]);
    }
    let outcome = run_bounded(&mut cmd, timeout)?;
    Ok(report(spec, outcome))
}

fn report(spec: &CaseSpec, outcome: ChildOutcome) -> CaseReport {
    let (stdout, stderr, elapsed, exit) = match outcome {
        ChildOutcome::Exited {
            status,
            stdout,
            stderr,
            elapsed,
        } => (stdout, stderr, elapsed, Some(status)),
        ChildOutcome::TimedOut {
            stdout,
            stderr,
            elapsed,
            reaped,
        } => {
            let mut r = parse_events(&stdout, elapsed);
            let during = match (r.device.is_some(), r.steps.len()) {
                (false, _) => "starting the backend and loading the model".to_string(),
                (true, n) => match spec.prompts.get(n) {
                    Some(p) => format!("at {p} prompt tokens"),
                    None => "finishing".to_string(),
                },
            };
            let _ = stderr;
            r.end = CaseEnd::Hang { during, reaped };
            return r;
        }
    };
    let mut r = parse_events(&stdout, elapsed);
    if r.end == CaseEnd::Completed && r.steps.len() < spec.prompts.len() {
        let status = exit.map_or("unknown".to_string(), |s| s.to_string());
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        r.end = CaseEnd::Crashed(match last {
            Some(l) => format!("{status}: {}", l.trim()),
            None => status,
        });
    }
    r
}

fn parse_events(stdout: &str, elapsed: Duration) -> CaseReport {
    let mut r = CaseReport {
        device: None,
        load_ms: None,
        steps: Vec::new(),
        end: CaseEnd::Completed,
        elapsed,
    };
    for line in stdout.lines() {
        match serde_json::from_str::<Event>(line) {
            Ok(Event::Started { device, load_ms }) => {
                r.device = Some(device);
                r.load_ms = Some(load_ms);
            }
            Ok(Event::Unavailable { message }) => r.end = CaseEnd::Unavailable(message),
            Ok(Event::Step(s)) => r.steps.push(s),
            Ok(Event::Failed { message }) => r.end = CaseEnd::Failed(message),
            // Anything else on stdout (a driver printing there) is not ours.
            Err(_) => {}
        }
    }
    r
}
