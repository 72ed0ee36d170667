//! The token table: text, score and attributes per id, plus text → id lookup.

use std::collections::HashMap;

use super::error::TokenizerError;

/// Token attributes as a bit set, like llama.cpp's `llama_token_attr`: the GGUF
/// token type gives one bit, and load-time fix-ups may add `CONTROL` to tokens
/// that are control tokens in all but their declared type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Attr(u8);

impl Attr {
    pub(crate) const UNDEFINED: Attr = Attr(0);
    pub(crate) const UNKNOWN: Attr = Attr(1);
    pub(crate) const UNUSED: Attr = Attr(1 << 1);
    pub(crate) const NORMAL: Attr = Attr(1 << 2);
    pub(crate) const CONTROL: Attr = Attr(1 << 3);
    pub(crate) const USER_DEFINED: Attr = Attr(1 << 4);
    pub(crate) const BYTE: Attr = Attr(1 << 5);

    /// The attribute of a ggml token type id; unknown ids are undefined, which
    /// renders as nothing and is never matched as a special token.
    pub(crate) fn from_token_type(t: i32) -> Attr {
        match t {
            1 => Attr::NORMAL,
            2 => Attr::UNKNOWN,
            3 => Attr::CONTROL,
            4 => Attr::USER_DEFINED,
            5 => Attr::UNUSED,
            6 => Attr::BYTE,
            _ => Attr::UNDEFINED,
        }
    }

    pub(crate) fn any(self, other: Attr) -> bool {
        self.0 & other.0 != 0
    }

    pub(crate) fn union(self, other: Attr) -> Attr {
        Attr(self.0 | other.0)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Vocab {
    texts: Vec<String>,
    scores: Vec<f32>,
    attrs: Vec<Attr>,
    to_id: HashMap<String, u32>,
}

impl Vocab {
    /// Checks and indexes the token list. Returns notes on tolerated oddities.
    pub(crate) fn build(
        tokens: Vec<String>,
        scores: Option<Vec<f32>>,
        token_types: Option<Vec<i32>>,
    ) -> Result<(Vocab, Vec<String>), TokenizerError> {
        let n = tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        // Ids must fit u32 and leave room for "no token" sentinels elsewhere.
        if n >= u32::MAX as usize {
            return Err(TokenizerError::VocabTooLarge(n));
        }
        let check_len = |key: &'static str, found: usize| {
            if found == n {
                Ok(())
            } else {
                Err(TokenizerError::LengthMismatch {
                    key,
                    expected: n,
                    found,
                })
            }
        };
        if let Some(s) = &scores {
            check_len("tokenizer.ggml.scores", s.len())?;
        }
        if let Some(t) = &token_types {
            check_len("tokenizer.ggml.token_type", t.len())?;
        }

        let mut notes = Vec::new();
        let mut texts = tokens;
        let mut to_id = HashMap::with_capacity(n);
        for (i, text) in texts.iter_mut().enumerate() {
            let id = i as u32;
            if text.is_empty() {
                // An empty token could never be produced by encoding; give it a
                // unique placeholder name, as llama.cpp does, so lookups stay 1:1.
                *text = format!("[EMPTY_{i}]");
                notes.push(format!("token {i} is empty; renamed {text}"));
            }
            if let Some(first) = to_id.insert(text.clone(), id) {
                return Err(TokenizerError::DuplicateToken {
                    text: text.clone(),
                    first,
                    second: id,
                });
            }
        }
        let scores = scores.unwrap_or_else(|| vec![0.0; n]);
        let attrs = match token_types {
            Some(types) => types.into_iter().map(Attr::from_token_type).collect(),
            None => vec![Attr::NORMAL; n],
        };
        Ok((
            Vocab {
                texts,
                scores,
                attrs,
                to_id,
            },
            notes,
        ))
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    pub(crate) fn id(&self, text: &str) -> Option<u32> {
        self.to_id.get(text).copied()
    }

    pub(crate) fn text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }

    /// Callers pass ids that came out of this vocabulary.
    pub(crate) fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }

    pub(crate) fn attr(&self, id: u32) -> Attr {
        self.attrs
            .get(id as usize)
            .copied()
            .unwrap_or(Attr::UNDEFINED)
    }

    pub(crate) fn set_attr(&mut self, id: u32, attr: Attr) {
        if let Some(a) = self.attrs.get_mut(id as usize) {
            *a = attr;
        }
    }

    pub(crate) fn add_attr(&mut self, id: u32, attr: Attr) {
        if let Some(a) = self.attrs.get_mut(id as usize) {
            *a = a.union(attr);
        }
    }

    pub(crate) fn texts(&self) -> impl Iterator<Item = (u32, &str)> {
        self.texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u32, t.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn builds_and_looks_up() {
        let (v, notes) =
            Vocab::build(strings(&["a", "", "bc"]), None, Some(vec![1, 3, 9])).unwrap();
        assert_eq!(v.id("bc"), Some(2));
        assert_eq!(v.text(1), Some("[EMPTY_1]"));
        assert_eq!(notes.len(), 1);
        assert_eq!(v.attr(1), Attr::CONTROL);
        assert_eq!(v.attr(2), Attr::UNDEFINED);
        assert_eq!(v.attr(99), Attr::UNDEFINED);
        assert_eq!(v.text(3), None);
    }

    #[test]
    fn rejects_bad_tables() {
        assert!(matches!(
            Vocab::build(vec![], None, None),
            Err(TokenizerError::EmptyVocab)
        ));
        assert!(matches!(
            Vocab::build(strings(&["a", "b"]), Some(vec![0.0]), None),
            Err(TokenizerError::LengthMismatch {
                found: 1,
                expected: 2,
                ..
            })
        ));
        assert!(matches!(
            Vocab::build(strings(&["a", "b"]), None, Some(vec![1, 1, 1])),
            Err(TokenizerError::LengthMismatch { found: 3, .. })
        ));
        assert!(matches!(
            Vocab::build(strings(&["a", "b", "a"]), None, None),
            Err(TokenizerError::DuplicateToken {
                first: 0,
                second: 2,
                ..
            })
        ));
    }
}
