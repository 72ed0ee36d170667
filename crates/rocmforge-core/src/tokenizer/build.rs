//! Assembling a [`Tokenizer`] from a [`VocabSpec`]: choosing the algorithm and
//! the flags llama.cpp derives from the model and pre-tokenizer names.

use super::bpe::{Bpe, MergeRanks};
use super::byte_level::ByteLevel;
use super::error::TokenizerError;
use super::piece::PieceTable;
use super::pretokenize::{self, PreTokenizer};
use super::spec::VocabSpec;
use super::special::{Defaults, Specials};
use super::spm;
use super::vocab::Vocab;
use super::wpm::Wpm;
use super::{Algorithm, Tokenizer};

enum Family {
    Spm,
    /// `gpt2`, and `gemma4`, whose pre-tokenizer is implied by the model name.
    Bpe {
        forced_pre: Option<&'static str>,
    },
    Wpm,
}

pub(crate) fn from_spec(
    spec: VocabSpec,
    mut notes: Vec<String>,
) -> Result<Tokenizer, TokenizerError> {
    let family = match spec.model.as_str() {
        "llama" => Family::Spm,
        "gpt2" => Family::Bpe { forced_pre: None },
        "gemma4" => Family::Bpe {
            forced_pre: Some("gemma4"),
        },
        "bert" => Family::Wpm,
        other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
    };

    let (mut vocab, vocab_notes) = Vocab::build(spec.tokens, spec.scores, spec.token_types)?;
    notes.extend(vocab_notes);

    // The ids llama.cpp assumes when the file is silent. SentencePiece
    // vocabularies put <unk>, <s>, </s> first; BERT's have [UNK] at 100 and
    // [CLS] (its BOS) at 101. For BPE llama.cpp would assume id 11 (a comma in
    // GPT-2's vocabulary), which is never right, so BPE gets no defaults.
    let defaults = match family {
        Family::Spm => Defaults {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
        },
        Family::Bpe { .. } => Defaults {
            bos: None,
            eos: None,
            unk: None,
        },
        Family::Wpm => Defaults {
            bos: Some(101),
            eos: None,
            unk: Some(100),
        },
    };
    let mut special_ids = spec.special.clone();
    let pre_spec = match family {
        Family::Bpe { forced_pre } => {
            let name = forced_pre.or(spec.pre.as_deref());
            let pre_spec = match name {
                // llama.cpp warns but uses its default, which is what files
                // converted without a pre-tokenizer name were made with.
                None => pretokenize::missing(),
                Some(name) => pretokenize::lookup(name).unwrap_or_else(|| {
                    notes.push(format!(
                        "unknown pre-tokenizer `{name}`; using the default one, \
                         output may differ from the model's training"
                    ));
                    pretokenize::missing()
                }),
            };
            if pre_spec.no_bos {
                special_ids.bos = None;
            }
            Some((name.unwrap_or("default").to_owned(), pre_spec))
        }
        _ => None,
    };
    let specials = Specials::resolve(&mut vocab, &special_ids, defaults, &mut notes)?;
    let sep = match family {
        Family::Wpm => {
            let sep = spec.special.sep.unwrap_or(102);
            Some(
                u32::try_from(sep)
                    .ok()
                    .filter(|&s| (s as usize) < vocab.len())
                    .ok_or(TokenizerError::TokenIdOutOfRange {
                        key: "tokenizer.ggml.seperator_token_id",
                        id: sep,
                        n_vocab: vocab.len(),
                    })?,
            )
        }
        _ => None,
    };

    let mut forced_bos = false;
    let (algorithm, add_bos_default, add_space_prefix_default) = match family {
        Family::Spm => {
            let bytes = spm::byte_fallback_table(&vocab, specials.unk);
            (
                Algorithm::Spm {
                    bytes: Box::new(bytes),
                },
                true,
                true,
            )
        }
        Family::Bpe { .. } => {
            let (pre_name, pre_spec) =
                pre_spec.unwrap_or_else(|| ("default".to_owned(), pretokenize::missing()));
            let pre = PreTokenizer::new(pre_spec.kind).map_err(|e| TokenizerError::Regex {
                pre: pre_name,
                message: e,
            })?;
            forced_bos = pre_spec.kind == pretokenize::PreType::Gemma4;
            let merges = spec
                .merges
                .ok_or(TokenizerError::MissingKey("tokenizer.ggml.merges"))?;
            let bpe = Bpe {
                ranks: MergeRanks::build(merges)?,
                pre,
                bytes: ByteLevel::new(),
                ignore_merges: pre_spec.ignore_merges,
                byte_encode: pre_spec.byte_encode,
                newline_runs_whole: pre_spec.kind == pretokenize::PreType::Gemma4,
                escape_whitespace: pre_spec.escape_whitespace,
            };
            (Algorithm::Bpe(Box::new(bpe)), pre_spec.add_bos, false)
        }
        Family::Wpm => {
            let lowercase = spec.normalizer_lowercase.unwrap_or(true);
            let strip_accents = spec.normalizer_strip_accents.unwrap_or(lowercase);
            let wpm = Wpm::new(&vocab, specials.unk, lowercase, strip_accents);
            (Algorithm::Wpm(Box::new(wpm)), true, false)
        }
    };
    // llama.cpp overrides a Gemma 4 file's `add_bos_token = false`: the model
    // needs BOS and some conversions got the flag wrong.
    let add_bos = forced_bos || spec.add_bos.unwrap_or(add_bos_default);
    let add_eos = spec.add_eos.unwrap_or(false);
    if add_bos && specials.bos.is_none() {
        return Err(TokenizerError::MissingSpecialToken {
            flag: "tokenizer.ggml.add_bos_token",
            id_key: "tokenizer.ggml.bos_token_id",
        });
    }
    if add_eos && specials.eos.is_none() {
        return Err(TokenizerError::MissingSpecialToken {
            flag: "tokenizer.ggml.add_eos_token",
            id_key: "tokenizer.ggml.eos_token_id",
        });
    }

    let pieces = match &algorithm {
        Algorithm::Bpe(bpe) if bpe.byte_encode => PieceTable::build(&vocab, Some(&bpe.bytes)),
        // SentencePiece-style texts: U+2581 for spaces, `<0xXX>` bytes.
        _ => PieceTable::build(&vocab, None),
    };
    // WordPiece words start with U+2581, so the first piece of a text starts
    // with a space that was never in it.
    let strip_first_space = matches!(algorithm, Algorithm::Wpm(_));
    Ok(Tokenizer {
        add_space_prefix: spec.add_space_prefix.unwrap_or(add_space_prefix_default),
        strip_first_space,
        sep,
        algorithm,
        vocab,
        specials,
        pieces,
        add_bos,
        add_eos,
        notes,
    })
}
