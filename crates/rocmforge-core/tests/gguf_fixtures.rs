//! The reader against real llama.cpp files: they parse, their contents agree with
//! the reference outputs next to them, the writer reproduces them byte for byte,
//! and damaged copies fail cleanly.

use std::path::{Path, PathBuf};

use rocmforge_core::gguf::{GgufError, GgufFile, GgufValue, GgufWriter};

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

const MODELS: [(&str, &str); 3] = [
    ("tiny-llama-Q4_K_M", "llama"),
    ("tiny-qwen2-Q8_0", "qwen2"),
    ("tiny-qwen3-Q8_0", "qwen3"),
];

const VOCABS: [(&str, &str); 3] = [
    ("ggml-vocab-gpt-2", "gpt2"),
    ("ggml-vocab-llama-spm", "llama"),
    ("ggml-vocab-qwen2", "gpt2"),
];

fn model_path(stem: &str) -> PathBuf {
    testdata(&format!("reference/{stem}.gguf"))
}

/// The vocabulary size implied by the reference logits: `n_prompt x n_vocab`
/// f32 values, with one prompt token per line of the `.tokens` file.
fn vocab_size_from_logits(stem: &str) -> u64 {
    let logits = std::fs::metadata(testdata(&format!("reference/{stem}.logits")))
        .unwrap()
        .len();
    let tokens = std::fs::read_to_string(testdata(&format!("reference/{stem}.tokens"))).unwrap();
    let n_prompt = tokens.lines().filter(|l| !l.trim().is_empty()).count() as u64;
    assert_eq!(logits % (4 * n_prompt), 0);
    logits / (4 * n_prompt)
}

fn check_tensor_layout(f: &GgufFile) {
    assert_eq!(f.data_offset() % f.alignment(), 0);
    let mut ranges = Vec::new();
    for t in f.tensors() {
        assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes, "{}", t.name);
        assert_eq!(
            Some(t.n_bytes),
            t.ty.bytes_for(t.n_elements()),
            "{}",
            t.name
        );
        assert_eq!(t.offset % f.alignment(), 0, "{}", t.name);
        assert!(f.data_offset() + t.offset + t.n_bytes <= f.file_size());
        assert!(std::ptr::eq(f.tensor(&t.name).unwrap(), t));
        ranges.push((t.offset, t.offset + t.n_bytes));
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(w[0].1 <= w[1].0, "tensor data overlaps: {w:?}");
    }
}

#[test]
fn reference_models_parse() {
    for (stem, arch) in MODELS {
        let f = GgufFile::open(&model_path(stem)).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.architecture(), Some(arch), "{stem}");
        assert!(!f.tensors().is_empty());
        assert_eq!(f.alignment(), 32);
        check_tensor_layout(&f);

        let n_vocab = vocab_size_from_logits(stem);
        let tokens = f.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
        assert_eq!(tokens.len() as u64, n_vocab, "{stem}");
        assert!(tokens.iter().all(|t| t.as_str().is_some()));

        // token_embd is [n_embd, n_vocab] in ggml order.
        let n_embd = f
            .get(&format!("{arch}.embedding_length"))
            .and_then(GgufValue::as_u64)
            .unwrap();
        let embd = f.tensor("token_embd.weight").unwrap();
        assert_eq!(embd.shape, vec![n_embd, n_vocab], "{stem}");

        let n_layer = f
            .get(&format!("{arch}.block_count"))
            .and_then(GgufValue::as_u64)
            .unwrap();
        let last = format!("blk.{}.attn_norm.weight", n_layer - 1);
        assert_eq!(f.tensor(&last).unwrap().shape, vec![n_embd]);
        assert!(f
            .tensor(&format!("blk.{n_layer}.attn_norm.weight"))
            .is_none());
    }
}

#[test]
fn norm_weights_are_finite_f32() {
    let f = GgufFile::open(&model_path("tiny-llama-Q4_K_M")).unwrap();
    let t = f.tensor("output_norm.weight").unwrap();
    assert_eq!(t.ty, rocmforge_core::quant::QuantType::F32);
    let data = f.tensor_data(t);
    assert!(data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .all(|v| v.is_finite()));
}

#[test]
fn vocab_only_files_parse() {
    for (stem, model) in VOCABS {
        let f = GgufFile::open(&testdata(&format!("tokenizer/{stem}.gguf"))).unwrap();
        assert!(f.tensors().is_empty());
        assert_eq!(
            f.get("tokenizer.ggml.model").and_then(GgufValue::as_str),
            Some(model),
            "{stem}"
        );
        let tokens = f.get("tokenizer.ggml.tokens").unwrap();
        assert_eq!(tokens.type_name(), "array[string]");
        assert!(tokens.as_array().unwrap().len() > 1000);
        // Keys are unique, so get() finds each entry at its own position.
        for (k, v) in f.metadata() {
            assert!(std::ptr::eq(f.get(k).unwrap(), v));
        }
    }
}

#[test]
fn mapped_and_owned_parses_agree() {
    let path = testdata("tokenizer/ggml-vocab-llama-spm.gguf");
    let mapped = GgufFile::open(&path).unwrap();
    let owned = GgufFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(mapped.metadata(), owned.metadata());
    assert_eq!(mapped.tensors(), owned.tensors());
    assert_eq!(mapped.data_offset(), owned.data_offset());
    assert_eq!(mapped.as_bytes(), owned.as_bytes());
}

/// Copying a llama.cpp file through our writer must give back the same bytes:
/// an independent check of the writer's encoding and layout.
#[test]
fn writer_reproduces_reference_files() {
    let models = MODELS.iter().map(|(stem, _)| model_path(stem));
    let vocabs = VOCABS
        .iter()
        .map(|(stem, _)| testdata(&format!("tokenizer/{stem}.gguf")));
    for path in models.chain(vocabs) {
        let original = std::fs::read(&path).unwrap();
        let f = GgufFile::from_bytes(original.clone()).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in f.metadata() {
            w.add_metadata(k, v.clone());
        }
        for t in f.tensors() {
            w.add_tensor(&t.name, &t.shape, t.ty, f.tensor_data(t).to_vec())
                .unwrap();
        }
        let copy = w.to_bytes().unwrap();
        assert_eq!(copy.len(), original.len(), "{}", path.display());
        assert!(copy == original, "{} differs", path.display());
    }
}

fn expect_error(bytes: &[u8], cut: usize) {
    match GgufFile::from_bytes(bytes[..cut].to_vec()) {
        Err(GgufError::Io { .. }) => panic!("unexpected io error at cut {cut}"),
        Err(_) => {}
        Ok(_) => panic!("file cut to {cut} bytes parsed"),
    }
}

#[test]
fn truncated_files_fail_cleanly() {
    let bytes = std::fs::read(model_path("tiny-llama-Q4_K_M")).unwrap();
    let full = GgufFile::from_bytes(bytes.clone()).unwrap();
    let header_end = full.data_offset() as usize;
    let data_end = full
        .tensors()
        .iter()
        .map(|t| full.data_offset() + t.offset + t.n_bytes)
        .max()
        .unwrap() as usize;
    // Every cut inside the first 4 KiB.
    for cut in 0..4096 {
        expect_error(&bytes, cut);
    }
    // Strided through the rest of the header, including its very end.
    for cut in (4096..header_end).step_by(4099).chain([header_end - 1]) {
        expect_error(&bytes, cut);
    }
    // Through the data section: the last tensor no longer fits.
    for cut in (header_end..data_end)
        .step_by(data_end / 41)
        .chain([data_end - 1])
    {
        expect_error(&bytes, cut);
    }
    // Trailing padding after the last tensor is optional.
    assert!(GgufFile::from_bytes(bytes[..data_end].to_vec()).is_ok());
}

/// Cuts in the data section are reported against the tensor that no longer fits.
#[test]
fn truncated_data_names_the_tensor() {
    let bytes = std::fs::read(model_path("tiny-qwen2-Q8_0")).unwrap();
    let full = GgufFile::from_bytes(bytes.clone()).unwrap();
    let t = &full.tensors()[full.tensors().len() / 2];
    let cut = (full.data_offset() + t.offset + t.n_bytes - 1) as usize;
    match GgufFile::from_bytes(bytes[..cut].to_vec()) {
        Err(GgufError::TensorOutOfBounds { tensor, .. }) => {
            // Any tensor ending past the cut may be named; this one does.
            let named = full.tensor(&tensor).unwrap();
            assert!(full.data_offset() + named.offset + named.n_bytes > cut as u64);
        }
        other => panic!("expected TensorOutOfBounds, got {other:?}"),
    }
}
