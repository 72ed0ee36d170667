//! Special tokens: which ids play which role and which end generation.
//!
//! GGUF files under-describe their special tokens, so llama.cpp patches them up
//! at load time by looking at token texts (`<|im_end|>` ends a turn even where
//! no `eot_token_id` says so, FIM markers are control tokens even where typed
//! user-defined, ...). This module repeats those fix-ups, since they change both
//! what ends generation and how text containing such markers is tokenized.

use super::error::TokenizerError;
use super::spec::SpecialIds;
use super::vocab::{Attr, Vocab};

/// Texts llama.cpp takes as end-of-turn when the file names no EOT token.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Texts of tokens that end generation wherever they occur.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// gpt-oss channel markers must print even though they are control-typed.
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// Resolved special-token roles.
#[derive(Debug, Clone, Default)]
pub(crate) struct Specials {
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) eot: Option<u32>,
    pub(crate) eom: Option<u32>,
    pub(crate) unk: Option<u32>,
    pub(crate) pad: Option<u32>,
    /// End-of-generation ids, sorted.
    pub(crate) eog: Vec<u32>,
    /// Ids that may be matched literally in input text (control, user-defined,
    /// unknown), longest text first so that longer markers win.
    pub(crate) literal: Vec<u32>,
}

/// Defaults a model type assumes when the file names no id.
pub(crate) struct Defaults {
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) unk: Option<u32>,
}

impl Specials {
    /// Resolves roles from the file's ids and the token texts, adjusting token
    /// attributes the way llama.cpp does. Ids the encoder or the generation loop
    /// relies on (BOS, EOS, EOT, EOM) must be in range; a bad id elsewhere is
    /// dropped with a note.
    pub(crate) fn resolve(
        vocab: &mut Vocab,
        ids: &SpecialIds,
        defaults: Defaults,
        notes: &mut Vec<String>,
    ) -> Result<Specials, TokenizerError> {
        let n = vocab.len();
        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        let strict = |key: &'static str, id: Option<u64>, default: Option<u32>| match id {
            None => Ok(in_range(default)),
            Some(id) if id < n as u64 => Ok(Some(id as u32)),
            Some(id) => Err(TokenizerError::TokenIdOutOfRange {
                key,
                id,
                n_vocab: n,
            }),
        };
        let mut lenient = |key: &'static str, id: Option<u64>, default: Option<u32>| match id {
            Some(id) if id < n as u64 => Some(id as u32),
            Some(id) => {
                notes.push(format!("`{key}` = {id} is outside the vocabulary; ignored"));
                in_range(default)
            }
            None => in_range(default),
        };

        let bos = strict("tokenizer.ggml.bos_token_id", ids.bos, defaults.bos)?;
        let eos = strict("tokenizer.ggml.eos_token_id", ids.eos, defaults.eos)?;
        let mut eot = strict("tokenizer.ggml.eot_token_id", ids.eot, None)?;
        let mut eom = strict("tokenizer.ggml.eom_token_id", ids.eom, None)?;
        let unk = lenient("tokenizer.ggml.unknown_token_id", ids.unk, defaults.unk);
        let pad = lenient("tokenizer.ggml.padding_token_id", ids.pad, None);
        let mut fim = [
            (
                lenient("tokenizer.ggml.fim_pre_token_id", ids.fim_pre, None),
                FIM_PRE_TEXTS,
            ),
            (
                lenient("tokenizer.ggml.fim_suf_token_id", ids.fim_suf, None),
                FIM_SUF_TEXTS,
            ),
            (
                lenient("tokenizer.ggml.fim_mid_token_id", ids.fim_mid, None),
                FIM_MID_TEXTS,
            ),
            (
                lenient("tokenizer.ggml.fim_pad_token_id", ids.fim_pad, None),
                FIM_PAD_TEXTS,
            ),
            (
                lenient("tokenizer.ggml.fim_rep_token_id", ids.fim_rep, None),
                FIM_REP_TEXTS,
            ),
            (
                lenient("tokenizer.ggml.fim_sep_token_id", ids.fim_sep, None),
                FIM_SEP_TEXTS,
            ),
        ];

        // Roles the file left open are found by text; llama.cpp takes whichever
        // match its hash map yields first, here the lowest id for determinism.
        // A token found this way is a control token whatever its declared type.
        let detect = |vocab: &mut Vocab, slot: &mut Option<u32>, texts: &[&str]| {
            if slot.is_none() {
                *slot = texts.iter().filter_map(|t| vocab.id(t)).min();
                if let Some(id) = *slot {
                    vocab.add_attr(id, Attr::CONTROL);
                }
            }
        };
        detect(vocab, &mut eot, EOT_TEXTS);
        detect(vocab, &mut eom, &["<|eom_id|>"]);
        for (slot, texts) in fim.iter_mut() {
            detect(vocab, slot, texts);
        }

        let mut eog: Vec<u32> = fim[3..].iter().filter_map(|(id, _)| *id).collect();
        for text in EOG_TEXTS {
            if let Some(id) = vocab.id(text) {
                eog.push(id);
                vocab.add_attr(id, Attr::CONTROL);
            }
        }
        for text in ALWAYS_RENDERED {
            if let Some(id) = vocab.id(text) {
                vocab.set_attr(id, Attr::USER_DEFINED);
            }
        }
        eog.extend([eos, eot, eom].into_iter().flatten());
        eog.sort_unstable();
        eog.dedup();

        // Harmony-style vocabularies use <|end|> to close a message, not the
        // turn; there <|return|>/<|call|> end generation instead.
        let has = |eog: &[u32], text: &str| vocab.id(text).is_some_and(|id| eog.contains(&id));
        let harmony = has(&eog, "<|end|>")
            && ((has(&eog, "<|return|>") && (has(&eog, "<|call|>") || has(&eog, "<|calls|>")))
                || ((has(&eog, "<|call|>") || has(&eog, "<|calls|>")) && has(&eog, "<|flush|>")));
        if harmony {
            if let Some(end) = vocab.id("<|end|>") {
                eog.retain(|&id| id != end);
                vocab.set_attr(end, Attr::USER_DEFINED);
            }
        }

        let literal_attrs = Attr::CONTROL.union(Attr::USER_DEFINED).union(Attr::UNKNOWN);
        let mut literal: Vec<u32> = (0..n as u32)
            .filter(|&id| vocab.attr(id).any(literal_attrs))
            .collect();
        literal.sort_by_key(|&id| std::cmp::Reverse(vocab.text(id).map_or(0, str::len)));

        Ok(Specials {
            bos,
            eos,
            eot,
            eom,
            unk,
            pad,
            eog,
            literal,
        })
    }

    pub(crate) fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[&str], types: &[i32]) -> Vocab {
        let tokens = tokens.iter().map(|s| s.to_string()).collect();
        Vocab::build(tokens, None, Some(types.to_vec())).unwrap().0
    }

    fn no_defaults() -> Defaults {
        Defaults {
            bos: None,
            eos: None,
            unk: None,
        }
    }

    #[test]
    fn detects_roles_and_eog_by_text() {
        // <|fim_pad|> typed user-defined becomes control and ends generation.
        let mut v = vocab(
            &[
                "a",
                "<|endoftext|>",
                "<|im_start|>",
                "<|im_end|>",
                "<|fim_pad|>",
            ],
            &[1, 3, 3, 3, 4],
        );
        let ids = SpecialIds {
            eos: Some(1),
            ..Default::default()
        };
        let mut notes = vec![];
        let s = Specials::resolve(&mut v, &ids, no_defaults(), &mut notes).unwrap();
        assert_eq!(s.eos, Some(1));
        // Both <|endoftext|> and <|im_end|> are EOT candidates; lowest id wins.
        assert_eq!(s.eot, Some(1));
        assert_eq!(s.eog, vec![1, 3, 4]);
        assert!(!s.is_eog(2) && s.is_eog(3));
        assert!(v.attr(4).any(Attr::CONTROL));
        // Longest text first (13, 12, 11, 10 bytes); "a" is normal, never literal.
        assert_eq!(s.literal, vec![1, 2, 4, 3]);
    }

    #[test]
    fn out_of_range_ids() {
        let mut v = vocab(&["a", "b"], &[1, 1]);
        let mut notes = vec![];
        let ids = SpecialIds {
            bos: Some(2),
            ..Default::default()
        };
        assert!(matches!(
            Specials::resolve(&mut v, &ids, no_defaults(), &mut notes),
            Err(TokenizerError::TokenIdOutOfRange {
                id: 2,
                n_vocab: 2,
                ..
            })
        ));
        let ids = SpecialIds {
            pad: Some(7),
            ..Default::default()
        };
        let s = Specials::resolve(&mut v, &ids, no_defaults(), &mut notes).unwrap();
        assert_eq!(s.pad, None);
        assert_eq!(notes.len(), 1);
        // Defaults outside the vocabulary are silently unavailable.
        let d = Defaults {
            bos: Some(1),
            eos: Some(5),
            unk: Some(0),
        };
        let s = Specials::resolve(&mut v, &SpecialIds::default(), d, &mut notes).unwrap();
        assert_eq!((s.bos, s.eos, s.unk), (Some(1), None, Some(0)));
    }
}
