//! The tokenizer against llama.cpp's own outputs: the vocab-only fixtures in
//! `testdata/tokenizer/` (every text, exact ids) and the reference models'
//! prompt tokens in `testdata/reference/`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rocmforge_core::gguf::GgufFile;
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn load(rel: &str) -> Tokenizer {
    let path = testdata().join(rel);
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Texts of a `.inp` file, split as llama.cpp's `test-tokenizer-0` does: texts
/// end at `"\n__ggml_vocab_test__\n"`, so they may be empty or be newlines
/// themselves, and the last one may run to the end of the file instead.
fn read_inputs(path: &Path) -> Vec<String> {
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let data = std::fs::read_to_string(path).unwrap();
    let mut texts = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let Some(len) = data[pos..].find(SEP) else {
            texts.push(data[pos..].to_string());
            break;
        };
        texts.push(data[pos..pos + len].to_string());
        pos += len + SEP.len();
    }
    texts
}

fn read_outputs(path: &Path) -> Vec<Vec<u32>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect()
}

/// Every reference vocabulary with test texts, by the name in its file name.
const FIXTURES: &[&str] = &[
    "bert-bge",
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gemma-4",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
];

/// Vocabularies shipped without texts: they must still load cleanly.
const LOAD_ONLY: &[&str] = &["aquila", "baichuan", "gpt-neox"];

/// Vocabularies of a tokenizer model this crate does not implement (UGM).
const UNSUPPORTED: &[&str] = &["nomic-bert-moe"];

/// Checks one fixture; `Err` describes the first mismatching text.
fn check_vocab_fixture(name: &str) -> Result<(), String> {
    let gguf = format!("tokenizer/ggml-vocab-{name}.gguf");
    let t0 = Instant::now();
    let path = testdata().join(&gguf);
    let file = GgufFile::open(&path).map_err(|e| format!("{name}: {e}"))?;
    let tok = Tokenizer::from_gguf(&file).map_err(|e| format!("{name}: {e}"))?;
    let load_time = t0.elapsed();
    if !tok.notes().is_empty() {
        return Err(format!("{name}: notes {:?}", tok.notes()));
    }
    let inp = testdata().join(format!("{gguf}.inp"));
    let texts = read_inputs(&inp);
    let expected = read_outputs(&testdata().join(format!("{gguf}.out")));
    assert_eq!(texts.len(), expected.len(), "{name}: texts vs id lines");
    assert!(texts.len() > 40, "{name}: fixture split went wrong");

    let t0 = Instant::now();
    let got: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t, false, false)).collect();
    let encode_time = t0.elapsed();
    let mismatches: Vec<String> = texts
        .iter()
        .zip(&expected)
        .zip(&got)
        .filter(|((_, want), got)| want != got)
        .map(|((text, want), got)| format!("{text:?}\n  want {want:?}\n  got  {got:?}"))
        .collect();
    if let Some(first) = mismatches.first() {
        return Err(format!(
            "{name}: {} of {} texts differ; first:\n{first}",
            mismatches.len(),
            texts.len()
        ));
    }
    eprintln!("{name}: load {load_time:?}, encode all {encode_time:?}");
    if encode_time.as_millis() >= 500 {
        return Err(format!("{name}: encoding took {encode_time:?}"));
    }
    Ok(())
}

#[test]
fn every_reference_vocab_tokenizes_exactly() {
    let failures: Vec<String> = FIXTURES
        .iter()
        .filter_map(|name| check_vocab_fixture(name).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} vocabularies fail:\n{}",
        failures.len(),
        FIXTURES.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_reference_vocab_is_listed() {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(testdata().join("tokenizer")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name
            .strip_prefix("ggml-vocab-")
            .and_then(|n| n.strip_suffix(".gguf"))
        {
            found.push(stem.to_owned());
        }
    }
    found.sort();
    let mut listed: Vec<String> = FIXTURES
        .iter()
        .chain(LOAD_ONLY)
        .chain(UNSUPPORTED)
        .map(|s| s.to_string())
        .collect();
    listed.sort();
    assert_eq!(found, listed);
    for name in FIXTURES {
        let inp = testdata().join(format!("tokenizer/ggml-vocab-{name}.gguf.inp"));
        assert!(inp.exists(), "{name} has no texts");
    }
}

#[test]
fn vocabs_without_texts_load_cleanly() {
    for name in LOAD_ONLY {
        let tok = load(&format!("tokenizer/ggml-vocab-{name}.gguf"));
        assert!(tok.notes().is_empty(), "{name}: {:?}", tok.notes());
        let text = "Hello world, 123 tokens!";
        let ids = tok.encode(text, false, false);
        assert!(!ids.is_empty(), "{name}");
        assert_eq!(tok.decode(&ids), text, "{name}");
    }
    // Refused with an error naming the model, not tokenized wrongly.
    for name in UNSUPPORTED {
        let path = testdata().join(format!("tokenizer/ggml-vocab-{name}.gguf"));
        let file = GgufFile::open(&path).unwrap();
        let err = Tokenizer::from_gguf(&file).unwrap_err().to_string();
        assert!(
            err.contains("unsupported tokenizer model \"t5\""),
            "{name}: {err}"
        );
    }
}

#[test]
fn qwen2_vocab_builds_fast() {
    let path = testdata().join("tokenizer/ggml-vocab-qwen2.gguf");
    let file = GgufFile::open(&path).unwrap();
    let t0 = Instant::now();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    let dt = t0.elapsed();
    eprintln!("qwen2 tokenizer build: {dt:?}");
    assert_eq!(tok.vocab_size(), 151936);
    // Well under a second on the 2-core dev box; the bound leaves room for a
    // loaded machine.
    assert!(dt.as_millis() < 1500, "building took {dt:?}");
}

const PROMPT: &str = "The quick brown fox jumps over the lazy dog. Once upon a time";

#[test]
fn reference_prompt_tokens() {
    for model in ["tiny-llama-Q4_K_M", "tiny-qwen2-Q8_0", "tiny-qwen3-Q8_0"] {
        let tok = load(&format!("reference/{model}.gguf"));
        let want: Vec<u32> =
            std::fs::read_to_string(testdata().join(format!("reference/{model}.tokens")))
                .unwrap()
                .split_whitespace()
                .map(|t| t.parse().unwrap())
                .collect();
        let got = tok.encode(PROMPT, tok.add_bos_default(), false);
        assert_eq!(got, want, "{model}");
    }
}

#[test]
fn decode_round_trips_fixture_texts() {
    // WordPiece lowercases and drops accents and spacing, so bert-bge cannot
    // round-trip (see `wordpiece_decodes_normalized_words`).
    for &name in FIXTURES.iter().filter(|&&n| n != "bert-bge") {
        let gguf = format!("tokenizer/ggml-vocab-{name}.gguf");
        let tok = load(&gguf);
        for text in read_inputs(&testdata().join(format!("{gguf}.inp"))) {
            let ids = tok.encode(&text, false, false);
            assert_eq!(tok.decode(&ids), text, "{name}: {ids:?}");
            // The streaming decoder, fed one token at a time, agrees and never
            // emits a partial character (each chunk is a String already).
            let mut d = StreamDecoder::new();
            let mut streamed: String = ids.iter().map(|&id| d.push(&tok, id)).collect();
            streamed.push_str(&d.finish());
            let bytes: Vec<u8> = ids.iter().flat_map(|&id| tok.token_to_piece(id)).collect();
            assert_eq!(streamed, String::from_utf8_lossy(&bytes), "{name}");
        }
    }
}

#[test]
fn wordpiece_decodes_normalized_words() {
    let tok = load("tokenizer/ggml-vocab-bert-bge.gguf");
    let ids = tok.encode("Hello  Äpfel", false, false);
    assert_eq!(tok.decode(&ids), "hello apfel");
    // With special tokens: [CLS] text [SEP], which print as nothing.
    let with = tok.encode("Hello", true, false);
    assert_eq!(with.first(), Some(&101));
    assert_eq!(with.last(), Some(&102));
    assert_eq!(tok.decode(&with), "hello");
}

/// Multi-byte characters that the vocabulary spells as several byte tokens
/// must come out of the stream whole, at the token that completes them.
#[test]
fn stream_decoder_waits_for_whole_characters() {
    for name in ["llama-spm", "qwen2"] {
        let tok = load(&format!("tokenizer/ggml-vocab-{name}.gguf"));
        for text in ["🦙🫠🪿 emoji", "旅行 の 𠜎𠜱 CJK", "ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"]
        {
            let ids = tok.encode(text, false, false);
            let mut d = StreamDecoder::new();
            let mut split_seen = false;
            let mut out = String::new();
            for &id in &ids {
                let piece = tok.token_to_piece(id);
                let chunk = d.push(&tok, id);
                if !piece.is_empty() && std::str::from_utf8(&piece).is_err() {
                    split_seen = true;
                }
                assert!(
                    !chunk.contains('\u{FFFD}'),
                    "{name}: {text:?} emitted a broken char"
                );
                out.push_str(&chunk);
            }
            out.push_str(&d.finish());
            let want = if name == "llama-spm" {
                format!(" {text}")
            } else {
                text.to_string()
            };
            assert_eq!(out, want, "{name}");
            assert!(
                split_seen,
                "{name}: {text:?} never split a character across tokens"
            );
        }
    }
}

#[test]
fn special_tokens_parse_only_when_asked() {
    let tok = load("tokenizer/ggml-vocab-qwen2.gguf");
    let im_start = tok.token_id("<|im_start|>").unwrap();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let text = "<|im_start|>user\nhi<|im_end|>";
    let parsed = tok.encode(text, false, true);
    assert_eq!(parsed.first(), Some(&im_start));
    assert_eq!(parsed.last(), Some(&im_end));
    let plain = tok.encode(text, false, false);
    assert!(!plain.contains(&im_start) && !plain.contains(&im_end));
    assert_eq!(tok.decode(&plain), text);
    // Control tokens print as nothing unless asked.
    assert!(tok.token_to_piece(im_end).is_empty());
    assert_eq!(tok.token_to_piece_special(im_end), b"<|im_end|>");
    assert_eq!(tok.decode(&parsed), "user\nhi");
}

#[test]
fn end_of_generation_tokens() {
    let qwen = load("tokenizer/ggml-vocab-qwen2.gguf");
    // This Qwen vocabulary predates the FIM tokens (see the unit tests for
    // those); its end markers are found by text, with only EOS in the file.
    for text in ["<|endoftext|>", "<|im_end|>"] {
        let id = qwen.token_id(text).unwrap();
        assert!(qwen.is_eog(id), "{text}");
    }
    assert_eq!(qwen.eot(), qwen.token_id("<|endoftext|>"));
    for text in ["<|im_start|>", "[PAD151646]", "hello"] {
        let id = qwen.token_id(text).unwrap();
        assert!(!qwen.is_eog(id), "{text}");
    }
    assert_eq!(qwen.eos(), Some(151643));
    assert_eq!(qwen.bos(), Some(151643));
    assert!(!qwen.add_bos_default());

    let llama = load("tokenizer/ggml-vocab-llama-spm.gguf");
    assert_eq!((llama.bos(), llama.eos()), (Some(1), Some(2)));
    assert!(llama.add_bos_default());
    assert_eq!(llama.eog_ids(), &[2]);
    assert_eq!(llama.encode("", true, false), [1]);
    assert!(llama.encode("", false, false).is_empty());
}

#[test]
fn spm_pieces() {
    let tok = load("tokenizer/ggml-vocab-llama-spm.gguf");
    let newline = tok.token_id("<0x0A>").unwrap();
    assert_eq!(tok.token_to_piece(newline), b"\n");
    let the = tok.token_id("▁the").unwrap();
    assert_eq!(tok.token_to_piece(the), b" the");
    assert!(tok.token_to_piece(1).is_empty());
    assert_eq!(tok.token_text(1), Some("<s>"));
    assert_eq!(tok.token_text(32000), None);
    assert!(tok.token_to_piece(u32::MAX).is_empty());
    // BOS takes the place of the first token, so its space stays, as in llama.cpp.
    assert_eq!(tok.decode(&tok.encode("Hi", true, false)), " Hi");
}

#[test]
fn long_text_encodes_quickly() {
    let inputs = read_inputs(&testdata().join("tokenizer/ggml-vocab-qwen2.gguf.inp"));
    let mut text = String::new();
    while text.len() < 200_000 {
        for t in &inputs {
            text.push_str(t);
            text.push(' ');
        }
    }
    for name in ["llama-spm", "gpt-2", "qwen2"] {
        let tok = load(&format!("tokenizer/ggml-vocab-{name}.gguf"));
        let t0 = Instant::now();
        let ids = tok.encode(&text, false, false);
        let dt = t0.elapsed();
        eprintln!(
            "{name}: {} bytes -> {} tokens in {dt:?}",
            text.len(),
            ids.len()
        );
        assert_eq!(tok.decode(&ids), text, "{name}");
        assert!(dt.as_millis() < 2000, "{name}: {dt:?}");
    }
}
