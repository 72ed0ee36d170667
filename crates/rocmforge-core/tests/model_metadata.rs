//! Hyperparameter values the loader must refuse with a message naming the
//! key and the value, and values llama.cpp accepts that must load the same
//! model. `crates/rocmforge/tests/metadata_sweep.rs` tries every key with
//! every kind of bad value; these pin the exact outcome of a few.

use std::path::PathBuf;

use rocmforge_core::gguf::{GgufFile, GgufValue, GgufWriter};
use rocmforge_core::model::{Model, ModelConfig, ModelError};

fn fixture() -> GgufFile {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference/tiny-llama-Q4_K_M.gguf");
    GgufFile::open(&p).unwrap()
}

/// The llama fixture with `changes` applied (a `None` value removes the key).
fn load_with(changes: &[(&str, Option<GgufValue>)]) -> Result<Model, ModelError> {
    let src = fixture();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if changes.iter().all(|(key, _)| key != k) {
            w.add_metadata(k, v.clone());
        }
    }
    for (k, v) in changes {
        if let Some(v) = v {
            w.add_metadata(k, v.clone());
        }
    }
    for t in src.tensors() {
        let data = src.tensor_data(t).to_vec();
        w.add_tensor(&t.name, &t.shape, t.ty, data).unwrap();
    }
    Model::from_file(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn error(changes: &[(&str, Option<GgufValue>)]) -> String {
    match load_with(changes) {
        Ok(_) => panic!("{changes:?} loaded"),
        Err(e) => e.to_string(),
    }
}

fn config(changes: &[(&str, Option<GgufValue>)]) -> ModelConfig {
    load_with(changes).unwrap().config
}

#[test]
fn zero_head_count_names_the_key() {
    let msg = error(&[("llama.attention.head_count", Some(GgufValue::U32(0)))]);
    assert_eq!(
        msg,
        "llama.attention.head_count is 0; it must be at least 1"
    );
}

#[test]
fn out_of_range_values_name_key_and_value() {
    let cases = [
        (
            "llama.block_count",
            GgufValue::U32(u32::MAX),
            "is 4294967295;",
        ),
        ("llama.embedding_length", GgufValue::I32(-1), "is -1;"),
        ("llama.context_length", GgufValue::U64(0), "is 0;"),
        (
            "llama.rope.freq_base",
            GgufValue::F32(f32::NAN),
            "is NaN (f32);",
        ),
        ("llama.rope.dimension_count", GgufValue::U32(7), "is 7;"),
    ];
    for (key, value, needle) in cases {
        let msg = error(&[(key, Some(value))]);
        assert!(msg.starts_with(key) && msg.contains(needle), "{msg}");
    }
    // Experts on a dense file: the count of experts per token is missing.
    let msg = error(&[("llama.expert_count", Some(GgufValue::U32(8)))]);
    assert!(
        msg.starts_with("llama.expert_used_count is 0;") && msg.contains("llama.expert_count (8)"),
        "{msg}"
    );
    // With it, the router the file lacks.
    let msg = error(&[
        ("llama.expert_count", Some(GgufValue::U32(8))),
        ("llama.expert_used_count", Some(GgufValue::U32(2))),
    ]);
    assert!(msg.contains("blk.0.ffn_gate_inp.weight"), "{msg}");
}

#[test]
fn wrong_types_name_key_and_value() {
    let msg = error(&[("llama.attention.head_count", Some(GgufValue::from("8")))]);
    assert_eq!(
        msg,
        "llama.attention.head_count should be an integer, found \"8\" (string)"
    );
}

#[test]
fn keys_must_agree_with_tensors() {
    let cases = [
        (
            "llama.attention.head_count_kv",
            GgufValue::U32(3),
            "not a multiple",
        ),
        (
            "llama.embedding_length",
            GgufValue::U32(512),
            "token_embd.weight",
        ),
        ("llama.vocab_size", GgufValue::U32(100), "token_embd.weight"),
        (
            "llama.block_count",
            GgufValue::U32(2),
            "tensors for 4 blocks",
        ),
        ("llama.feed_forward_length", GgufValue::U32(512), "ffn_up"),
        (
            "tokenizer.ggml.tokens",
            GgufValue::from(vec!["a", "b"]),
            "2 entries",
        ),
    ];
    for (key, value, needle) in cases {
        match load_with(&[(key, Some(value))]) {
            Err(e @ ModelError::Contradiction(_)) => {
                assert!(e.to_string().contains(needle), "{e}")
            }
            other => panic!("{key}: expected a contradiction, got {:?}", other.err()),
        }
    }
}

#[test]
fn per_layer_arrays_of_equal_values_load() {
    let base = config(&[]);
    let per_layer = |v: u32| Some(GgufValue::from(vec![v; 4]));
    let arrays = config(&[
        ("llama.attention.head_count", per_layer(8)),
        ("llama.attention.head_count_kv", per_layer(4)),
        ("llama.feed_forward_length", per_layer(768)),
    ]);
    assert_eq!(arrays, base);
    let msg = error(&[(
        "llama.attention.head_count",
        Some(GgufValue::from(vec![8u32, 8, 8, 4])),
    )]);
    assert!(msg.contains("layers of different sizes"), "{msg}");
}

#[test]
fn rope_scaling_follows_llama_cpp() {
    let scale = |changes: &[(&str, Option<GgufValue>)]| config(changes).rope_freq_scale;
    let factor = |f: f32| ("llama.rope.scaling.factor", Some(GgufValue::F32(f)));
    let kind = |k: &str| ("llama.rope.scaling.type", Some(GgufValue::from(k)));
    // Without a type the factor is linear; 0 means no scaling.
    assert_eq!(scale(&[factor(4.0)]), 0.25);
    assert_eq!(scale(&[factor(0.0)]), 1.0);
    assert_eq!(scale(&[factor(4.0), kind("none")]), 1.0);
    assert_eq!(scale(&[factor(1.0), kind("yarn")]), 1.0);
    let legacy = ("llama.rope.scale_linear", Some(GgufValue::F64(2.0)));
    assert_eq!(scale(&[legacy]), 0.5);
    // YaRN: the same scale, plus the context it extends (default: the
    // trained one) and the file's magnitude factor.
    let yarn = config(&[factor(4.0), kind("yarn")]);
    assert_eq!(yarn.rope_freq_scale, 0.25);
    assert_eq!(yarn.rope_yarn_orig_ctx, Some(yarn.n_ctx_train));
    let orig = (
        "llama.rope.scaling.original_context_length",
        Some(GgufValue::U32(1024)),
    );
    assert_eq!(
        config(&[factor(4.0), kind("yarn"), orig]).rope_yarn_orig_ctx,
        Some(1024)
    );
    assert_eq!(config(&[factor(4.0)]).rope_yarn_orig_ctx, None);
    let attn = ("llama.rope.scaling.attn_factor", Some(GgufValue::F32(0.5)));
    assert_eq!(config(&[attn]).rope_attn_factor, 0.5);
    let msg = error(&[factor(4.0), kind("longrope")]);
    assert!(msg.contains("LongRoPE scaling"), "{msg}");
    let msg = error(&[factor(-2.0)]);
    assert!(
        msg.starts_with("llama.rope.scaling.factor is -2.0 (f32)"),
        "{msg}"
    );
}
