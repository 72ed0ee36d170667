//! End-to-end: generate models, parse them back with the project's GGUF
//! reader, and compare against llama.cpp's own files in `testdata/`.

use std::collections::HashSet;
use std::path::Path;

use indicatif::ProgressBar;
use rocmforge_core::gguf::{GgufFile, GgufValue};
use rocmforge_core::quant::{dequantize, QuantType};

use super::layout::tensors;
use super::metadata::{model_metadata, tokenizer_metadata};
use super::{tokenizer_dir, write_model, ModelPlan};
use crate::presets::{find, Preset, PRESETS};

fn generate(plan: &ModelPlan, seed: u64) -> GgufFile {
    let bytes = write_model(plan, seed, 2, Vec::new(), &ProgressBar::hidden()).unwrap();
    GgufFile::from_bytes(bytes).unwrap()
}

fn reference(name: &str) -> GgufFile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference")
        .join(name);
    GgufFile::open(&path).unwrap()
}

fn decoded(file: &GgufFile, name: &str) -> Vec<f32> {
    let t = file
        .tensor(name)
        .unwrap_or_else(|| panic!("{name} missing"));
    let mut out = vec![0.0; t.n_elements() as usize];
    dequantize(t.ty, file.tensor_data(t), &mut out).unwrap();
    out
}

fn std_dev(v: &[f32]) -> f64 {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt()
}

/// Every metadata entry of llama.cpp's file is in ours with the same value
/// (tokenizer arrays included), except the ones that legitimately differ.
fn assert_metadata_covers(ours: &GgufFile, theirs: &GgufFile, differ: &[&str]) {
    for (key, value) in theirs.metadata() {
        if differ.contains(&key.as_str()) {
            continue;
        }
        let mine = ours.get(key).unwrap_or_else(|| panic!("{key} missing"));
        match (mine, value) {
            // Converters differ on integer widths; the value is what counts.
            (a, b) if a.as_u64().is_some() => assert_eq!(a.as_u64(), b.as_u64(), "{key}"),
            (GgufValue::F32(a), GgufValue::F32(b)) => assert_eq!(a, b, "{key}"),
            _ => assert!(mine == value, "{key} differs"),
        }
    }
}

/// The tiny presets reproduce the reference fixtures' layout exactly: same
/// tensors, shapes and (for a Q8_0 request) types, including the F16 fallback
/// llama.cpp chose for rows of 176.
#[test]
fn tiny_qwen_presets_match_the_reference_files() {
    for name in ["tiny-qwen2", "tiny-qwen3"] {
        let preset = find(name).unwrap();
        let plan = ModelPlan::new(preset, QuantType::Q8_0, &tokenizer_dir()).unwrap();
        let ours = generate(&plan, 5);
        let theirs = reference(&format!("{name}-Q8_0.gguf"));
        let layout = |f: &GgufFile| -> HashSet<(String, Vec<u64>, QuantType)> {
            f.tensors()
                .iter()
                .map(|t| (t.name.clone(), t.shape.clone(), t.ty))
                .collect()
        };
        assert_eq!(layout(&ours), layout(&theirs), "{name}");
        assert_eq!(ours.tensors().len(), theirs.tensors().len());
        assert_metadata_covers(&ours, &theirs, &["general.name"]);
        assert_eq!(
            ours.get("general.architecture").unwrap().as_str(),
            Some(&name[5..])
        );
    }
}

#[test]
fn tiny_llama_matches_the_reference_layout() {
    let plan = ModelPlan::new(
        find("tiny-llama").unwrap(),
        QuantType::Q4K,
        &tokenizer_dir(),
    )
    .unwrap();
    assert!(
        plan.fallback_notes().is_empty(),
        "rows are multiples of 256"
    );
    let ours = generate(&plan, 5);
    let theirs = reference("tiny-llama-Q4_K_M.gguf");
    assert_eq!(ours.tensors().len(), theirs.tensors().len());
    for t in theirs.tensors() {
        let mine = ours
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!(mine.shape, t.shape, "{}", t.name);
        // Q4_K_M mixes in Q6_K for some tensors; a single requested type does not.
        let want = if t.ty == QuantType::Q6K {
            QuantType::Q4K
        } else {
            t.ty
        };
        assert_eq!(mine.ty, want, "{}", t.name);
    }
    assert_metadata_covers(&ours, &theirs, &["general.name", "general.file_type"]);
    // Mostly Q4_K without the _M mix is llama.cpp's Q4_K_S.
    assert_eq!(ours.get("general.file_type").unwrap().as_u64(), Some(14));
}

#[test]
fn weights_have_the_intended_statistics() {
    let plan = ModelPlan::new(
        find("tiny-qwen2").unwrap(),
        QuantType::F16,
        &tokenizer_dir(),
    )
    .unwrap();
    let file = generate(&plan, 11);
    let embd = decoded(&file, "token_embd.weight");
    assert!((std_dev(&embd) - 0.02).abs() < 0.001);
    let norm = decoded(&file, "blk.1.attn_norm.weight");
    assert!(norm.iter().all(|&x| (x - 1.0).abs() < 0.1), "{norm:?}");
    assert!(std_dev(&norm) > 0.005, "norms carry noise");
    let bias = decoded(&file, "blk.0.attn_k.bias");
    assert!(bias.iter().all(|&x| x.abs() < 0.05) && std_dev(&bias) > 0.002);
    assert_ne!(
        decoded(&file, "blk.0.ffn_up.weight"),
        decoded(&file, "blk.0.ffn_gate.weight")
    );
}

#[test]
fn same_seed_same_bytes() {
    let plan = ModelPlan::new(
        find("tiny-qwen3").unwrap(),
        QuantType::Q4_0,
        &tokenizer_dir(),
    )
    .unwrap();
    let run = |seed| write_model(&plan, seed, 2, Vec::new(), &ProgressBar::hidden()).unwrap();
    let a = run(1);
    assert!(a == run(1));
    assert!(a != run(2));
}

/// A llama with every row a multiple of 256 and a toy vocab: every `--type`
/// encodes, parses back, and decodes to weights of the intended spread.
#[test]
fn every_weight_type_round_trips() {
    let preset = Preset {
        name: "toy",
        n_layer: 1,
        n_vocab: 1024,
        ..*find("tiny-llama").unwrap()
    };
    for ty in QuantType::all().filter(|t| t.is_supported()) {
        let plan = ModelPlan {
            metadata: model_metadata(&preset, ty),
            tensors: tensors(&preset, ty),
            quantizer: Default::default(),
        };
        let file = generate(&plan, 3);
        let q = file.tensor("blk.0.attn_q.weight").unwrap();
        assert_eq!((q.ty, q.shape.as_slice()), (ty, &[256u64, 256][..]));
        assert_eq!(
            file.tensor("blk.0.ffn_norm.weight").unwrap().ty,
            QuantType::F32
        );
        let spread = std_dev(&decoded(&file, "output.weight"));
        // Coarse 2- and 3-bit codes distort the spread most.
        assert!((spread - 0.02).abs() < 0.006, "{ty}: std {spread}");
    }
}

#[test]
fn fallbacks_are_reported_per_kind() {
    let plan = ModelPlan::new(
        find("tiny-qwen2").unwrap(),
        QuantType::Q8_0,
        &tokenizer_dir(),
    )
    .unwrap();
    assert_eq!(
        plan.fallback_notes(),
        ["F16 instead of Q8_0 for 3 tensors (blk.*.ffn_down.weight): rows of 176 are not whole Q8_0 blocks of 32"]
    );
    let plan = ModelPlan::new(
        find("qwen2-0.5b").unwrap(),
        QuantType::Q4K,
        &tokenizer_dir(),
    )
    .unwrap();
    let notes = plan.fallback_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].starts_with(
        "Q5_0 instead of Q4_K for 145 tensors (token_embd.weight, blk.*.attn_q.weight"
    ));
}

#[test]
fn qwen3_head_dim_differs_from_embd_per_head() {
    let p = find("qwen3-0.6b").unwrap();
    let specs = tensors(p, QuantType::Q8_0);
    let shape = |name: &str| specs.iter().find(|t| t.name == name).unwrap().shape.clone();
    assert_eq!(shape("blk.27.attn_q.weight"), [1024, 2048]);
    assert_eq!(shape("blk.27.attn_k.weight"), [1024, 1024]);
    assert_eq!(shape("blk.27.attn_output.weight"), [2048, 1024]);
    assert_eq!(shape("blk.27.attn_q_norm.weight"), [128]);
    assert!(specs.iter().all(|t| t.name != "output.weight"), "tied");
    let meta = model_metadata(p, QuantType::Q8_0);
    let get = |k: &str| {
        meta.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("qwen3.attention.key_length"), Some(GgufValue::U32(128)));
    assert_eq!(get("qwen3.rope.dimension_count"), Some(GgufValue::U32(128)));
    assert_eq!(get("general.file_type"), Some(GgufValue::U32(7)));
    let qwen2 = model_metadata(find("qwen2-0.5b").unwrap(), QuantType::Q8_0);
    assert!(qwen2
        .iter()
        .all(|(k, _)| !k.contains("key_length") && !k.contains("vocab_size")));
}

/// Metadata value `key` (which must be there).
fn meta_value<'a>(meta: &'a [(String, GgufValue)], key: &str) -> &'a GgufValue {
    meta.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {key}"))
}

/// The vocab's token texts.
fn token_texts(meta: &[(String, GgufValue)]) -> Vec<&str> {
    meta_value(meta, "tokenizer.ggml.tokens")
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

#[test]
fn llama3_vocab_is_padded_with_specials_at_their_real_ids() {
    let p = find("llama3-1b").unwrap();
    let meta = tokenizer_metadata(p, &tokenizer_dir()).unwrap();
    let get = |k: &str| meta_value(&meta, k);
    let tokens = token_texts(&meta);
    assert_eq!(tokens.len(), 128256);
    assert_eq!(
        tokens.iter().collect::<HashSet<_>>().len(),
        tokens.len(),
        "unique"
    );
    assert_eq!(tokens[50256], "<|endoftext|>");
    assert_eq!(tokens[50257], "<|reserved_special_token_248|>");
    assert_eq!(tokens[128000], "<|begin_of_text|>");
    assert_eq!(tokens[128001], "<|end_of_text|>");
    assert_eq!(tokens[128002], "<|reserved_special_token_0|>");
    assert_eq!(tokens[128005], "<|reserved_special_token_2|>");
    assert_eq!(tokens[128009], "<|eot_id|>");
    assert_eq!(tokens[128011], "<|reserved_special_token_3|>");
    assert_eq!(tokens[128255], "<|reserved_special_token_247|>");
    let types = get("tokenizer.ggml.token_type").as_array().unwrap();
    assert_eq!(types.len(), 128256);
    assert_eq!(
        types[100].as_i64(),
        Some(1),
        "GPT-2 tokens keep their NORMAL type"
    );
    assert!(
        types[50257..].iter().all(|t| t.as_i64() == Some(3)),
        "CONTROL"
    );
    assert_eq!(get("tokenizer.ggml.pre").as_str(), Some("llama-bpe"));
    assert_eq!(get("tokenizer.ggml.model").as_str(), Some("gpt2"));
    assert_eq!(get("tokenizer.ggml.bos_token_id").as_u64(), Some(128000));
    assert_eq!(get("tokenizer.ggml.eos_token_id").as_u64(), Some(128001));
    assert_eq!(
        get("tokenizer.ggml.merges").as_array().unwrap().len(),
        50000
    );

    let specs = tensors(p, QuantType::Q4_0);
    assert_eq!(specs[0].name, "rope_freqs.weight");
    assert_eq!(
        (specs[0].shape.as_slice(), specs[0].ty),
        (&[32u64][..], QuantType::F32)
    );
}

/// gpt-oss-20b's stand-in o200k vocab: the harmony tokens at their ids,
/// every text once (GPT-2's `<|endoftext|>` moved to 199999; llama.cpp's
/// vocab loader aborts on a repeated text).
#[test]
fn gpt_oss_vocab_has_harmony_tokens_and_no_repeated_text() {
    let p = find("gpt-oss-20b").unwrap();
    let meta = tokenizer_metadata(p, &tokenizer_dir()).unwrap();
    let get = |k: &str| meta_value(&meta, k);
    let tokens = token_texts(&meta);
    assert_eq!(tokens.len(), 201088);
    assert_eq!(
        tokens.iter().collect::<HashSet<_>>().len(),
        tokens.len(),
        "unique"
    );
    assert_eq!(tokens[50256], "<|reserved_50256|>");
    assert_eq!(tokens[199998], "<|startoftext|>");
    assert_eq!(tokens[199999], "<|endoftext|>");
    assert_eq!(tokens[200002], "<|return|>");
    assert_eq!(tokens[200012], "<|call|>");
    assert_eq!(get("tokenizer.ggml.bos_token_id").as_u64(), Some(199998));
    assert_eq!(get("tokenizer.ggml.eos_token_id").as_u64(), Some(200002));
    // The test-sized preset keeps GPT-2's vocab as it is.
    let tiny = tokenizer_metadata(find("tiny-gpt-oss").unwrap(), &tokenizer_dir()).unwrap();
    assert_eq!(token_texts(&tiny)[50256], "<|endoftext|>");
}

/// Every preset's vocab passes the generator's own checks (its size, and
/// no text twice), so each file loads in llama.cpp (issue 23).
#[test]
fn every_preset_has_a_valid_vocab() {
    for p in PRESETS {
        if let Err(e) = tokenizer_metadata(p, &tokenizer_dir()) {
            panic!("{}: {e}", p.name);
        }
    }
}

#[test]
fn missing_vocab_is_a_typed_error() {
    let err = ModelPlan::new(
        find("tiny-qwen2").unwrap(),
        QuantType::F16,
        Path::new("/nonexistent"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("ggml-vocab-qwen2.gguf"), "{err}");
    // A vocab of the wrong size is refused rather than written inconsistent.
    let wrong = Preset {
        n_vocab: 1000,
        ..*find("tiny-llama").unwrap()
    };
    let err = ModelPlan::new(&wrong, QuantType::F16, &tokenizer_dir()).unwrap_err();
    assert!(err.to_string().contains("32000 tokens"), "{err}");
}
