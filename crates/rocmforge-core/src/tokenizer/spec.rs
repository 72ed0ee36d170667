//! The tokenizer's metadata, lifted out of GGUF values into plain Rust types.
//!
//! Keeping this step separate lets the algorithms be built and tested from a
//! [`VocabSpec`] written by hand, and confines GGUF type checking to one place.

use crate::gguf::GgufValue;

use super::error::TokenizerError;

/// Special-token ids as the file states them, not yet checked against the
/// vocabulary size. Absent keys are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<u64>,
    pub eos: Option<u64>,
    pub eot: Option<u64>,
    pub eom: Option<u64>,
    pub unk: Option<u64>,
    pub pad: Option<u64>,
    pub fim_pre: Option<u64>,
    pub fim_suf: Option<u64>,
    pub fim_mid: Option<u64>,
    pub fim_pad: Option<u64>,
    pub fim_rep: Option<u64>,
    pub fim_sep: Option<u64>,
    /// WordPiece's separator (`[SEP]`), appended after the text.
    pub sep: Option<u64>,
}

/// Everything the tokenizer reads from `tokenizer.ggml.*`.
#[derive(Debug, Clone, Default)]
pub struct VocabSpec {
    /// `tokenizer.ggml.model`: `llama` (SentencePiece BPE), `gpt2` (BPE with
    /// merges), `gemma4` (SPM-style BPE with merges) or `bert` (WordPiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer name (BPE only).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Option<Vec<f32>>,
    /// ggml token types: 1 normal, 2 unknown, 3 control, 4 user-defined,
    /// 5 unused, 6 byte.
    pub token_types: Option<Vec<i32>>,
    /// `"left right"` merge rules, highest priority first.
    pub merges: Option<Vec<String>>,
    pub special: SpecialIds,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
    /// BERT normalizer options (WordPiece only); llama.cpp defaults both to
    /// true, and `strip_accents` to `lowercase`.
    pub normalizer_lowercase: Option<bool>,
    pub normalizer_strip_accents: Option<bool>,
}

const K_MODEL: &str = "tokenizer.ggml.model";
const K_PRE: &str = "tokenizer.ggml.pre";
const K_TOKENS: &str = "tokenizer.ggml.tokens";
const K_SCORES: &str = "tokenizer.ggml.scores";
const K_TYPES: &str = "tokenizer.ggml.token_type";
const K_MERGES: &str = "tokenizer.ggml.merges";

/// Every key the tokenizer reads, in one list so that the metadata sweep test
/// (`crates/rocmforge/tests/metadata_sweep.rs`) tries bad values for each;
/// reading a key missing from it trips a debug assertion.
pub const METADATA_KEYS: &[&str] = &[
    K_MODEL,
    K_PRE,
    K_TOKENS,
    K_SCORES,
    K_TYPES,
    K_MERGES,
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.fim_pre_token_id",
    "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id",
    "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id",
    "tokenizer.ggml.fim_sep_token_id",
    "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.add_space_prefix",
    "tokenizer.ggml.normalizer.lowercase",
    "tokenizer.ggml.normalizer.strip_accents",
];

impl VocabSpec {
    /// Reads the spec through `get`, a metadata lookup such as
    /// [`crate::gguf::GgufFile::get`]. Wrong value types are errors; missing
    /// optional keys are `None`. Also returns notes on odd but tolerated values.
    pub fn from_metadata<'a>(
        get: impl Fn(&str) -> Option<&'a GgufValue>,
    ) -> Result<(VocabSpec, Vec<String>), TokenizerError> {
        let get = |key: &str| {
            debug_assert!(
                METADATA_KEYS.contains(&key),
                "{key} is read but missing from METADATA_KEYS, so no test sweeps it"
            );
            get(key)
        };
        let mut notes = Vec::new();
        let model = match get(K_MODEL) {
            None => return Err(TokenizerError::MissingKey(K_MODEL)),
            Some(v) => string(K_MODEL, v)?.to_owned(),
        };
        let pre = get(K_PRE)
            .map(|v| string(K_PRE, v).map(str::to_owned))
            .transpose()?;
        let tokens = match get(K_TOKENS) {
            None => return Err(TokenizerError::MissingKey(K_TOKENS)),
            Some(v) => string_array(K_TOKENS, v)?,
        };
        let scores = get(K_SCORES)
            .map(|v| {
                array(K_SCORES, v, "array[f32]")?
                    .iter()
                    .enumerate()
                    .map(|(index, e)| match e {
                        GgufValue::F32(_) | GgufValue::I32(_) => Ok(e.as_f32().unwrap_or(0.0)),
                        _ => Err(TokenizerError::WrongElementType {
                            key: K_SCORES,
                            index,
                            expected: "f32",
                            found: e.brief(),
                        }),
                    })
                    .collect::<Result<Vec<f32>, _>>()
            })
            .transpose()?;
        let token_types = get(K_TYPES)
            .map(|v| {
                array(K_TYPES, v, "array[i32]")?
                    .iter()
                    .enumerate()
                    .map(|(index, e)| {
                        e.as_i64()
                            .and_then(|t| i32::try_from(t).ok())
                            .ok_or_else(|| TokenizerError::WrongElementType {
                                key: K_TYPES,
                                index,
                                expected: "i32",
                                found: e.brief(),
                            })
                    })
                    .collect::<Result<Vec<i32>, _>>()
            })
            .transpose()?;
        let merges = get(K_MERGES)
            .map(|v| string_array(K_MERGES, v))
            .transpose()?;

        let mut id = |key: &'static str| -> Result<Option<u64>, TokenizerError> {
            let Some(v) = get(key) else { return Ok(None) };
            if let Some(id) = v.as_u64() {
                return Ok(Some(id));
            }
            if v.as_i64().is_some() {
                // Some converters write -1 for "none".
                notes.push(format!("`{key}` is negative; treated as absent"));
                return Ok(None);
            }
            Err(wrong_type(key, "an integer", v))
        };
        let special = SpecialIds {
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            eot: id("tokenizer.ggml.eot_token_id")?,
            eom: id("tokenizer.ggml.eom_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            fim_pre: id("tokenizer.ggml.fim_pre_token_id")?,
            fim_suf: id("tokenizer.ggml.fim_suf_token_id")?,
            fim_mid: id("tokenizer.ggml.fim_mid_token_id")?,
            fim_pad: id("tokenizer.ggml.fim_pad_token_id")?,
            fim_rep: id("tokenizer.ggml.fim_rep_token_id")?,
            fim_sep: id("tokenizer.ggml.fim_sep_token_id")?,
            // Sic: llama.cpp's key name.
            sep: id("tokenizer.ggml.seperator_token_id")?,
        };
        let flag = |key: &'static str| -> Result<Option<bool>, TokenizerError> {
            get(key)
                .map(|v| v.as_bool().ok_or_else(|| wrong_type(key, "bool", v)))
                .transpose()
        };
        let spec = VocabSpec {
            model,
            pre,
            tokens,
            scores,
            token_types,
            merges,
            special,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
            normalizer_lowercase: flag("tokenizer.ggml.normalizer.lowercase")?,
            normalizer_strip_accents: flag("tokenizer.ggml.normalizer.strip_accents")?,
        };
        Ok((spec, notes))
    }
}

fn wrong_type(key: &'static str, expected: &'static str, v: &GgufValue) -> TokenizerError {
    TokenizerError::WrongType {
        key,
        expected,
        found: v.brief(),
    }
}

fn string<'v>(key: &'static str, v: &'v GgufValue) -> Result<&'v str, TokenizerError> {
    v.as_str().ok_or_else(|| wrong_type(key, "string", v))
}

fn array<'v>(
    key: &'static str,
    v: &'v GgufValue,
    expected: &'static str,
) -> Result<&'v [GgufValue], TokenizerError> {
    v.as_array().ok_or_else(|| wrong_type(key, expected, v))
}

fn string_array(key: &'static str, v: &GgufValue) -> Result<Vec<String>, TokenizerError> {
    array(key, v, "array[string]")?
        .iter()
        .enumerate()
        .map(|(index, e)| {
            e.as_str()
                .map(str::to_owned)
                .ok_or_else(|| TokenizerError::WrongElementType {
                    key,
                    index,
                    expected: "string",
                    found: e.brief(),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(
        kv: &HashMap<&'static str, GgufValue>,
    ) -> Result<(VocabSpec, Vec<String>), TokenizerError> {
        VocabSpec::from_metadata(|k| kv.get(k))
    }

    fn minimal() -> HashMap<&'static str, GgufValue> {
        let mut kv = HashMap::new();
        kv.insert(K_MODEL, GgufValue::from("llama"));
        kv.insert(K_TOKENS, GgufValue::from(vec!["<unk>", "a"]));
        kv
    }

    #[test]
    fn reads_minimal_spec() {
        let (spec, notes) = lookup(&minimal()).unwrap();
        assert_eq!(spec.model, "llama");
        assert_eq!(spec.tokens, ["<unk>", "a"]);
        assert!(spec.scores.is_none() && spec.merges.is_none() && notes.is_empty());
    }

    #[test]
    fn missing_tokens_is_an_error() {
        let mut kv = minimal();
        kv.remove(K_TOKENS);
        assert!(matches!(
            lookup(&kv),
            Err(TokenizerError::MissingKey(K_TOKENS))
        ));
    }

    #[test]
    fn wrong_types_are_errors() {
        let mut kv = minimal();
        kv.insert(K_TOKENS, GgufValue::from(vec![1u32, 2]));
        assert!(matches!(
            lookup(&kv),
            Err(TokenizerError::WrongElementType {
                key: K_TOKENS,
                index: 0,
                ..
            })
        ));
        let mut kv = minimal();
        kv.insert("tokenizer.ggml.bos_token_id", GgufValue::from("1"));
        assert!(matches!(lookup(&kv), Err(TokenizerError::WrongType { .. })));
        let mut kv = minimal();
        kv.insert("tokenizer.ggml.add_bos_token", GgufValue::U8(1));
        assert!(matches!(lookup(&kv), Err(TokenizerError::WrongType { .. })));
    }

    #[test]
    fn negative_special_id_is_absent_with_a_note() {
        let mut kv = minimal();
        kv.insert("tokenizer.ggml.padding_token_id", GgufValue::I32(-1));
        let (spec, notes) = lookup(&kv).unwrap();
        assert_eq!(spec.special.pad, None);
        assert_eq!(notes.len(), 1);
    }
}
