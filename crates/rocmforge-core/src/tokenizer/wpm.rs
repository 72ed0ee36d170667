//! WordPiece (`tokenizer.ggml.model = "bert"`), as llama.cpp runs it: BERT's
//! normalizer (lowercase, strip accents, drop controls), words cut at
//! whitespace with punctuation and CJK ideographs as words of their own, then
//! each word, prefixed with U+2581, is covered greedily by the longest
//! vocabulary tokens from the left. A word that cannot be covered becomes the
//! unknown token.
//!
//! GGUF BERT vocabularies spell word-initial pieces with a leading U+2581 and
//! continuation pieces bare (converted from WordPiece's `##` prefix).

use super::nfd_table::NFD_BASE;
use super::spm::SPACE_MARK;
use super::unicode::{self, Category};
use super::vocab::Vocab;

#[derive(Debug, Clone)]
pub(crate) struct Wpm {
    /// Longest token text in bytes: no match can be longer.
    max_token_len: usize,
    unk: Option<u32>,
    lowercase: bool,
    strip_accents: bool,
}

impl Wpm {
    pub(crate) fn new(
        vocab: &Vocab,
        unk: Option<u32>,
        lowercase: bool,
        strip_accents: bool,
    ) -> Wpm {
        let max_token_len = vocab.texts().map(|(_, t)| t.len()).max().unwrap_or(0);
        Wpm {
            max_token_len,
            unk,
            lowercase,
            strip_accents,
        }
    }

    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut word = String::new();
        for w in self.words(text) {
            word.clear();
            word.push(SPACE_MARK);
            word.push_str(&w);
            let before = out.len();
            let mut i = 0;
            while i < word.len() {
                let longest = (i + 1..=word.len().min(i + self.max_token_len))
                    .rev()
                    .filter(|&j| word.is_char_boundary(j))
                    .find_map(|j| vocab.id(&word[i..j]).map(|id| (id, j)));
                match longest {
                    Some((id, j)) => {
                        out.push(id);
                        i = j;
                    }
                    None => {
                        out.truncate(before);
                        break;
                    }
                }
            }
            if out.len() == before {
                out.extend(self.unk);
            }
        }
    }

    /// BERT's basic tokenizer: normalized words, in order.
    fn words(&self, text: &str) -> Vec<String> {
        let mut words = vec![String::new()];
        for c in text.chars() {
            let c = if self.strip_accents { nfd_base(c) } else { c };
            if c.is_whitespace() {
                if !words.last().is_some_and(String::is_empty) {
                    words.push(String::new());
                }
                continue;
            }
            let cat = unicode::category(c);
            if c == '\0' || c == '\u{FFFD}' || cat == Category::Control {
                continue;
            }
            if self.strip_accents && cat == Category::Mark {
                continue;
            }
            let c = if self.lowercase {
                unicode::to_lower(c)
            } else {
                c
            };
            let alone = cat == Category::Punctuation
                || (c.is_ascii() && cat == Category::Symbol)
                || is_cjk_ideograph(c);
            if alone {
                if !words.last().is_some_and(String::is_empty) {
                    words.push(String::new());
                }
                if let Some(last) = words.last_mut() {
                    last.push(c);
                }
                words.push(String::new());
            } else if let Some(last) = words.last_mut() {
                last.push(c);
            }
        }
        if words.last().is_some_and(String::is_empty) {
            words.pop();
        }
        words
    }
}

/// The first code point of `c`'s canonical decomposition.
fn nfd_base(c: char) -> char {
    let cp = u32::from(c);
    let i = NFD_BASE.partition_point(|r| r.0 <= cp);
    match i.checked_sub(1).map(|i| NFD_BASE[i]) {
        Some((_, last, base)) if cp <= last => char::from_u32(base).unwrap_or(c),
        _ => c,
    }
}

/// BERT's "Chinese character" blocks (CJK ideographs; not kana or hangul).
/// The extension range starting at U+2B920 follows Hugging Face's code, which
/// llama.cpp copies, rather than the Unicode block (U+2B820).
fn is_cjk_ideograph(c: char) -> bool {
    matches!(u32::from(c),
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wpm(tokens: &[&str]) -> (Wpm, Vocab) {
        let v = Vocab::build(tokens.iter().map(|s| s.to_string()).collect(), None, None)
            .unwrap()
            .0;
        (Wpm::new(&v, Some(0), true, true), v)
    }

    #[test]
    fn normalizes_and_splits() {
        let (w, _) = wpm(&["[UNK]"]);
        assert_eq!(
            w.words("Äpfel,  NAÏVE\tx我想\u{200B}y"),
            ["apfel", ",", "naive", "x", "我", "想", "y"]
        );
    }

    #[test]
    fn greedy_longest_match() {
        let (w, v) = wpm(&["[UNK]", "▁un", "▁una", "ffable", "ble", "ff", "a", "▁x"]);
        let mut out = vec![];
        w.encode(&v, "unaffable x zz", &mut out);
        // ▁una|ffable, ▁x, and zz has no cover.
        assert_eq!(out, [2, 3, 7, 0]);
    }
}
