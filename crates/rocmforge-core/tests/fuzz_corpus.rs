//! The fuzz targets' committed inputs under plain `cargo test`: every seed
//! (`fuzz/seeds/<target>/`) and every crash reproducer
//! (`fuzz/regressions/<target>/`) goes through the same check the fuzz
//! target runs, so a fixed crash stays fixed without nightly or libFuzzer.
//!
//! `write_seed_corpus` (ignored) regenerates the seeds:
//! `cargo test -p rocmforge-core --test fuzz_corpus -- --ignored write_seed_corpus`.

#[path = "../fuzz/src/lib.rs"]
mod fuzz_checks;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use rocmforge_core::gguf::{GgufFile, GgufValue, GgufWriter};
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;
use rocmforge_core::tokenizer::Tokenizer;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `fuzz/<kind>/<target>/`, sorted; none if it does not exist.
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(fuzz_dir().join(kind).join(target)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` on every seed and reproducer of `target`, reporting each
/// file that panics.
fn replay(target: &str, check: fn(&[u8])) {
    let seeds = inputs("seeds", target);
    assert!(!seeds.is_empty(), "no seeds for {target}");
    let mut failures = Vec::new();
    for path in seeds.iter().chain(&inputs("regressions", target)) {
        let data = std::fs::read(path).expect("readable input");
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failures.push(path.display().to_string());
        }
    }
    assert!(failures.is_empty(), "{target} panics on: {failures:#?}");
}

#[test]
fn gguf_parse_inputs() {
    replay("gguf_parse", fuzz_checks::gguf_parse);
}

#[test]
fn model_load_inputs() {
    replay("model_load", fuzz_checks::model_load);
}

#[test]
fn tokenizer_inputs() {
    replay("tokenizer", fuzz_checks::tokenizer);
}

#[test]
fn tokenizer_meta_inputs() {
    replay("tokenizer_meta", fuzz_checks::tokenizer_meta);
}

/// Seeds that stop loading would leave the fuzzer at the shallow end of
/// the loader; the model seeds must load and the vocabulary seeds build.
#[test]
fn seeds_reach_past_the_checks() {
    for path in inputs("seeds", "model_load") {
        let file = GgufFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
        Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Model::from_file(file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    for path in inputs("seeds", "tokenizer_meta") {
        let file = GgufFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
        Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[test]
#[ignore = "writes fuzz/seeds/; run by hand after changing the generators"]
fn write_seed_corpus() {
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = fuzz_dir().join("seeds").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    for arch in ["llama", "qwen2", "qwen3"] {
        let bytes = seeds::tiny_model(arch);
        write("model_load", &format!("tiny-{arch}.gguf"), &bytes);
        write("gguf_parse", &format!("tiny-{arch}.gguf"), &bytes);
    }
    for (name, vocab) in [("spm", seeds::spm_vocab()), ("bpe", seeds::bpe_vocab())] {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", GgufValue::from("llama"));
        for (k, v) in vocab {
            w.add_metadata(k, v);
        }
        let bytes = w.to_bytes().unwrap();
        write("tokenizer_meta", &format!("vocab-{name}.gguf"), &bytes);
        write("gguf_parse", &format!("vocab-{name}.gguf"), &bytes);
    }
    for (name, bytes) in seeds::odd_files() {
        write("gguf_parse", name, &bytes);
    }
    let inp = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tokenizer/ggml-vocab-llama-spm.gguf.inp");
    let inp = std::fs::read_to_string(inp).unwrap();
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    texts.pop(); // After the last separator.
    texts.extend(seeds::EXTRA_TEXTS);
    for (i, text) in texts.iter().enumerate() {
        write("tokenizer", &format!("text-{i:02}.txt"), text.as_bytes());
    }
}

/// Small inputs that reach deep: a 10 kB model gets past every check to the
/// graph builder, where a real one would spend the fuzzer's time in
/// megabytes of tensor data.
mod seeds {
    use super::*;

    pub const EXTRA_TEXTS: &[&str] = &[
        "<|im_start|>user\nHello world<|im_end|>\n",
        "<s>Hello</s> <unk>",
        "\u{2581}the\u{2581}\u{2581}world",
        "🦀 é\u{301} \u{FEFF}\r\n\t",
    ];

    type Metadata = Vec<(&'static str, GgufValue)>;

    /// SentencePiece vocabulary: specials, byte fallbacks, pieces.
    pub fn spm_vocab() -> Metadata {
        let pieces = [
            "▁", "▁t", "▁th", "▁the", "th", "he", "e", "t", "h", "a", "o", "w", "r", "l", "d", "n",
            "H", "▁a", "▁w", "or", "ld", "▁wor", "▁world", "el", "lo", "▁Hel", "▁Hello",
        ];
        let mut tokens = vec![
            "<unk>", "<s>", "</s>", "<0x0A>", "<0x20>", "<0xC3>", "<0xA9>",
        ];
        let mut types = vec![2, 3, 3, 6, 6, 6, 6];
        tokens.extend(pieces);
        types.extend(pieces.iter().map(|_| 1));
        let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
        vec![
            ("tokenizer.ggml.model", GgufValue::from("llama")),
            ("tokenizer.ggml.pre", GgufValue::from("default")),
            ("tokenizer.ggml.tokens", GgufValue::from(tokens)),
            ("tokenizer.ggml.scores", GgufValue::from(scores)),
            ("tokenizer.ggml.token_type", GgufValue::from(types)),
            ("tokenizer.ggml.bos_token_id", GgufValue::U32(1)),
            ("tokenizer.ggml.eos_token_id", GgufValue::U32(2)),
            ("tokenizer.ggml.unknown_token_id", GgufValue::U32(0)),
            ("tokenizer.ggml.add_bos_token", GgufValue::Bool(true)),
        ]
    }

    /// Byte-level BPE vocabulary with merges and chat specials.
    pub fn bpe_vocab() -> Metadata {
        let merges = [
            "Ġ t", "t h", "h e", "Ġt h", "th e", "Ġth e", "l l", "l o", "Ġ w", "o r", "l d",
            "Ġw or", "Ġwor ld", "H e", "He l", "Hel l", "Hell o",
        ];
        let mut tokens: Vec<String> = "Helowrdthanis!123ÃĠĊ©".chars().map(String::from).collect();
        tokens.extend(merges.iter().map(|m| m.replace(' ', "")));
        let n_normal = tokens.len();
        tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from));
        let types: Vec<i32> = (0..tokens.len())
            .map(|i| if i < n_normal { 1 } else { 3 })
            .collect();
        let eos = GgufValue::U32(n_normal as u32);
        vec![
            ("tokenizer.ggml.model", GgufValue::from("gpt2")),
            ("tokenizer.ggml.pre", GgufValue::from("qwen2")),
            ("tokenizer.ggml.tokens", GgufValue::from(tokens)),
            ("tokenizer.ggml.token_type", GgufValue::from(types)),
            ("tokenizer.ggml.merges", GgufValue::from(merges.to_vec())),
            ("tokenizer.ggml.eos_token_id", eos.clone()),
            ("tokenizer.ggml.padding_token_id", eos.clone()),
            ("tokenizer.ggml.bos_token_id", eos),
        ]
    }

    /// Deterministic bytes: a Q8_0 block is an f16 scale and 32 int8s, and
    /// any bytes are valid ones.
    fn bytes(n: u64, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2654435761) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 24) as u8
            })
            .collect()
    }

    fn ones(n: usize) -> Vec<u8> {
        (0..n).flat_map(|_| 1.0f32.to_le_bytes()).collect()
    }

    /// One block of a model with the architecture's own tensors: llama with
    /// a separate output head and RoPE factors, qwen2 with Q/K/V biases and
    /// tied embeddings, qwen3 with Q/K norms and an explicit head size.
    pub fn tiny_model(arch: &str) -> Vec<u8> {
        let (n_embd, n_head, n_head_kv, head_dim, n_ff) = (32u64, 2u64, 1u64, 16u64, 64u64);
        let vocab = if arch == "llama" {
            spm_vocab()
        } else {
            bpe_vocab()
        };
        let n_vocab = match &vocab[2].1 {
            GgufValue::Array(tokens) => tokens.len() as u64,
            _ => unreachable!("tokens come third"),
        };
        let mut w = GgufWriter::new();
        let key = |k: &str| format!("{arch}.{k}");
        w.add_metadata("general.architecture", GgufValue::from(arch));
        for (k, v) in [
            ("context_length", GgufValue::U32(128)),
            ("embedding_length", GgufValue::U32(n_embd as u32)),
            ("block_count", GgufValue::U32(1)),
            ("feed_forward_length", GgufValue::U32(n_ff as u32)),
            ("attention.head_count", GgufValue::U32(n_head as u32)),
            ("attention.head_count_kv", GgufValue::U32(n_head_kv as u32)),
            ("rope.freq_base", GgufValue::F32(10000.0)),
            ("attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5)),
            ("rope.dimension_count", GgufValue::U32(head_dim as u32)),
        ] {
            w.add_metadata(&key(k), v);
        }
        if arch == "qwen3" {
            w.add_metadata(
                &key("attention.key_length"),
                GgufValue::U32(head_dim as u32),
            );
            w.add_metadata(
                &key("attention.value_length"),
                GgufValue::U32(head_dim as u32),
            );
        }
        for (k, v) in vocab {
            w.add_metadata(k, v);
        }
        let mut seed = 0;
        let mut matrix = |w: &mut GgufWriter, name: &str, cols: u64, rows: u64| {
            seed += 1;
            let n = QuantType::Q8_0.bytes_for(cols * rows).unwrap();
            let data = bytes(n, seed);
            w.add_tensor(name, &[cols, rows], QuantType::Q8_0, data)
                .unwrap();
        };
        let vector = |w: &mut GgufWriter, name: &str, len: u64| {
            let data = ones(len as usize);
            w.add_tensor(name, &[len], QuantType::F32, data).unwrap();
        };
        let (q, kv) = (n_head * head_dim, n_head_kv * head_dim);
        if arch == "llama" {
            vector(&mut w, "rope_freqs.weight", head_dim / 2);
            matrix(&mut w, "output.weight", n_embd, n_vocab);
        }
        matrix(&mut w, "token_embd.weight", n_embd, n_vocab);
        vector(&mut w, "output_norm.weight", n_embd);
        vector(&mut w, "blk.0.attn_norm.weight", n_embd);
        matrix(&mut w, "blk.0.attn_q.weight", n_embd, q);
        matrix(&mut w, "blk.0.attn_k.weight", n_embd, kv);
        matrix(&mut w, "blk.0.attn_v.weight", n_embd, kv);
        if arch == "qwen2" {
            vector(&mut w, "blk.0.attn_q.bias", q);
            vector(&mut w, "blk.0.attn_k.bias", kv);
            vector(&mut w, "blk.0.attn_v.bias", kv);
        }
        if arch == "qwen3" {
            vector(&mut w, "blk.0.attn_q_norm.weight", head_dim);
            vector(&mut w, "blk.0.attn_k_norm.weight", head_dim);
        }
        matrix(&mut w, "blk.0.attn_output.weight", q, n_embd);
        vector(&mut w, "blk.0.ffn_norm.weight", n_embd);
        matrix(&mut w, "blk.0.ffn_gate.weight", n_embd, n_ff);
        matrix(&mut w, "blk.0.ffn_up.weight", n_embd, n_ff);
        matrix(&mut w, "blk.0.ffn_down.weight", n_ff, n_embd);
        w.to_bytes().unwrap()
    }

    /// Files that are valid but unlike the converters' output: nothing in
    /// them, version 2, every value type with nested arrays, a larger
    /// alignment with odd tensor shapes.
    pub fn odd_files() -> Vec<(&'static str, Vec<u8>)> {
        let empty = GgufWriter::new().to_bytes().unwrap();
        let mut v2 = empty.clone();
        v2[4] = 2;
        let mut all_types = GgufWriter::new();
        let values = [
            GgufValue::U8(1),
            GgufValue::I8(-1),
            GgufValue::U16(2),
            GgufValue::I16(-2),
            GgufValue::U32(3),
            GgufValue::I32(-3),
            GgufValue::F32(0.5),
            GgufValue::Bool(true),
            GgufValue::from("text"),
            GgufValue::U64(4),
            GgufValue::I64(-4),
            GgufValue::F64(0.25),
            GgufValue::from(vec![vec![1u8, 2], vec![]]),
            GgufValue::from(vec!["a", ""]),
        ];
        for (i, v) in values.into_iter().enumerate() {
            all_types.add_metadata(&format!("k{i}"), v);
        }
        let mut aligned = GgufWriter::new();
        aligned.add_metadata("general.alignment", GgufValue::U32(64));
        aligned
            .add_tensor("scalar", &[], QuantType::F16, vec![0; 2])
            .unwrap();
        let n = QuantType::Q4K.bytes_for(256 * 2).unwrap();
        aligned
            .add_tensor("q4k", &[256, 1, 2, 1], QuantType::Q4K, bytes(n, 7))
            .unwrap();
        vec![
            ("empty.gguf", empty),
            ("v2.gguf", v2),
            ("all-types.gguf", all_types.to_bytes().unwrap()),
            ("aligned.gguf", aligned.to_bytes().unwrap()),
        ]
    }
}
