//! Text ↔ token ids, reproducing llama.cpp's tokenizers from GGUF metadata.
//!
//! Three families cover the supported models:
//! - **SPM** (`tokenizer.ggml.model = "llama"`; Llama 1/2, Mistral, Phi-3,
//!   Baichuan): spaces become `▁`, a space is prefixed to the text, adjacent
//!   symbols merge by token score, unknown characters fall back to `<0xXX>`
//!   byte tokens (`spm`).
//! - **BPE** (`"gpt2"`; GPT-2, Llama 3, Qwen2/3/3.5, DeepSeek, Falcon, ...): a
//!   pre-tokenizer chosen by `tokenizer.ggml.pre` cuts words, bytes map to
//!   GPT-2's printable characters, merge rules apply by rank (`bpe`,
//!   `pretokenize`, `byte_level`). Every pre-tokenizer name llama.cpp accepts
//!   is known ([`supported_pre_tokenizers`]). `"gemma4"` is the SPM-style
//!   variant: spaces become `▁`, words stay UTF-8, uncovered bytes become
//!   `<0xXX>` tokens, and merges still come from the file.
//! - **WPM** (`"bert"`): BERT's normalizer and greedy longest-match WordPiece
//!   (`wpm`).
//!
//! UGM (`"t5"`), RWKV and PLaMo-2 vocabularies are refused with
//! [`TokenizerError::UnsupportedModel`].
//!
//! Before either runs, text is cut around special tokens written literally in
//! it (`partition`): user-defined tokens always, control tokens only when the
//! caller asks (`parse_special`), exactly as llama.cpp partitions input. Which
//! ids are BOS, EOS, end of turn and end of generation is settled in `special`.
//!
//! # Why hand-written rather than the `tokenizers` crate
//! The reference outputs are llama.cpp's, and llama.cpp differs from Hugging
//! Face in the details that decide exact ids: its SPM is the score-driven bigram
//! merge rather than SentencePiece's own, special tokens are partitioned by
//! attribute and length before pre-tokenization, roles such as end-of-turn are
//! inferred from token text, and vocabulary flags (BOS, `ignore_merges`) come
//! from the pre-tokenizer name. The `tokenizers` crate also needs a
//! `tokenizer.json` this crate would first have to synthesize from GGUF, and
//! pulls in a large dependency tree (Oniguruma by default). Following
//! `llama-vocab.cpp`'s semantics directly is shorter and checkable against the
//! fixtures; only the regex engine is borrowed (`fancy-regex`, for the
//! `\s+(?!\S)` lookahead the patterns use).
//!
//! # Deliberate differences from llama.cpp
//! - Out-of-range BOS/EOS/EOT/EOM ids are errors (llama.cpp warns and falls back
//!   to defaults); other bad ids are dropped with a note in [`Tokenizer::notes`].
//! - An unknown `tokenizer.ggml.pre` falls back to the default pre-tokenizer
//!   with a note (current llama.cpp refuses unknown names). A missing one
//!   silently means the default, as in llama.cpp (which also logs a warning):
//!   files such as llama.cpp's own Aquila and GPT-NeoX vocabularies were
//!   converted that way.
//! - BPE files without BOS/EOS ids get none (llama.cpp assumes id 11).
//! - [`Tokenizer::decode`] does not apply `clean_up_tokenization_spaces`; llama.cpp
//!   skips it too when printing generated tokens one by one, and it would
//!   break `decode(encode(text)) == text`.
//! - Per-model strip attributes (`lstrip`/`rstrip` for Phi-3, Jina masks) are not
//!   applied.

mod bpe;
mod build;
mod byte_level;
mod error;
mod nfd_table;
mod partition;
mod piece;
mod pretokenize;
mod spec;
mod special;
mod spm;
mod unicode;
mod vocab;
mod wpm;

pub use error::TokenizerError;
pub use piece::StreamDecoder;
pub use spec::{SpecialIds, VocabSpec, METADATA_KEYS};

use std::ops::Range;

use partition::Fragment;
use vocab::Attr;

#[derive(Debug, Clone)]
enum Algorithm {
    Spm { bytes: Box<[Option<u32>; 256]> },
    Bpe(Box<bpe::Bpe>),
    Wpm(Box<wpm::Wpm>),
}

/// A loaded vocabulary with its encoder and decoder. Immutable and `Sync`, so
/// one instance can serve any number of threads.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    algorithm: Algorithm,
    vocab: vocab::Vocab,
    specials: special::Specials,
    pieces: piece::PieceTable,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    /// Drop the first printed word's leading space when decoding: it is
    /// WordPiece's word mark, not text.
    strip_first_space: bool,
    /// WordPiece's `[SEP]`, appended with the special tokens.
    sep: Option<u32>,
    notes: Vec<String>,
}

/// Every `tokenizer.ggml.pre` name the BPE tokenizer knows: all the names
/// llama.cpp accepts.
pub fn supported_pre_tokenizers() -> impl Iterator<Item = &'static str> {
    pretokenize::all_names()
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's `tokenizer.ggml.*` keys.
    pub fn from_gguf(file: &crate::gguf::GgufFile) -> Result<Tokenizer, TokenizerError> {
        Self::from_metadata(|key| file.get(key))
    }

    /// Like [`Self::from_gguf`] with any metadata lookup (a map in tests).
    pub fn from_metadata<'a>(
        get: impl Fn(&str) -> Option<&'a crate::gguf::GgufValue>,
    ) -> Result<Tokenizer, TokenizerError> {
        let (spec, notes) = VocabSpec::from_metadata(get)?;
        build::from_spec(spec, notes)
    }

    /// Builds a tokenizer from metadata already in Rust types.
    pub fn from_spec(spec: VocabSpec) -> Result<Tokenizer, TokenizerError> {
        build::from_spec(spec, Vec::new())
    }

    /// Token ids for `text`. With `add_bos`, BOS goes first (if the vocabulary
    /// has one) and EOS last if the file sets `add_eos_token`. With
    /// `parse_special`, control tokens written in the text (`<|im_start|>`)
    /// become their ids; otherwise they are tokenized as plain text.
    pub fn encode(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<u32> {
        self.encode_parts(text, add_bos, parse_special, &[])
    }

    /// As [`Self::encode`] with `parse_special`, except inside the byte
    /// ranges `plain`, where control tokens written in the text stay text:
    /// a chat message's content inside its rendered template, so that what
    /// a user wrote cannot become a turn marker. Outside them, and where
    /// the text holds no control token's text, the tokens are
    /// `encode(text, add_bos, true)`'s.
    pub fn encode_with_plain(&self, text: &str, add_bos: bool, plain: &[Range<usize>]) -> Vec<u32> {
        self.encode_parts(text, add_bos, true, plain)
    }

    /// Whether `text` holds the text of a control (or unknown) token, which
    /// [`Self::encode`] with `parse_special` would turn into that token.
    pub fn has_control_text(&self, text: &str) -> bool {
        self.specials.literal.iter().any(|&id| {
            partition::is_hidden(&self.vocab, id)
                && self
                    .vocab
                    .text(id)
                    .is_some_and(|t| !t.is_empty() && text.contains(t))
        })
    }

    fn encode_parts(
        &self,
        text: &str,
        add_bos: bool,
        parse_special: bool,
        plain: &[Range<usize>],
    ) -> Vec<u32> {
        let fragments = partition::partition(
            text,
            &self.vocab,
            &self.specials.literal,
            parse_special,
            plain,
        );
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_bos {
            out.extend(self.specials.bos);
        }
        match &self.algorithm {
            Algorithm::Spm { bytes } => {
                // SentencePiece sees every stretch of text as starting a new
                // sentence piece, so the prefix space goes in front of the text
                // and after each special token.
                let mut after_special = true;
                let mut escaped = String::new();
                for frag in fragments {
                    match frag {
                        Fragment::Text(a, b) => {
                            escaped.clear();
                            if self.add_space_prefix && after_special {
                                escaped.push(spm::SPACE_MARK);
                            }
                            for c in text[a..b].chars() {
                                escaped.push(if c == ' ' { spm::SPACE_MARK } else { c });
                            }
                            spm::encode(&self.vocab, bytes, &escaped, &mut out);
                            after_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                    }
                }
            }
            Algorithm::Bpe(bpe) => {
                for frag in fragments {
                    match frag {
                        Fragment::Text(a, b) => bpe.encode(&self.vocab, &text[a..b], &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Algorithm::Wpm(wpm) => {
                for frag in fragments {
                    match frag {
                        Fragment::Text(a, b) => wpm.encode(&self.vocab, &text[a..b], &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_bos && self.add_eos {
            out.extend(self.specials.eos);
        }
        if add_bos {
            out.extend(self.sep);
        }
        out
    }

    /// Whether prompts for this model start with BOS (`add_bos_token`, else the
    /// model family's default: yes for SPM and the Llama 3 family).
    pub fn add_bos_default(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_bos = true, ..)` also appends EOS.
    pub fn add_eos_default(&self) -> bool {
        self.add_eos
    }

    pub fn bos(&self) -> Option<u32> {
        self.specials.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.specials.eos
    }

    /// End of turn (`<|eot_id|>`, `<|im_end|>`, ...), from the file or by text.
    pub fn eot(&self) -> Option<u32> {
        self.specials.eot
    }

    /// End of message (`<|eom_id|>`, Llama 3.1 tool calls).
    pub fn eom(&self) -> Option<u32> {
        self.specials.eom
    }

    pub fn unk(&self) -> Option<u32> {
        self.specials.unk
    }

    pub fn pad(&self) -> Option<u32> {
        self.specials.pad
    }

    /// Whether generating `id` ends generation: EOS, EOT, EOM and the control
    /// tokens llama.cpp treats alike (`<|im_end|>`, `<|endoftext|>`, FIM pad, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.specials.is_eog(id)
    }

    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.specials.eog
    }

    /// Whether `id` is a control or unknown token (printed as nothing).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.attr(id).any(Attr::CONTROL.union(Attr::UNKNOWN))
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The id of a token by its exact vocabulary text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// The raw vocabulary string (`▁the`, `Ġthe`, `<0x0A>`, `<|im_end|>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.text(id)
    }

    /// The bytes `id` stands for in output. Control and unknown tokens give
    /// nothing; out-of-range ids give nothing. May be part of a UTF-8
    /// character (byte tokens).
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        self.pieces.get(id).to_vec()
    }

    /// Like [`Self::token_to_piece`] but control and unknown tokens render as
    /// their text, for showing prompts or debugging.
    pub fn token_to_piece_special(&self, id: u32) -> Vec<u8> {
        if self.is_control(id) {
            self.vocab.text(id).unwrap_or("").as_bytes().to_vec()
        } else {
            self.token_to_piece(id)
        }
    }

    /// Concatenated pieces as text, invalid UTF-8 replaced by U+FFFD. With a
    /// space-prefixing vocabulary the first token's leading space is dropped,
    /// so `decode(encode(s, false, false)) == s`.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let piece = self.pieces.get(id);
            let piece = match piece {
                // SPM: only the very first token (after BOS the space stays,
                // as in llama.cpp). WordPiece: the first printed word, also
                // after [CLS].
                [b' ', rest @ ..]
                    if (i == 0 && self.add_space_prefix)
                        || (bytes.is_empty() && self.strip_first_space) =>
                {
                    rest
                }
                _ => piece,
            };
            bytes.extend_from_slice(piece);
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// Non-fatal findings while loading (unknown pre-tokenizer, ignored ids,
    /// empty tokens), for the caller to log.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}
