//! SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`), as llama.cpp
//! runs it: no merge list, instead every adjacent pair whose concatenation is a
//! vocabulary token is a candidate and the highest-scoring candidate merges
//! first (ties: leftmost). Characters that end up in no token are spelled as
//! `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

/// The SentencePiece word-boundary marker, U+2581, that stands for a space.
pub(crate) const SPACE_MARK: char = '\u{2581}';

const NONE: usize = usize::MAX;

#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

#[derive(Debug)]
struct Candidate {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap: higher score first, then the smaller left index.
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

/// Where to send a byte that no token covers: its `<0xXX>` token, else a
/// one-character token of that byte, else the unknown token.
pub(crate) fn byte_fallback_table(vocab: &Vocab, unk: Option<u32>) -> [Option<u32>; 256] {
    let mut table = [None; 256];
    for (b, slot) in table.iter_mut().enumerate() {
        let hex = format!("<0x{b:02X}>");
        let raw = if b < 0x80 {
            vocab.id(&(b as u8 as char).to_string())
        } else {
            None
        };
        *slot = vocab.id(&hex).or(raw).or(unk);
    }
    table
}

/// Encodes `text`, whose spaces the caller has already replaced by
/// [`SPACE_MARK`], appending ids to `out`.
pub(crate) fn encode(vocab: &Vocab, bytes: &[Option<u32>; 256], text: &str, out: &mut Vec<u32>) {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        let len = c.len_utf8();
        symbols.push(Symbol {
            start,
            len,
            prev: if i == 0 { NONE } else { i - 1 },
            next: if start + len == text.len() {
                NONE
            } else {
                i + 1
            },
        });
    }

    let mut queue = BinaryHeap::new();
    let try_add =
        |queue: &mut BinaryHeap<Candidate>, symbols: &[Symbol], left: usize, right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let (l, r) = (symbols[left], symbols[right]);
            let joined = &text[l.start..r.start + r.len];
            if let Some(id) = vocab.id(joined) {
                queue.push(Candidate {
                    score: vocab.score(id),
                    left,
                    right,
                    len: joined.len(),
                });
            }
        };
    for i in 1..symbols.len() {
        try_add(&mut queue, &symbols, i - 1, i);
    }

    while let Some(c) = queue.pop() {
        let (l, r) = (symbols[c.left], symbols[c.right]);
        // A candidate is stale once either side has merged with something else;
        // symbols only grow, so an unchanged total length proves it is current.
        if l.len == 0 || r.len == 0 || l.len + r.len != c.len {
            continue;
        }
        symbols[c.left].len += r.len;
        symbols[c.left].next = r.next;
        symbols[c.right].len = 0;
        if r.next != NONE {
            symbols[r.next].prev = c.left;
        }
        try_add(&mut queue, &symbols, l.prev, c.left);
        try_add(&mut queue, &symbols, c.left, r.next);
    }

    let mut i = if symbols.is_empty() { NONE } else { 0 };
    while i != NONE {
        let s = symbols[i];
        let piece = &text[s.start..s.start + s.len];
        // Every merged symbol is a token by construction; only single
        // characters can be missing from the vocabulary.
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(|b| bytes[usize::from(b)])),
        }
        i = s.next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[(&str, f32)]) -> Vocab {
        let texts = tokens.iter().map(|(t, _)| t.to_string()).collect();
        let scores = tokens.iter().map(|(_, s)| *s).collect();
        Vocab::build(texts, Some(scores), None).unwrap().0
    }

    fn run(v: &Vocab, text: &str) -> Vec<u32> {
        let table = byte_fallback_table(v, Some(0));
        let mut out = vec![];
        encode(v, &table, text, &mut out);
        out
    }

    #[test]
    fn highest_score_merges_first() {
        // "abc": "ab" (-1) vs "bc" (-0.5): bc wins, then a+bc has no token.
        let v = vocab(&[
            ("<unk>", 0.0),
            ("a", -5.0),
            ("b", -5.0),
            ("c", -5.0),
            ("ab", -1.0),
            ("bc", -0.5),
        ]);
        assert_eq!(run(&v, "abc"), [1, 5]);
        // With "abc" in the vocabulary the chain continues.
        let v = vocab(&[
            ("<unk>", 0.0),
            ("a", -5.0),
            ("b", -5.0),
            ("c", -5.0),
            ("ab", -1.0),
            ("bc", -0.5),
            ("abc", -3.0),
        ]);
        assert_eq!(run(&v, "abc"), [6]);
    }

    #[test]
    fn ties_go_left() {
        let v = vocab(&[("<unk>", 0.0), ("a", -5.0), ("aa", -1.0)]);
        assert_eq!(run(&v, "aaa"), [2, 1]);
    }

    #[test]
    fn unknown_characters_fall_back_to_bytes() {
        let mut tokens = vec![("<unk>".to_string(), 0.0), ("a".to_string(), -1.0)];
        for b in 0..=255u32 {
            tokens.push((format!("<0x{b:02X}>"), 0.0));
        }
        let refs: Vec<(&str, f32)> = tokens.iter().map(|(t, s)| (t.as_str(), *s)).collect();
        let v = vocab(&refs);
        // 'é' is C3 A9; ids of <0xXX> are 2 + byte.
        assert_eq!(run(&v, "aé"), [1, 2 + 0xC3, 2 + 0xA9]);
        // Without byte tokens the unknown token stands in for each byte.
        let v = vocab(&[("<unk>", 0.0), ("a", -1.0)]);
        assert_eq!(run(&v, "éa"), [0, 0, 1]);
    }
}
