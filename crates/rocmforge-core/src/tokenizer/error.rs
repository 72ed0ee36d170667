//! Why a tokenizer could not be built from a file's metadata.

/// Bad or unsupported tokenizer metadata. Encoding and decoding never fail once
/// a [`super::Tokenizer`] exists; every check happens while building it.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer metadata key `{0}` is missing")]
    MissingKey(&'static str),

    /// `found` is the value in brief ([`crate::gguf::GgufValue::brief`]).
    #[error("tokenizer metadata key `{key}` should be {expected}, found {found}")]
    WrongType {
        key: &'static str,
        expected: &'static str,
        found: String,
    },

    #[error("element {index} of `{key}` should be {expected}, found {found}")]
    WrongElementType {
        key: &'static str,
        index: usize,
        expected: &'static str,
        found: String,
    },

    #[error(
        "unsupported tokenizer model {0:?} (supported: llama, gpt2, gemma4, bert; \
         not t5/UGM, rwkv, plamo2)"
    )]
    UnsupportedModel(String),

    #[error("the vocabulary is empty")]
    EmptyVocab,

    #[error("vocabulary of {0} tokens does not fit 32-bit token ids")]
    VocabTooLarge(usize),

    #[error("`{key}` has {found} entries but the vocabulary has {expected} tokens")]
    LengthMismatch {
        key: &'static str,
        expected: usize,
        found: usize,
    },

    #[error("token text {text:?} appears twice, as ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },

    #[error("merge rule {index} ({line:?}) has no space separating its two parts")]
    BadMerge { index: usize, line: String },

    #[error("`{key}` = {id} is outside the vocabulary of {n_vocab} tokens")]
    TokenIdOutOfRange {
        key: &'static str,
        id: u64,
        n_vocab: usize,
    },

    #[error("`{flag}` is set but the file names no `{id_key}`")]
    MissingSpecialToken {
        flag: &'static str,
        id_key: &'static str,
    },

    #[error("pre-tokenizer regex for {pre:?} failed to compile: {message}")]
    Regex { pre: String, message: String },
}
