//! Q4_0 matrices repacked at load (the interleaved layout) must give the
//! logits of the file-order kernels.
//!
//! The tiny-qwen2 fixture is requantized to Q4_0 and written to a file, then
//! run by a backend that repacks and one that does not.

use std::sync::Arc;

use rocmforge_core::backend::Backend;
use rocmforge_core::gguf::{GgufFile, GgufWriter};
use rocmforge_core::model::{FfnWeights, Model};
use rocmforge_core::plan::KvLayout;
use rocmforge_core::quant::{dequantize, quantize_to_vec, QuantType};
use rocmforge_core::session::{Session, SessionOptions};
use rocmforge_cpu::CpuBackend;

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference")
        .join(name)
}

/// The fixture with every Q8_0 matrix requantized to Q4_0.
fn q4_0_model_bytes() -> Vec<u8> {
    let src = GgufFile::open(&fixture("tiny-qwen2-Q8_0.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata() {
        w.add_metadata(key, value.clone());
    }
    for t in src.tensors() {
        let data = src.tensor_data(t).to_vec();
        if t.ty == QuantType::Q8_0 {
            let n = t.shape.iter().product::<u64>() as usize;
            let mut f = vec![0.0; n];
            dequantize(QuantType::Q8_0, &data, &mut f).unwrap();
            let q = quantize_to_vec(QuantType::Q4_0, &f).unwrap();
            w.add_tensor(&t.name, &t.shape, QuantType::Q4_0, q).unwrap();
        } else {
            w.add_tensor(&t.name, &t.shape, t.ty, data).unwrap();
        }
    }
    w.to_bytes().unwrap()
}

fn prompt() -> Vec<u32> {
    std::fs::read_to_string(fixture("tiny-qwen2-Q8_0.tokens"))
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect()
}

/// Logits of the prompt (every position) and of three decode steps, and
/// the allocations the backend made.
fn run(model: Arc<Model>, backend: CpuBackend) -> (Vec<f32>, usize) {
    let opts = SessionOptions {
        kv_types: Default::default(),
        n_ctx: 64,
        n_batch: 64,
        all_logits: true,
        n_seq: 1,
    };
    let backend = Box::new(backend);
    let mut s = Session::new(model, backend, opts, &mut |_, _| {}).unwrap();
    let mut out = s.eval(&prompt()).unwrap().to_vec();
    for t in [17u32, 4000, 99] {
        out.extend_from_slice(s.eval(&[t]).unwrap());
    }
    (out, s.backend().allocations().device_allocations)
}

#[test]
fn repacked_q4_0_gives_the_file_order_logits() {
    let bytes = q4_0_model_bytes();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("tiny-qwen2-Q4_0.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let from_file = Arc::new(Model::load(&path).unwrap());

    let mut probe = CpuBackend::new(1);
    let kv = KvLayout::new(&from_file.config, 16, 16);
    probe.load(&from_file, &kv, &mut |_, _| {}).unwrap();
    let mut plain = CpuBackend::new(1).without_repacking();
    plain.load(&from_file, &kv, &mut |_, _| {}).unwrap();
    assert_eq!(plain.interleaved_matrices(), 0);
    if probe.interleaved_matrices() == 0 {
        // No AVX2: nothing is repacked, and there is nothing to compare.
        return;
    }
    // Every Q4_0 matmul weight whose rows fill whole groups of eight,
    // including the tied output head (read by the embedding lookup too).
    let w = &from_file.weights;
    let mut matmul = vec![w.output];
    for l in &w.layers {
        matmul.extend([l.wq, l.wk, l.wv, l.wo]);
        if let FfnWeights::Dense { gate, up, down } = l.ffn {
            matmul.extend([gate, up, down]);
        }
    }
    let expected = matmul
        .iter()
        .filter(|&&id| w.table[id].ty == QuantType::Q4_0 && w.table[id].rows.is_multiple_of(8))
        .count();
    assert!(
        expected > w.layers.len(),
        "the test model has too few Q4_0 matrices"
    );
    assert_eq!(probe.interleaved_matrices(), expected);

    // The repacked weights are a region of their own: one more allocation.
    let count = |b: &CpuBackend| b.allocations().device_allocations;
    assert_eq!(count(&probe), count(&plain) + 1);

    let ((a, allocations), (b, _)) = (
        run(Arc::clone(&from_file), CpuBackend::new(2)),
        run(from_file, CpuBackend::new(2).without_repacking()),
    );
    assert!(allocations <= 4, "{allocations} allocations");
    assert_eq!(a.len(), b.len());
    let n_vocab = 151936;
    for (row, (ra, rb)) in a.chunks(n_vocab).zip(b.chunks(n_vocab)).enumerate() {
        let mean = rb.iter().sum::<f32>() / n_vocab as f32;
        let sd = (rb.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n_vocab as f32).sqrt();
        // Same integer block sums; only float summation order may differ
        // (the decode kernels), an ulp of partial sums per block.
        let worst = ra
            .iter()
            .zip(rb)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(worst <= 1e-3 * sd, "row {row}: max |Δ| {worst} vs σ {sd}");
    }
}
