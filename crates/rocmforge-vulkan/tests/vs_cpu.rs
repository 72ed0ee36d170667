//! The Vulkan backend against the CPU reference, through whole models and
//! plain `Session` use: tiny llama / qwen2 / qwen3 models generated in each
//! weight type the shaders implement, plus the fixtures in
//! `testdata/reference`.
//!
//! Each model runs the same token stream on both backends with `n_batch`
//! 16: a 23-token prompt (steps of 16, 4, 2 and 1 tokens, so the tiled
//! matmul, the mat-vec and several graph sizes and positions are used),
//! three decode steps, then, after a reset, a 7-token prompt and a 1-token
//! one. Every row of logits is compared relative to the CPU row's standard
//! deviation σ.
//!
//! Tolerance. The CPU backend quantizes activations (Q8_0/Q8_K, ggml
//! style) and accumulates V in f16; these kernels keep f32 activations and
//! an f32 V accumulator, so the two differ by the activation quantization
//! noise, growing with depth. Measured on lavapipe (see the printed table):
//! see `MAX_REL` / `MEAN_REL` for the bounds with headroom. Position 0 has
//! no attention mixing but the same activation noise, so it gets no
//! tighter bound beyond the max one.
//!
//! Skips (printing why) when no Vulkan device is present.

use std::path::PathBuf;
use std::sync::Arc;

use rocmforge_core::backend::{Backend, BackendError};
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;
use rocmforge_core::session::{Session, SessionOptions};
use rocmforge_cpu::CpuBackend;
use rocmforge_vulkan::{VulkanBackend, VulkanOptions};

const MAX_REL: f32 = 0.25;
const MEAN_REL: f32 = 0.04;

fn vulkan() -> Result<VulkanBackend, BackendError> {
    VulkanBackend::new(VulkanOptions {
        allow_cpu: true,
        ..VulkanOptions::from_env()
    })
}

/// The backend, or None (after printing why) where Vulkan is unavailable.
fn vulkan_or_skip() -> Option<VulkanBackend> {
    match vulkan() {
        Ok(b) => Some(b),
        Err(e @ BackendError::Unavailable(_)) => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn generated(preset: &str, ty: QuantType) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vulkan-models");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{preset}-{}.gguf", ty.name()));
    if !path.exists() {
        let p = rocmforge_genmodel::find(preset).unwrap();
        rocmforge_genmodel::write_file(
            p,
            ty,
            rocmforge_genmodel::DEFAULT_SEED,
            &path,
            &indicatif::ProgressBar::hidden(),
        )
        .unwrap();
    }
    path
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference")
        .join(name)
}

/// The token stream: (reset first?, tokens) per eval call.
fn script(n_vocab: usize) -> Vec<(bool, Vec<u32>)> {
    let mut x = 12345u64;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 33) % n_vocab as u64) as u32
    };
    let mut s = vec![(false, (0..23).map(|_| next()).collect::<Vec<_>>())];
    for _ in 0..3 {
        s.push((false, vec![next()]));
    }
    s.push((true, (0..7).map(|_| next()).collect()));
    s.push((true, vec![next()]));
    s
}

fn run(model: &Arc<Model>, backend: Box<dyn Backend>) -> Vec<Vec<f32>> {
    let opts = SessionOptions {
        n_ctx: 64,
        n_batch: 16,
        all_logits: true,
    };
    let n_vocab = model.config.n_vocab;
    let mut s = Session::new(Arc::clone(model), backend, opts, &mut |_, _| {}).unwrap();
    let mut rows = Vec::new();
    for (reset, tokens) in script(n_vocab) {
        if reset {
            s.reset();
        }
        let logits = s.eval(&tokens).unwrap();
        rows.extend(logits.chunks_exact(n_vocab).map(<[f32]>::to_vec));
    }
    rows
}

/// (max, mean) of |a - b| / σ(b) over rows, and the worst row's index.
fn compare(ours: &[Vec<f32>], cpu: &[Vec<f32>]) -> (f32, f32, usize) {
    let (mut max, mut mean_max, mut worst) = (0.0f32, 0.0f32, 0);
    for (i, (a, b)) in ours.iter().zip(cpu).enumerate() {
        let n = b.len() as f64;
        let mu = b.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let sd = (b.iter().map(|&v| (f64::from(v) - mu).powi(2)).sum::<f64>() / n).sqrt() as f32;
        let d: Vec<f32> = a.iter().zip(b).map(|(x, y)| (x - y).abs() / sd).collect();
        assert!(
            d.iter().all(|v| v.is_finite()),
            "row {i}: non-finite logits"
        );
        let m = d.iter().cloned().fold(0.0, f32::max);
        let mean = d.iter().sum::<f32>() / d.len() as f32;
        if m > max {
            max = m;
            worst = i;
        }
        mean_max = mean_max.max(mean);
    }
    (max, mean_max, worst)
}

fn check(path: &std::path::Path) {
    let Some(vk) = vulkan_or_skip() else { return };
    let model = Arc::new(Model::load(path).unwrap());
    let cpu = run(&model, Box::new(CpuBackend::new(2)));
    let ours = run(&model, Box::new(vk));
    assert_eq!(ours.len(), cpu.len());
    let (max, mean, worst) = compare(&ours, &cpu);
    eprintln!(
        "{}: max {max:.4}σ (row {worst}), worst row mean {mean:.4}σ",
        path.file_name().unwrap().to_string_lossy()
    );
    assert!(
        max < MAX_REL,
        "{}: max {max}σ at row {worst}",
        path.display()
    );
    assert!(mean < MEAN_REL, "{}: mean {mean}σ", path.display());
}

const TYPES: [QuantType; 5] = [
    QuantType::F32,
    QuantType::F16,
    QuantType::BF16,
    QuantType::Q4_0,
    QuantType::Q8_0,
];

#[test]
fn tiny_llama() {
    for ty in TYPES {
        check(&generated("tiny-llama", ty));
    }
}

#[test]
fn tiny_qwen2() {
    for ty in TYPES {
        check(&generated("tiny-qwen2", ty));
    }
}

#[test]
fn tiny_qwen3() {
    for ty in TYPES {
        check(&generated("tiny-qwen3", ty));
    }
}

#[test]
fn reference_fixtures() {
    for stem in ["tiny-qwen2-Q8_0", "tiny-qwen3-Q8_0", "tiny-llama-Q4_K_M"] {
        check(&fixture(&format!("{stem}.gguf")));
    }
}
