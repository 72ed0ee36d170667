//! Assembling a [`Tokenizer`] from a [`VocabSpec`]: choosing the algorithm and
//! the flags llama.cpp derives from the model and pre-tokenizer names.

use super::bpe::{Bpe, MergeRanks};
use super::byte_level::ByteLevel;
use super::error::TokenizerError;
use super::piece::PieceTable;
use super::pretokenize::{PreTokenizer, PreTokenizerKind};
use super::spec::VocabSpec;
use super::special::{Defaults, Specials};
use super::spm;
use super::vocab::Vocab;
use super::{Algorithm, Tokenizer};

pub(crate) fn from_spec(
    spec: VocabSpec,
    mut notes: Vec<String>,
) -> Result<Tokenizer, TokenizerError> {
    enum Family {
        Spm,
        Bpe,
    }
    let family = match spec.model.as_str() {
        "llama" => Family::Spm,
        "gpt2" => Family::Bpe,
        other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
    };

    let (mut vocab, vocab_notes) = Vocab::build(spec.tokens, spec.scores, spec.token_types)?;
    notes.extend(vocab_notes);

    // SentencePiece vocabularies put <unk>, <s>, </s> first; llama.cpp assumes
    // so when the file is silent. For BPE it would assume id 11 (a comma in
    // GPT-2's vocabulary), which is never right, so BPE gets no defaults.
    let defaults = match family {
        Family::Spm => Defaults {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
        },
        Family::Bpe => Defaults {
            bos: None,
            eos: None,
            unk: None,
        },
    };
    let specials = Specials::resolve(&mut vocab, &spec.special, defaults, &mut notes)?;

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
        Family::Bpe => {
            let pre_name = spec.pre.as_deref().unwrap_or("");
            let kind = match PreTokenizerKind::from_name(pre_name) {
                Some(kind) => kind,
                None => {
                    notes.push(if pre_name.is_empty() {
                        "no `tokenizer.ggml.pre`; using the default pre-tokenizer, \
                         output may differ from the model's training"
                            .to_owned()
                    } else {
                        format!(
                            "unknown pre-tokenizer `{pre_name}`; using the default one, \
                             output may differ from the model's training"
                        )
                    });
                    PreTokenizerKind::Default
                }
            };
            let pre = PreTokenizer::new(kind).map_err(|e| TokenizerError::Regex {
                pre: pre_name.to_owned(),
                message: e,
            })?;
            let merges = spec
                .merges
                .ok_or(TokenizerError::MissingKey("tokenizer.ggml.merges"))?;
            let bpe = Bpe {
                ranks: MergeRanks::build(merges)?,
                pre,
                bytes: ByteLevel::new(),
                ignore_merges: kind.ignores_merges(pre_name),
            };
            let add_bos = kind.adds_bos_by_default(pre_name);
            (Algorithm::Bpe(Box::new(bpe)), add_bos, false)
        }
    };

    let add_bos = spec.add_bos.unwrap_or(add_bos_default);
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
        Algorithm::Spm { .. } => PieceTable::build(&vocab, None),
        Algorithm::Bpe(bpe) => PieceTable::build(&vocab, Some(&bpe.bytes)),
    };
    Ok(Tokenizer {
        add_space_prefix: spec.add_space_prefix.unwrap_or(add_space_prefix_default),
        algorithm,
        vocab,
        specials,
        pieces,
        add_bos,
        add_eos,
        notes,
    })
}
