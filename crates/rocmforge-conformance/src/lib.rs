//! rocmforge-conformance: one suite, every backend.
//!
//! A backend is correct when it computes what the CPU backend computes, and
//! the CPU backend is correct when it computes what llama.cpp computes
//! (`crates/rocmforge-cpu/tests/reference.rs`). So this suite takes each
//! backend from the registry — the same door the CLI uses — and runs whole
//! models through [`Session`]: the llama.cpp fixtures, and generated models
//! of every weight type in several shapes. Comparing whole models rather
//! than single kernels catches what kernel tests miss (step inputs, graph
//! replay, KV positions, fusion) and needs no per-backend test hooks.
//!
//! A backend that cannot run here (no device) is skipped with a printed
//! reason, unless `ROCMFORGE_REQUIRE_BACKENDS` names it: CI names the ones
//! its machine must run (cpu, and vulkan on lavapipe), so a backend that
//! silently stopped initialising fails instead of passing by skipping.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use rocmforge::registry::{self, BackendOptions, RegistryError};
use rocmforge_core::backend::Backend;
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;
use rocmforge_core::session::{Session, SessionOptions};

/// Environment variable naming backends that must run (comma-separated).
pub const REQUIRE_ENV: &str = "ROCMFORGE_REQUIRE_BACKENDS";

/// Options for every backend under test: software Vulkan devices (lavapipe)
/// are allowed, since CI has no other.
pub fn backend_options() -> BackendOptions {
    BackendOptions {
        threads: 2,
        allow_software_devices: true,
        ..BackendOptions::default()
    }
}

fn required() -> Vec<String> {
    std::env::var(REQUIRE_ENV)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The registry's backends that can run here, by name. Prints why any other
/// is skipped; panics if a required one cannot run.
pub fn backends_under_test() -> Vec<&'static str> {
    let required = required();
    let mut names = Vec::new();
    for entry in registry::backends() {
        match registry::create(entry.name, &backend_options()) {
            Ok(b) => {
                eprintln!("conformance: {} on {}", entry.name, b.info().device);
                names.push(entry.name);
            }
            Err(RegistryError::Unavailable { source, .. })
                if !required.iter().any(|r| r == entry.name) =>
            {
                eprintln!("conformance: skipping {}: {source}", entry.name);
            }
            Err(e) => panic!("required backend {} cannot run: {e}", entry.name),
        }
    }
    for r in &required {
        assert!(
            names.contains(&r.as_str()),
            "{REQUIRE_ENV} names '{r}', which this build does not know"
        );
    }
    names
}

/// [`backends_under_test`] less those that run here only on a software
/// device (lavapipe), for tests that would take it tens of minutes; each
/// one left out is printed with the reason.
pub fn backends_on_hardware(why: &str) -> Vec<&'static str> {
    let hardware = BackendOptions {
        allow_software_devices: false,
        ..backend_options()
    };
    backends_under_test()
        .into_iter()
        .filter(|&b| {
            let ok = registry::create(b, &hardware).is_ok();
            if !ok {
                eprintln!("conformance: {b} runs only on a software device here, left out: {why}");
            }
            ok
        })
        .collect()
}

pub fn create(name: &str) -> Box<dyn Backend> {
    registry::create(name, &backend_options()).unwrap_or_else(|e| panic!("{e}"))
}

pub fn session(model: &Arc<Model>, backend: &str, opts: SessionOptions) -> Session {
    Session::new(Arc::clone(model), create(backend), opts, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{backend}: session: {e}"))
}

fn repo_root() -> PathBuf {
    rocmforge_genmodel::repo_root()
}

pub fn fixture_path(name: &str) -> PathBuf {
    repo_root().join("testdata/reference").join(name)
}

/// Bytes of `testdata/reference/<stem>.<ext>`.
pub fn reference_bytes(stem: &str, ext: &str) -> Vec<u8> {
    let p = fixture_path(&format!("{stem}.{ext}"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Text of `testdata/reference/<stem>.<ext>`.
pub fn reference_text(stem: &str, ext: &str) -> String {
    String::from_utf8(reference_bytes(stem, ext)).unwrap()
}

/// `<stem>.tokens`: the prompt's token ids.
pub fn reference_tokens(stem: &str) -> Vec<u32> {
    reference_text(stem, "tokens")
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect()
}

/// `<stem>.greedy`: each greedy step's token and top-1/top-2 margin.
pub fn reference_greedy(stem: &str) -> Vec<(u32, f32)> {
    reference_text(stem, "greedy")
        .lines()
        .map(|l| {
            let (id, margin) = l.split_once(' ').unwrap();
            (id.parse().unwrap(), margin.parse().unwrap())
        })
        .collect()
}

/// One greedy step in brief (`<stem>.decode`, written by
/// `benches/reference/refdump.cpp`): the logits row's standard deviation
/// and its 16 largest logits, best first.
pub struct DecodeStep {
    pub sd: f32,
    pub top: Vec<(u32, f32)>,
}

/// `<stem>.decode`, a [`DecodeStep`] a line.
pub fn reference_decode(stem: &str) -> Vec<DecodeStep> {
    reference_text(stem, "decode")
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            let sd = f.next().unwrap().parse().unwrap();
            let top = f
                .map(|p| {
                    let (id, v) = p.split_once(':').unwrap();
                    (id.parse().unwrap(), v.parse().unwrap())
                })
                .collect();
            DecodeStep { sd, top }
        })
        .collect()
}

/// A generated family's model with llama.cpp's outputs for it
/// (`testdata/README.md`, "Generated families"): the prompt's tokens and
/// the greedy continuation with each step's top-1/top-2 margin.
pub struct GeneratedReference {
    pub stem: String,
    pub model: Arc<Model>,
    pub tokens: Vec<u32>,
    pub greedy: Vec<(u32, f32)>,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// [`generated_model`] of `preset` in `ty` and its references (stem
/// `<preset>-<TYPE>`). The file must be the one the references were made
/// from: `<stem>.gen` holds its size and FNV-1a hash, so a generator change
/// that would make them stale fails here, by name.
pub fn generated_reference(preset: &str, ty: QuantType) -> GeneratedReference {
    let stem = format!("{preset}-{}", ty.name());
    let model = generated_model(preset, ty);
    let bytes = model.file.as_bytes();
    assert_eq!(
        format!("{} {:016x}", bytes.len(), fnv1a(bytes)),
        reference_text(&stem, "gen").trim(),
        "{stem}: the generated model is not the one the references were made from \
         (size, FNV-1a); regenerate them as testdata/README.md says"
    );
    let tokens = reference_tokens(&stem);
    let greedy = reference_greedy(&stem);
    GeneratedReference {
        stem,
        model,
        tokens,
        greedy,
    }
}

/// A generated model of `preset` with `ty` weights, written once per build
/// tree under `target/conformance-models/` and shared by every test.
pub fn generated_model(preset: &str, ty: QuantType) -> Arc<Model> {
    static LOCK: Mutex<()> = Mutex::new(());
    let dir = repo_root().join("target/conformance-models");
    let path = {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let p = rocmforge_genmodel::find(preset).expect("known preset");
        rocmforge_genmodel::cached(p, ty, &dir)
            .unwrap_or_else(|e| panic!("generate {preset} {ty}: {e}"))
    };
    Arc::new(Model::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// The storage type of every weight of `model`, in table order: two models
/// of one preset with the same list run the same kernels on the same
/// shapes, whatever type was asked for (a K-quant that fell back to Q5_0
/// everywhere is a Q5_0 model), so a sweep over types checks each list once.
pub fn weight_types_of(model: &Model) -> Vec<QuantType> {
    model.weights.table.iter().map(|w| w.ty).collect()
}

/// Error of a logits row relative to the reference row's standard
/// deviation: (max |Δ|/σ, mean |Δ|/σ).
pub fn row_error(ours: &[f32], reference: &[f32]) -> (f32, f32) {
    assert_eq!(ours.len(), reference.len());
    let n = reference.len() as f32;
    let mean = reference.iter().sum::<f32>() / n;
    let sd = (reference.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n).sqrt();
    let (max, sum) = ours
        .iter()
        .zip(reference)
        .map(|(a, b)| {
            if a.is_finite() {
                (a - b).abs()
            } else {
                f32::INFINITY
            }
        })
        .fold((0f32, 0f32), |(m, s), d| (m.max(d), s + d));
    (max / sd, sum / n / sd)
}

pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Tolerances of a backend against the CPU backend, in σ of the CPU's row.
///
/// The CPU quantizes activations to Q8 as ggml does; a GPU backend may keep
/// them in f32 or f16, which moves each logit by a few hundredths of σ on
/// these random-weight models (measured: docs/vulkan.md). A real bug is far
/// outside: dropping RoPE gives 0.31σ max / 0.054σ mean already at position
/// 1, a wrong dequantizer or a stale KV position more.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    pub max: f32,
    pub mean: f32,
}

pub const VS_CPU: Tolerance = Tolerance {
    max: 0.25,
    mean: 0.03,
};

/// A deterministic token sequence below `n_vocab` (xorshift), so prompts are
/// random but reproducible.
pub fn random_tokens(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n_vocab as u64) as u32
        })
        .collect()
}

/// The steps a comparison runs: prompts of these lengths, each in a fresh
/// sequence, cover graphs of 1..16 tokens and positions past a batch.
pub const PROMPT_LENGTHS: &[usize] = &[1, 7, 23];

/// Greedy decode steps a comparison checks after the prompts.
pub const GREEDY_STEPS: usize = 16;

/// Session options of every comparison: a small batch so a 23-token prompt
/// takes 16 + 4 + 2 + 1, four graph sizes.
pub fn compare_options(all_logits: bool) -> SessionOptions {
    SessionOptions {
        kv_types: Default::default(),
        n_ctx: 128,
        n_batch: 16,
        all_logits,
        n_seq: 1,
    }
}

/// Runs `model` through `backend` and the CPU backend: each prompt length
/// with all logits kept, then greedy decoding, and checks every row within
/// `tol`. Greedy tokens (teacher-forced on the CPU's) must agree, unless the
/// CPU's logit of ours is within twice the largest logit difference seen on
/// that row of its top (closer calls are rounding's to make). Returns the
/// worst (max, mean) error seen.
pub fn compare_with_cpu(
    model: &Arc<Model>,
    backend: &str,
    what: &str,
    tol: Tolerance,
) -> (f32, f32) {
    compare_made_with_cpu(model, backend, &|| create(backend), what, tol)
}

/// [`compare_with_cpu`] for a backend `make` builds (a composite such as
/// `ExpertOffload`), named `backend` in messages.
pub fn compare_made_with_cpu(
    model: &Arc<Model>,
    backend: &str,
    make: &dyn Fn() -> Box<dyn Backend>,
    what: &str,
    tol: Tolerance,
) -> (f32, f32) {
    let n_vocab = model.config.n_vocab;
    let mut worst = (0f32, 0f32);
    let mut check = |label: String, ours: &[f32], cpu: &[f32]| {
        assert_eq!(ours.len(), cpu.len(), "{label}: logits size");
        for (row, (a, b)) in ours.chunks(n_vocab).zip(cpu.chunks(n_vocab)).enumerate() {
            let (max, mean) = row_error(a, b);
            worst = (worst.0.max(max), worst.1.max(mean));
            assert!(
                max <= tol.max && mean <= tol.mean,
                "{backend} vs cpu, {what}, {label} row {row}: max {max:.4}σ mean {mean:.4}σ (allowed {:?})",
                tol
            );
        }
    };
    let mut ours_s = Session::new(
        Arc::clone(model),
        make(),
        compare_options(true),
        &mut |_, _| {},
    )
    .unwrap_or_else(|e| panic!("{backend}: session: {e}"));
    let mut cpu_s = session(model, "cpu", compare_options(true));
    for (i, &n) in PROMPT_LENGTHS.iter().enumerate() {
        ours_s.reset();
        cpu_s.reset();
        let prompt = random_tokens(n, n_vocab, 1 + i as u64);
        let ours = ours_s.eval(&prompt).unwrap().to_vec();
        let cpu = cpu_s.eval(&prompt).unwrap().to_vec();
        check(format!("prompt of {n}"), &ours, &cpu);
    }
    let equal = greedy_with_cpu(backend, what, &mut ours_s, &mut cpu_s, &mut check);
    eprintln!(
        "{backend} vs cpu, {what}: worst max {:.4}σ mean {:.4}σ, greedy {equal}/{GREEDY_STEPS} \
         tokens equal (the rest near ties)",
        worst.0, worst.1
    );
    worst
}

/// Checks one step's logits, ours and the CPU's, under a label.
type RowCheck<'a> = dyn FnMut(String, &[f32], &[f32]) + 'a;

/// Greedy decoding of [`GREEDY_STEPS`] tokens after what both sessions
/// hold, teacher-forced on the CPU's tokens so that one near tie does not
/// end the comparison: every row goes through `check`, and at every step
/// our top token must be the CPU's, or one whose CPU logit lies within
/// twice the largest difference seen on that row (a tie rounding may break
/// either way). Returns the steps whose tokens were equal.
fn greedy_with_cpu(
    backend: &str,
    what: &str,
    ours_s: &mut Session,
    cpu_s: &mut Session,
    check: &mut RowCheck,
) -> usize {
    let (mut ours, mut cpu) = (
        ours_s.eval(&[1]).unwrap().to_vec(),
        cpu_s.eval(&[1]).unwrap().to_vec(),
    );
    let mut equal = 0;
    for step in 0..GREEDY_STEPS {
        check(format!("decode step {step}"), &ours, &cpu);
        let (t_ours, t_cpu) = (argmax(&ours), argmax(&cpu));
        if t_ours == t_cpu {
            equal += 1;
        } else {
            let max_diff = ours
                .iter()
                .zip(&cpu)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let gap = cpu[t_cpu as usize] - cpu[t_ours as usize];
            assert!(
                gap <= 2.0 * max_diff,
                "{backend} vs cpu, {what}: greedy step {step} picks token {t_ours} where the \
                 CPU picks {t_cpu}, {gap:.5} below its top (rounding explains at most {:.5})",
                2.0 * max_diff
            );
        }
        ours = ours_s.eval(&[t_cpu]).unwrap().to_vec();
        cpu = cpu_s.eval(&[t_cpu]).unwrap().to_vec();
    }
    equal
}

/// [`compare_with_cpu`] at depth: a random prompt of `prompt` tokens in a
/// context of `n_ctx` (evaluated in pieces of 256), its last row checked,
/// then greedy decoding over it, every row within `tol`. Decode attention
/// here walks hundreds of positions, split over runs on a GPU
/// (`rocmforge_core::gpu::split`).
pub fn compare_at_depth_with_cpu(
    model: &Arc<Model>,
    backend: &str,
    label: &str,
    (prompt, n_ctx): (usize, usize),
    tol: Tolerance,
) -> (f32, f32) {
    let what = format!("{label}, prompt of {prompt} in a context of {n_ctx}");
    let n_vocab = model.config.n_vocab;
    let mut worst = (0f32, 0f32);
    let mut check = |label: String, ours: &[f32], cpu: &[f32]| {
        assert_eq!(ours.len(), cpu.len(), "{label}: logits size");
        for (a, b) in ours.chunks(n_vocab).zip(cpu.chunks(n_vocab)) {
            let (max, mean) = row_error(a, b);
            worst = (worst.0.max(max), worst.1.max(mean));
            assert!(
                max <= tol.max && mean <= tol.mean,
                "{backend} vs cpu, {what}, {label}: max {max:.4}σ mean {mean:.4}σ (allowed {tol:?})"
            );
        }
    };
    let opts = SessionOptions {
        kv_types: Default::default(),
        n_ctx,
        n_batch: 256,
        all_logits: false,
        n_seq: 1,
    };
    let mut ours_s = session(model, backend, opts);
    let mut cpu_s = session(model, "cpu", opts);
    let tokens = random_tokens(prompt, n_vocab, 7);
    let ours = ours_s.eval(&tokens).unwrap().to_vec();
    let cpu = cpu_s.eval(&tokens).unwrap().to_vec();
    check("the prompt's last row".into(), &ours, &cpu);
    let equal = greedy_with_cpu(backend, &what, &mut ours_s, &mut cpu_s, &mut check);
    eprintln!(
        "{backend} vs cpu, {what}: worst max {:.4}σ mean {:.4}σ, greedy {equal}/{GREEDY_STEPS} \
         tokens equal (the rest near ties)",
        worst.0, worst.1
    );
    worst
}

/// Serialises tests that use a GPU device: lavapipe and small GPUs are
/// happier with one session at a time, and timings in the log stay readable.
pub fn device_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| Mutex::new(()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}
