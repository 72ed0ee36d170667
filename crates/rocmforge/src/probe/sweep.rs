//! `doctor --probe`: every kernel of each GPU backend over a sweep of
//! shapes, each case in its own child process with a hard deadline, the
//! seeds' size-boundary search automated.
//!
//! Backends compute whole graphs, never single kernels, so a case is a
//! generated model (one weight type, one [`ProbeShape`]) run for a list of
//! prompt lengths: together the weight types cover every weight kernel
//! family (embedding rows, mat-vec, matrix tiles), every shape runs the
//! shared ones (norms, RoPE, attention, SwiGLU, quantizers), and the
//! prompt lengths put each on both sides of its tile boundaries. A case that
//! hangs is reported with the prompt length it hung at, and the sweep goes
//! on with the next case.

use std::path::PathBuf;
use std::time::Duration;

use rocmforge_core::quant::QuantType;

use super::shapes::{ProbeShape, SHAPES};
use super::{run_case, CaseEnd, CaseReport, CaseSpec};

pub struct SweepOptions {
    pub exe: PathBuf,
    pub backends: Vec<String>,
    pub device: Option<usize>,
    pub types: Vec<QuantType>,
    pub shapes: Vec<&'static ProbeShape>,
    /// Hard deadline of each case (one child process).
    pub case_timeout: Duration,
    /// The backend's own bound on each wait, inside the child.
    pub gpu_timeout: Duration,
}

impl SweepOptions {
    /// Every supported weight type over every shape.
    pub fn everything(exe: PathBuf, backends: Vec<String>, device: Option<usize>) -> SweepOptions {
        SweepOptions {
            exe,
            backends,
            device,
            types: QuantType::supported().collect(),
            shapes: SHAPES.iter().collect(),
            case_timeout: Duration::from_secs(180),
            gpu_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Ok,
    /// Logits too far from the CPU's (σ).
    Wrong(f32),
    Error(String),
    Hang,
    /// Not run: an earlier prompt length of the same case failed or hung.
    Skipped,
    /// The backend cannot start here; the row stands for all its cases.
    Unavailable(String),
}

impl Status {
    pub fn label(&self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Wrong(_) => "WRONG",
            Status::Error(_) => "error",
            Status::Hang => "HANG",
            Status::Skipped => "not run",
            Status::Unavailable(_) => "unavailable",
        }
    }

    pub fn is_failure(&self) -> bool {
        matches!(self, Status::Wrong(_) | Status::Error(_) | Status::Hang)
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    pub backend: String,
    pub device: Option<String>,
    pub ty: Option<QuantType>,
    pub shape: Option<&'static str>,
    pub n_prompt: Option<usize>,
    pub status: Status,
    pub max_diff_sigma: Option<f32>,
    pub prefill_ms: Option<f64>,
    pub decode_ms: Option<f64>,
    /// Wall time of the case's child process (load included), on its
    /// first row.
    pub case_s: Option<f64>,
}

/// Runs the sweep, handing each row to `row` as soon as its case ends.
pub fn sweep(opts: &SweepOptions, row: &mut dyn FnMut(&Row)) -> std::io::Result<()> {
    for backend in &opts.backends {
        let mut first = true;
        'cases: for &shape in &opts.shapes {
            for &ty in &opts.types {
                let spec = CaseSpec {
                    backend: backend.clone(),
                    device: opts.device,
                    ty,
                    shape,
                    prompts: shape.sweep_prompts.to_vec(),
                    gpu_timeout: opts.gpu_timeout,
                };
                let report = run_case(&opts.exe, &spec, opts.case_timeout)?;
                if let CaseEnd::Unavailable(why) = &report.end {
                    if first {
                        row(&unavailable_row(backend, why));
                        break 'cases;
                    }
                }
                first = false;
                for r in rows(&spec, &report) {
                    row(&r);
                }
            }
        }
    }
    Ok(())
}

fn unavailable_row(backend: &str, why: &str) -> Row {
    Row {
        backend: backend.to_string(),
        device: None,
        ty: None,
        shape: None,
        n_prompt: None,
        status: Status::Unavailable(why.to_string()),
        max_diff_sigma: None,
        prefill_ms: None,
        decode_ms: None,
        case_s: None,
    }
}

/// One row per prompt length of the case: the steps that ran, then the one
/// that failed or hung, then the ones never reached.
fn rows(spec: &CaseSpec, report: &CaseReport) -> Vec<Row> {
    let base = Row {
        backend: spec.backend.clone(),
        device: report.device.clone(),
        ty: Some(spec.ty),
        shape: Some(spec.shape.name),
        n_prompt: None,
        status: Status::Ok,
        max_diff_sigma: None,
        prefill_ms: None,
        decode_ms: None,
        case_s: None,
    };
    let mut out = Vec::new();
    for s in &report.steps {
        out.push(Row {
            n_prompt: Some(s.n_prompt),
            status: if s.agrees() {
                Status::Ok
            } else {
                Status::Wrong(s.max_diff_sigma)
            },
            max_diff_sigma: Some(s.max_diff_sigma),
            prefill_ms: Some(s.prefill_ms),
            decode_ms: Some(s.decode_ms),
            ..base.clone()
        });
    }
    let ended = match &report.end {
        CaseEnd::Completed => None,
        CaseEnd::Hang { .. } => Some(Status::Hang),
        CaseEnd::Unavailable(m) | CaseEnd::Failed(m) | CaseEnd::Crashed(m) => {
            Some(Status::Error(m.clone()))
        }
    };
    if let Some(status) = ended {
        for (i, &n) in spec.prompts.iter().enumerate().skip(report.steps.len()) {
            out.push(Row {
                n_prompt: Some(n),
                status: if i == report.steps.len() {
                    status.clone()
                } else {
                    Status::Skipped
                },
                ..base.clone()
            });
        }
    }
    if let Some(r) = out.first_mut() {
        r.case_s = Some(report.elapsed.as_secs_f64());
    }
    out
}

/// The table's header, in llama-bench's markdown style.
pub const HEADER: &str = "| backend | type | shape | tokens | result | max diff σ | prefill ms | decode ms | case s |\n|---|---|---|---:|---|---:|---:|---:|---:|";

/// One table line for `r`; a failure's message follows the table line.
pub fn table_line(r: &Row) -> String {
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut line = format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.backend,
        r.ty.map_or("-".to_string(), |t| t.name().to_string()),
        r.shape.unwrap_or("-"),
        r.n_prompt.map_or("-".to_string(), |n| n.to_string()),
        r.status.label(),
        opt(r.max_diff_sigma.map(f64::from), 3),
        opt(r.prefill_ms, 2),
        opt(r.decode_ms, 2),
        opt(r.case_s, 1),
    );
    match &r.status {
        Status::Error(m) | Status::Unavailable(m) => {
            line.push_str(&format!("\n  {}: {m}", r.backend))
        }
        Status::Hang => line.push_str(&format!(
            "\n  {}: no answer before the case's deadline; the sweep goes on",
            r.backend
        )),
        _ => {}
    }
    line
}

#[cfg(test)]
mod tests {
    use super::super::StepResult;
    use super::*;

    fn spec() -> CaseSpec {
        CaseSpec {
            backend: "vulkan".into(),
            device: None,
            ty: QuantType::Q4_0,
            shape: &SHAPES[0],
            prompts: vec![1, 7, 64],
            gpu_timeout: Duration::from_secs(1),
        }
    }

    fn step(n: usize, sigma: f32) -> StepResult {
        StepResult {
            n_prompt: n,
            max_diff_sigma: sigma,
            prefill_ms: 1.0,
            decode_ms: 1.0,
        }
    }

    #[test]
    fn a_hang_marks_its_prompt_and_the_rest_not_run() {
        let report = CaseReport {
            device: Some("gpu".into()),
            load_ms: Some(1.0),
            steps: vec![step(1, 0.01)],
            end: CaseEnd::Hang {
                during: "at 7 prompt tokens".into(),
                reaped: true,
            },
            elapsed: Duration::from_secs(5),
        };
        let r = rows(&spec(), &report);
        let s: Vec<&Status> = r.iter().map(|r| &r.status).collect();
        assert_eq!(s, [&Status::Ok, &Status::Hang, &Status::Skipped]);
        assert!(table_line(&r[1]).contains("HANG"));
    }

    #[test]
    fn wrong_results_are_failures() {
        let report = CaseReport {
            device: Some("gpu".into()),
            load_ms: Some(1.0),
            steps: vec![step(1, 0.01), step(7, 2.0), step(64, 0.0)],
            end: CaseEnd::Completed,
            elapsed: Duration::from_secs(5),
        };
        let r = rows(&spec(), &report);
        assert_eq!(r[1].status, Status::Wrong(2.0));
        assert!(r[1].status.is_failure() && !r[0].status.is_failure());
    }
}
