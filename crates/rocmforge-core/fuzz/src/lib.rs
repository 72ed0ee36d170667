//! What each fuzz target does with its input: run one part of the loader on
//! it and check the invariants that must hold whatever the bytes. A panic
//! (failed check, overflow, out-of-bounds index) is a finding.
//!
//! rocmforge-core's `tests/fuzz_corpus.rs` includes this file and replays
//! the seed corpus and every crash reproducer through the same functions,
//! so fixed crashes stay fixed under plain `cargo test`.

use std::path::PathBuf;
use std::sync::OnceLock;

use rocmforge_core::gguf::{GgufFile, GgufValue, GgufWriter};
use rocmforge_core::graph::build_graph;
use rocmforge_core::model::Model;
use rocmforge_core::plan::{ArenaPlan, KvLayout};
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};

/// Text every fuzzed tokenizer encodes: plain words, a special token, bytes
/// no vocabulary has a token for.
const SAMPLE_TEXT: &str = "Hello world <|im_start|> <s> the\n\t 123 é 🦀 \u{2581}";

/// Errors are printed as one line each (the CLI's contract).
fn assert_one_line(e: &dyn std::fmt::Display) {
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "multi-line error: {msg:?}");
}

fn parse(data: &[u8]) -> Option<GgufFile> {
    match GgufFile::from_bytes(data.to_vec()) {
        Ok(file) => Some(file),
        Err(e) => {
            assert_one_line(&e);
            None
        }
    }
}

/// `gguf_parse`: parse arbitrary bytes, walk everything parsed, and write it
/// back: the writer's output must parse to the same metadata and tensors.
pub fn gguf_parse(data: &[u8]) {
    let Some(file) = parse(data) else { return };
    for (key, value) in file.metadata() {
        let found = file.get(key).expect("every key is indexed");
        assert!(std::ptr::eq(found, value), "index of '{key}' is off");
        let brief = value.brief();
        assert!(!brief.contains('\n') && brief.len() < 200, "{brief:?}");
        let _ = (value.type_name(), value.as_u64(), value.as_i64());
        let _ = (value.as_f32(), value.as_bool(), value.as_str());
    }
    for t in file.tensors() {
        let found = file.tensor(&t.name).expect("every tensor is indexed");
        assert!(std::ptr::eq(found, t), "index of '{}' is off", t.name);
        assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes, "{}", t.name);
        let _ = (t.n_elements(), t.row_len());
    }
    let _ = format!("{file:?}");
    rewrite_matches(&file);
}

fn rewrite_matches(file: &GgufFile) {
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata() {
        w.add_metadata(key, value.clone());
    }
    for t in file.tensors() {
        let data = file.tensor_data(t).to_vec();
        w.add_tensor(&t.name, &t.shape, t.ty, data)
            .expect("a parsed tensor is writable");
    }
    // The writer insists on a u32 `general.alignment`; the reader takes any
    // integer type, so some parsed files cannot be written back as they are.
    let Ok(bytes) = w.to_bytes() else { return };
    let again = GgufFile::from_bytes(bytes).expect("the writer's output parses");
    assert_eq!(again.metadata().len(), file.metadata().len());
    for ((k1, v1), (k2, v2)) in file.metadata().iter().zip(again.metadata()) {
        assert!(k1 == k2 && same(v1, v2), "'{k1}' changed: {v1:?} -> {v2:?}");
    }
    assert_eq!(again.tensors().len(), file.tensors().len());
    for (t1, t2) in file.tensors().iter().zip(again.tensors()) {
        assert_eq!((&t1.name, &t1.shape, t1.ty), (&t2.name, &t2.shape, t2.ty));
        assert!(file.tensor_data(t1) == again.tensor_data(t2), "{}", t1.name);
    }
}

/// Equality that holds for NaN: floats compare by bits.
fn same(a: &GgufValue, b: &GgufValue) -> bool {
    match (a, b) {
        (GgufValue::F32(x), GgufValue::F32(y)) => x.to_bits() == y.to_bits(),
        (GgufValue::F64(x), GgufValue::F64(y)) => x.to_bits() == y.to_bits(),
        (GgufValue::Array(x), GgufValue::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        _ => a == b,
    }
}

/// `model_load`: parse, load the model, and for a model that loads build
/// the graphs a session would and plan their memory, as every backend does
/// before touching a weight.
pub fn model_load(data: &[u8]) {
    let Some(file) = parse(data) else { return };
    let model = match Model::from_file(file) {
        Ok(model) => model,
        Err(e) => return assert_one_line(&e),
    };
    let cfg = &model.config;
    for (id, w) in model.weights.table.iter().enumerate() {
        assert_eq!(model.weight_bytes(id).len() as u64, w.n_bytes, "{}", w.name);
        assert_eq!(w.row_bytes() * w.rows, w.n_bytes as usize, "{}", w.name);
    }
    let factors: Option<Vec<f32>> = model.weights.rope_freqs.map(|id| {
        let bytes = model.weight_bytes(id);
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    });
    for (n_tokens, all_logits) in [(1, false), (3, false), (2, true)] {
        let graph = build_graph(&model, n_tokens, all_logits);
        let logits = graph.tensor(graph.logits);
        let rows = if all_logits { n_tokens } else { 1 };
        assert_eq!((logits.rows, logits.cols), (rows, cfg.n_vocab));
        let plan = ArenaPlan::new(&graph);
        if let Err(e) = plan.verify(&graph) {
            panic!("arena plan for {n_tokens} tokens: {e}");
        }
        if let Err(e) = graph.rope.check(cfg.head_dim, factors.as_deref()) {
            assert_one_line(&e);
        }
    }
    let kv = KvLayout::new(cfg, 16, 16);
    assert_eq!(kv.bytes(), 2 * cfg.n_layer * 16 * cfg.kv_dim() * 2);
    match Tokenizer::from_gguf(&model.file) {
        Ok(t) => exercise(&t, SAMPLE_TEXT),
        Err(e) => assert_one_line(&e),
    }
}

/// The reference vocabularies under `testdata/tokenizer/`, loaded once.
fn vocabularies() -> &'static [(&'static str, Tokenizer)] {
    static VOCABS: OnceLock<Vec<(&'static str, Tokenizer)>> = OnceLock::new();
    VOCABS.get_or_init(|| {
        // This file is built from two crates (the fuzz crate and
        // rocmforge-core's tests); find testdata/ from either.
        let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        while !dir.join("testdata/tokenizer").is_dir() {
            assert!(dir.pop(), "no testdata/tokenizer above the crate");
        }
        let names = ["gpt-2", "llama-spm", "qwen2"];
        names
            .into_iter()
            .map(|name| {
                let path = dir.join(format!("testdata/tokenizer/ggml-vocab-{name}.gguf"));
                let file = GgufFile::open(&path).expect("reference vocabulary");
                (
                    name,
                    Tokenizer::from_gguf(&file).expect("reference vocabulary"),
                )
            })
            .collect()
    })
}

/// `tokenizer`: the input as text through the real vocabularies, and as
/// token ids through their decoders.
pub fn tokenizer(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for (name, t) in vocabularies() {
        exercise(t, &text);
        // Without specials, decoding undoes encoding exactly: byte-level BPE
        // and SPM with byte fallback cover every byte. SPM spells a space as
        // U+2581, so text that contains U+2581 comes back with spaces.
        if !(*name == "llama-spm" && text.contains('\u{2581}')) {
            let ids = t.encode(&text, false, false);
            assert_eq!(t.decode(&ids), text, "{name}: {ids:?}");
        }
    }
}

/// `tokenizer_meta`: a tokenizer built from fuzzed GGUF metadata.
pub fn tokenizer_meta(data: &[u8]) {
    let Some(file) = parse(data) else { return };
    match Tokenizer::from_gguf(&file) {
        Ok(t) => {
            exercise(&t, SAMPLE_TEXT);
            exercise(&t, &String::from_utf8_lossy(data));
        }
        Err(e) => assert_one_line(&e),
    }
}

/// Encodes `text` every way, decodes the ids, and decodes the bytes of the
/// text read as ids (most out of the vocabulary): nothing may panic, ids
/// stay in the vocabulary, and streaming decode agrees with whole decode.
fn exercise(t: &Tokenizer, text: &str) {
    let n = t.vocab_size();
    for (add_bos, parse_special) in [(false, false), (true, false), (true, true)] {
        let ids = t.encode(text, add_bos, parse_special);
        assert!(ids.iter().all(|&id| (id as usize) < n), "{ids:?} (n = {n})");
        let _ = t.decode(&ids);
        stream_matches(t, &ids);
    }
    let raw: Vec<u32> = text
        .as_bytes()
        .chunks(2)
        .map(|c| c.iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b)))
        .map(|id| (id % (n as u64 + 8)) as u32)
        .collect();
    let _ = t.decode(&raw);
    stream_matches(t, &raw);
    for id in raw.iter().copied().chain([u32::MAX]) {
        let _ = (t.token_to_piece_special(id), t.token_text(id), t.is_eog(id));
    }
    assert!(
        t.eog_ids().windows(2).all(|w| w[0] < w[1]),
        "eog ids sorted"
    );
}

/// Streamed pieces come out as the same text as all pieces decoded at once.
fn stream_matches(t: &Tokenizer, ids: &[u32]) {
    let mut stream = StreamDecoder::new();
    let mut streamed = String::new();
    let mut bytes = Vec::new();
    for &id in ids {
        streamed.push_str(&stream.push(t, id));
        bytes.extend(t.token_to_piece(id));
    }
    streamed.push_str(&stream.finish());
    assert_eq!(streamed, String::from_utf8_lossy(&bytes), "{ids:?}");
}
