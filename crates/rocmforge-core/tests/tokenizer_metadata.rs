//! Building tokenizers from hand-made metadata: every kind of bad metadata is a
//! typed error, and the flags the metadata sets change behaviour as llama.cpp's.

use std::collections::HashMap;

use rocmforge_core::gguf::{GgufFile, GgufValue, GgufWriter};
use rocmforge_core::tokenizer::{Tokenizer, TokenizerError};

type Meta = HashMap<String, GgufValue>;

fn build(meta: &Meta) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_metadata(|k| meta.get(k))
}

fn set(meta: &mut Meta, key: &str, value: impl Into<GgufValue>) {
    meta.insert(format!("tokenizer.ggml.{key}"), value.into());
}

/// A byte-level BPE vocabulary: the printable ASCII characters, `Ġ` for space,
/// and a few merged tokens.
fn bpe_meta() -> Meta {
    let mut tokens: Vec<String> = (b'!'..=b'~').map(|b| (b as char).to_string()).collect();
    tokens.push("Ġ".into());
    for t in ["12", "123", "1234", "ab", "Ġab", "<|end|>"] {
        tokens.push(t.into());
    }
    let mut types = vec![1i32; tokens.len()];
    *types.last_mut().unwrap() = 3;
    let mut meta = Meta::new();
    set(&mut meta, "model", "gpt2");
    set(&mut meta, "pre", "gpt-2");
    set(&mut meta, "tokens", tokens);
    set(&mut meta, "token_type", types);
    set(
        &mut meta,
        "merges",
        vec!["1 2", "12 3", "123 4", "a b", "Ġ ab"],
    );
    meta
}

fn spm_meta() -> Meta {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u32 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (t, s) in [
        ("▁", -1.0f32),
        ("h", -2.0),
        ("i", -2.0),
        ("▁h", -1.5),
        ("▁hi", -0.5),
    ] {
        tokens.push(t.into());
        types.push(1);
        scores.push(s);
    }
    let mut meta = Meta::new();
    set(&mut meta, "model", "llama");
    set(&mut meta, "tokens", tokens);
    set(&mut meta, "token_type", types);
    set(&mut meta, "scores", scores);
    meta
}

fn id(tok: &Tokenizer, text: &str) -> u32 {
    tok.token_id(text)
        .unwrap_or_else(|| panic!("no token {text:?}"))
}

#[test]
fn good_metadata_builds() {
    let bpe = build(&bpe_meta()).unwrap();
    assert_eq!(
        bpe.encode("1234 ab", false, false),
        [id(&bpe, "1234"), id(&bpe, "Ġab")]
    );
    assert!(bpe.notes().is_empty());
    let spm = build(&spm_meta()).unwrap();
    assert_eq!(spm.encode("hi", true, false), [1, id(&spm, "▁hi")]);
}

#[test]
fn missing_or_mistyped_keys() {
    let mut m = bpe_meta();
    m.remove("tokenizer.ggml.tokens");
    assert!(matches!(
        build(&m),
        Err(TokenizerError::MissingKey("tokenizer.ggml.tokens"))
    ));

    let mut m = bpe_meta();
    m.remove("tokenizer.ggml.model");
    assert!(matches!(
        build(&m),
        Err(TokenizerError::MissingKey("tokenizer.ggml.model"))
    ));

    let mut m = bpe_meta();
    m.remove("tokenizer.ggml.merges");
    assert!(matches!(
        build(&m),
        Err(TokenizerError::MissingKey("tokenizer.ggml.merges"))
    ));

    let mut m = bpe_meta();
    set(&mut m, "tokens", "not an array");
    assert!(matches!(build(&m), Err(TokenizerError::WrongType { .. })));

    let mut m = spm_meta();
    set(&mut m, "scores", vec!["x"; 264]);
    assert!(matches!(
        build(&m),
        Err(TokenizerError::WrongElementType { index: 0, .. })
    ));
}

#[test]
fn length_mismatches() {
    let mut m = spm_meta();
    set(&mut m, "scores", vec![0.0f32; 10]);
    assert!(matches!(
        build(&m),
        Err(TokenizerError::LengthMismatch {
            found: 10,
            expected: 264,
            ..
        })
    ));
    let mut m = spm_meta();
    set(&mut m, "token_type", vec![1i32; 265]);
    assert!(matches!(
        build(&m),
        Err(TokenizerError::LengthMismatch { found: 265, .. })
    ));
}

#[test]
fn bad_merges_and_tokens() {
    let mut m = bpe_meta();
    set(&mut m, "merges", vec!["1 2", "123"]);
    assert!(matches!(
        build(&m),
        Err(TokenizerError::BadMerge { index: 1, .. })
    ));

    let mut m = bpe_meta();
    set(&mut m, "tokens", vec!["a", "b", "a"]);
    m.remove("tokenizer.ggml.token_type");
    assert!(matches!(
        build(&m),
        Err(TokenizerError::DuplicateToken {
            first: 0,
            second: 2,
            ..
        })
    ));

    let mut m = bpe_meta();
    set(&mut m, "tokens", Vec::<String>::new());
    m.remove("tokenizer.ggml.token_type");
    assert!(matches!(build(&m), Err(TokenizerError::EmptyVocab)));
}

#[test]
fn unsupported_models() {
    for model in ["rwkv", "plamo2", "t5", ""] {
        let mut m = spm_meta();
        set(&mut m, "model", model);
        assert!(
            matches!(build(&m), Err(TokenizerError::UnsupportedModel(ref s)) if s == model),
            "{model}"
        );
    }
}

#[test]
fn special_ids_out_of_range() {
    for key in [
        "bos_token_id",
        "eos_token_id",
        "eot_token_id",
        "eom_token_id",
    ] {
        let mut m = spm_meta();
        set(&mut m, key, 264u32);
        assert!(
            matches!(
                build(&m),
                Err(TokenizerError::TokenIdOutOfRange {
                    id: 264,
                    n_vocab: 264,
                    ..
                })
            ),
            "{key}"
        );
    }
    // Padding is never used for encoding: a bad one is dropped with a note.
    let mut m = spm_meta();
    set(&mut m, "padding_token_id", 1_000_000u32);
    let tok = build(&m).unwrap();
    assert_eq!(tok.pad(), None);
    assert_eq!(tok.notes().len(), 1);
}

#[test]
fn add_bos_needs_a_bos_token() {
    let mut m = bpe_meta();
    set(&mut m, "add_bos_token", true);
    assert!(matches!(
        build(&m),
        Err(TokenizerError::MissingSpecialToken { .. })
    ));
    let mut m = bpe_meta();
    set(&mut m, "add_eos_token", true);
    assert!(matches!(
        build(&m),
        Err(TokenizerError::MissingSpecialToken { .. })
    ));
}

#[test]
fn unknown_pre_tokenizer_falls_back_to_default() {
    let mut m = bpe_meta();
    set(&mut m, "pre", "no-such-pre");
    let tok = build(&m).unwrap();
    assert_eq!(tok.notes().len(), 1, "{:?}", tok.notes());
    // The default pre-tokenizer cuts digit runs into threes, so the merges
    // cannot reach "1234" as they do under gpt-2's regex.
    assert_eq!(
        tok.encode("1234", false, false),
        [id(&tok, "123"), id(&tok, "4")]
    );

    // No name at all is llama.cpp's documented default, not a fallback: same
    // splitting, no note.
    let mut m = bpe_meta();
    m.remove("tokenizer.ggml.pre");
    let tok = build(&m).unwrap();
    assert!(tok.notes().is_empty(), "{:?}", tok.notes());
    assert_eq!(
        tok.encode("1234", false, false),
        [id(&tok, "123"), id(&tok, "4")]
    );
}

#[test]
fn llama3_family_flags() {
    let mut m = bpe_meta();
    set(&mut m, "pre", "llama-bpe");
    set(&mut m, "bos_token_id", 0u32);
    let tok = build(&m).unwrap();
    // Llama 3 files expect BOS unless they say otherwise.
    assert!(tok.add_bos_default());
    assert_eq!(tok.encode("ab", true, false), [0, id(&tok, "ab")]);
    set(&mut m, "add_bos_token", false);
    assert!(!build(&m).unwrap().add_bos_default());

    // Without merge rules for digits, "123" can only come out whole because
    // the llama3 family looks each word up before merging (ignore_merges);
    // the gpt-2 pre-tokenizer has no such lookup.
    set(&mut m, "merges", vec!["Ġ ab"]);
    let tok = build(&m).unwrap();
    assert_eq!(tok.encode("123", false, false), [id(&tok, "123")]);
    set(&mut m, "pre", "gpt-2");
    let tok = build(&m).unwrap();
    assert_eq!(
        tok.encode("123", false, false),
        [id(&tok, "1"), id(&tok, "2"), id(&tok, "3")]
    );
}

#[test]
fn spm_flags() {
    let mut m = spm_meta();
    let tok = build(&m).unwrap();
    assert!(tok.add_bos_default());
    assert_eq!(tok.encode("hi", false, false), [id(&tok, "▁hi")]);
    set(&mut m, "add_space_prefix", false);
    set(&mut m, "add_eos_token", true);
    let tok = build(&m).unwrap();
    assert_eq!(
        tok.encode("hi", true, false),
        [1, id(&tok, "h"), id(&tok, "i"), 2]
    );
    // Control tokens in text: literal text unless parse_special.
    let ids = tok.encode("</s>", false, true);
    assert_eq!(ids, [2]);
    let ids = tok.encode("</s>", false, false);
    assert_eq!(ids.len(), 4);
    assert_eq!(tok.decode(&ids), "</s>");
}

#[test]
fn bad_metadata_through_a_gguf_file() {
    let mut w = GgufWriter::new();
    for (k, v) in bpe_meta() {
        w.add_metadata(&k, v);
    }
    w.add_metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(99_999));
    let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert!(matches!(
        Tokenizer::from_gguf(&file),
        Err(TokenizerError::TokenIdOutOfRange { id: 99_999, .. })
    ));
}

#[test]
fn tokenizer_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    let tok = build(&spm_meta()).unwrap();
    let ids = std::thread::scope(|s| s.spawn(|| tok.encode("hi", false, false)).join().unwrap());
    assert_eq!(ids, [id(&tok, "▁hi")]);
}
