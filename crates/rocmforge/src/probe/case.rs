//! One probe case, run inside the child: a generated model of a given shape
//! and weight type, evaluated on the backend under test and on the CPU
//! reference for a list of prompt lengths, one prefill and one decode each.
//!
//! Progress goes to stdout as one JSON line per event, written as soon as it
//! is known, so that when the parent has to kill a hung child it still has
//! every step that finished and knows which one hung.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use rocmforge_core::gguf::GgufFile;
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;
use rocmforge_core::session::{Session, SessionOptions};
use rocmforge_genmodel::model::{write_model, ModelPlan};
use rocmforge_genmodel::DEFAULT_SEED;
use serde::{Deserialize, Serialize};

use super::shapes::ProbeShape;
use crate::registry::{self, BackendOptions};

/// A backend's logits may differ from the CPU's by at most this many
/// standard deviations of the CPU's logits. The conformance suite sees at
/// most ~0.1σ on correct kernels (rounding order, f16 accumulators); a wrong
/// result (a bad tile edge, garbage memory) is of order 1σ.
pub const TOLERANCE_SIGMA: f32 = 0.5;

/// What the child is asked to run.
#[derive(Clone, Debug)]
pub struct CaseSpec {
    pub backend: String,
    pub device: Option<usize>,
    pub ty: QuantType,
    pub shape: &'static ProbeShape,
    /// Prompt lengths, each one prefill then one decode step.
    pub prompts: Vec<usize>,
    /// The backend's own bound on each wait, below the parent's hard one,
    /// so a hang the backend can see is reported with the op in flight.
    pub gpu_timeout: Duration,
}

/// One line of the child's output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The backend started; `device` is what it runs on.
    Started { device: String, load_ms: f64 },
    /// The backend cannot start here (no runtime, no device, no kernels).
    Unavailable { message: String },
    /// One prompt length done.
    Step(StepResult),
    /// The backend failed (during load or a step).
    Failed { message: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub n_prompt: usize,
    /// Largest difference from the CPU over the prefill's and the decode's
    /// logits, in standard deviations of the CPU's logits.
    pub max_diff_sigma: f32,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

impl StepResult {
    pub fn agrees(&self) -> bool {
        self.max_diff_sigma <= TOLERANCE_SIGMA
    }
}

/// Runs `spec`, writing one JSON line per [`Event`] to `out`.
pub fn run(spec: &CaseSpec, out: &mut dyn Write) -> std::io::Result<()> {
    let mut emit = |e: &Event| -> std::io::Result<()> {
        let line = serde_json::to_string(e).expect("events serialize");
        writeln!(out, "{line}")?;
        out.flush()
    };
    let n_ctx = spec.prompts.iter().max().copied().unwrap_or(1) + 1;
    let model = match generate_model(spec) {
        Ok(m) => Arc::new(m),
        Err(message) => return emit(&Event::Failed { message }),
    };
    let opts = BackendOptions {
        threads: 0,
        device: spec.device,
        allow_software_devices: spec.device.is_some(),
        gpu_timeout: Some(spec.gpu_timeout),
    };
    let backend = match registry::create(&spec.backend, &opts) {
        Ok(b) => b,
        Err(e) => {
            return emit(&Event::Unavailable {
                message: unavailable_reason(e),
            })
        }
    };
    let session_opts = SessionOptions {
        n_ctx,
        ..SessionOptions::default()
    };
    let t = Instant::now();
    let mut gpu = match Session::new(Arc::clone(&model), backend, session_opts, &mut |_, _| {}) {
        Ok(s) => s,
        Err(e) => {
            return emit(&Event::Failed {
                message: e.to_string(),
            })
        }
    };
    emit(&Event::Started {
        device: gpu.backend().info().device,
        load_ms: ms(t.elapsed()),
    })?;
    let cpu = registry::create("cpu", &BackendOptions::default()).expect("the cpu backend starts");
    let mut cpu = match Session::new(model, cpu, session_opts, &mut |_, _| {}) {
        Ok(s) => s,
        Err(e) => {
            return emit(&Event::Failed {
                message: format!("cpu reference: {e}"),
            })
        }
    };
    for &n in &spec.prompts {
        match step(&mut gpu, &mut cpu, n) {
            Ok(r) => emit(&Event::Step(r))?,
            Err(message) => return emit(&Event::Failed { message }),
        }
    }
    Ok(())
}

fn unavailable_reason(e: registry::RegistryError) -> String {
    match e {
        registry::RegistryError::Unavailable { source, .. } => {
            registry::unavailable_reason(&source)
        }
        other => other.to_string(),
    }
}

fn generate_model(spec: &CaseSpec) -> Result<Model, String> {
    let plan = ModelPlan::without_tokenizer(&spec.shape.preset, spec.ty);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bytes = write_model(
        &plan,
        DEFAULT_SEED,
        threads,
        Vec::new(),
        &ProgressBar::hidden(),
    )
    .map_err(|e| format!("generating the probe model: {e}"))?;
    let file = GgufFile::from_bytes(bytes).map_err(|e| format!("probe model: {e}"))?;
    Model::from_file(file).map_err(|e| format!("probe model: {e}"))
}

/// A prompt of `n` ids spread over the vocabulary, prefilled on both
/// sessions, then one decode step; the logits of both compared.
fn step(gpu: &mut Session, cpu: &mut Session, n: usize) -> Result<StepResult, String> {
    let n_vocab = gpu.model().config.n_vocab;
    let prompt: Vec<u32> = (0..n).map(|i| ((i * 7919 + 13) % n_vocab) as u32).collect();
    gpu.reset();
    cpu.reset();
    let t = Instant::now();
    let got = gpu.eval(&prompt).map_err(|e| e.to_string())?.to_vec();
    let prefill_ms = ms(t.elapsed());
    let want = cpu
        .eval(&prompt)
        .map_err(|e| format!("cpu reference: {e}"))?
        .to_vec();
    let mut worst = diff_sigma(&got, &want);
    let next = [(n * 31 % n_vocab) as u32];
    let t = Instant::now();
    let got = gpu.eval(&next).map_err(|e| e.to_string())?.to_vec();
    let decode_ms = ms(t.elapsed());
    let want = cpu.eval(&next).map_err(|e| format!("cpu reference: {e}"))?;
    worst = worst.max(diff_sigma(&got, want));
    Ok(StepResult {
        n_prompt: n,
        max_diff_sigma: worst,
        prefill_ms,
        decode_ms,
    })
}

/// max |got − want| over the standard deviation of `want`; NaN anywhere
/// counts as infinitely far.
pub fn diff_sigma(got: &[f32], want: &[f32]) -> f32 {
    let n = want.len().max(1) as f64;
    let mean = want.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = want.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    let sigma = var.sqrt().max(1e-12);
    let mut worst = 0.0f64;
    for (&g, &w) in got.iter().zip(want) {
        let d = (g as f64 - w as f64).abs();
        if !d.is_finite() {
            return f32::INFINITY;
        }
        worst = worst.max(d);
    }
    if got.len() != want.len() {
        return f32::INFINITY;
    }
    (worst / sigma) as f32
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigma_distance() {
        let want = [1.0, -1.0, 1.0, -1.0];
        assert_eq!(diff_sigma(&want, &want), 0.0);
        assert!((diff_sigma(&[1.5, -1.0, 1.0, -1.0], &want) - 0.5).abs() < 1e-6);
        assert_eq!(
            diff_sigma(&[f32::NAN, -1.0, 1.0, -1.0], &want),
            f32::INFINITY
        );
        assert_eq!(diff_sigma(&[1.0], &want), f32::INFINITY);
    }

    #[test]
    fn the_cpu_agrees_with_itself_through_the_case_runner() {
        let spec = CaseSpec {
            backend: "cpu".into(),
            device: None,
            ty: QuantType::Q4_0,
            shape: super::super::shapes::find("tiny").unwrap(),
            prompts: vec![3, 1],
            gpu_timeout: Duration::from_secs(10),
        };
        let mut out = Vec::new();
        run(&spec, &mut out).unwrap();
        let events: Vec<Event> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(matches!(events[0], Event::Started { .. }), "{events:?}");
        assert_eq!(events.len(), 3, "{events:?}");
        for e in &events[1..] {
            let Event::Step(s) = e else { panic!("{e:?}") };
            assert_eq!(s.max_diff_sigma, 0.0, "{s:?}");
        }
    }
}
