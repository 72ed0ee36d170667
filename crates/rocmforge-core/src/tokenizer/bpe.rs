//! BPE with merge rules (`tokenizer.ggml.model = "gpt2"`, `"gemma4"`): the
//! pre-tokenizer cuts text into words, each word's bytes become GPT-2 byte
//! characters (byte-level vocabularies) or stay UTF-8 (SPM-style ones such as
//! Gemma 4's), and merge rules apply in rank order (lowest rank first, ties
//! leftmost) within a word.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::byte_level::ByteLevel;
use super::error::TokenizerError;
use super::pretokenize::PreTokenizer;
use super::vocab::Vocab;

const NONE: usize = usize::MAX;

/// Merge ranks keyed by the rule text `"left right"`. Byte-level symbols never
/// contain a space (0x20 is written `Ġ`), so that key is unambiguous and a
/// lookup needs one reusable buffer instead of a pair of owned strings.
#[derive(Debug, Clone, Default)]
pub(crate) struct MergeRanks(HashMap<String, u32>);

impl MergeRanks {
    pub(crate) fn build(merges: Vec<String>) -> Result<Self, TokenizerError> {
        let mut ranks = HashMap::with_capacity(merges.len());
        for (index, line) in merges.into_iter().enumerate() {
            // llama.cpp looks for the separator from the second byte on, so a
            // rule may start with a space-like first part but needs a second.
            if !line
                .as_bytes()
                .get(1..)
                .is_some_and(|rest| rest.contains(&b' '))
            {
                return Err(TokenizerError::BadMerge { index, line });
            }
            // A rule listed twice keeps its first (better) rank.
            ranks.entry(line).or_insert(index as u32);
        }
        Ok(MergeRanks(ranks))
    }

    fn rank(&self, key: &mut String, left: &str, right: &str) -> Option<u32> {
        key.clear();
        key.push_str(left);
        key.push(' ');
        key.push_str(right);
        self.0.get(key.as_str()).copied()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Bpe {
    pub(crate) ranks: MergeRanks,
    pub(crate) pre: PreTokenizer,
    pub(crate) bytes: ByteLevel,
    /// Look a whole word up before merging (llama3 family).
    pub(crate) ignore_merges: bool,
    /// Map bytes to GPT-2's byte characters. Without it, words stay UTF-8 and
    /// bytes no token covers become `<0xXX>` tokens.
    pub(crate) byte_encode: bool,
    /// Take a word of only newlines whole when the vocabulary has it (Gemma 4:
    /// its merges cannot build long newline runs that are tokens).
    pub(crate) newline_runs_whole: bool,
    /// Spaces become U+2581 before pre-tokenizing (SPM-style vocabularies).
    pub(crate) escape_whitespace: bool,
}

#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

#[derive(Debug, PartialEq, Eq)]
struct Candidate {
    rank: u32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap turned min-heap on (rank, left).
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Bpe {
    /// Encodes raw (not byte-level) text, appending ids to `out`.
    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        if self.escape_whitespace {
            let escaped = text.replace(' ', "\u{2581}");
            self.encode_words(vocab, &escaped, out);
        } else {
            self.encode_words(vocab, text, out);
        }
    }

    fn encode_words(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut word = String::new();
        let mut key = String::new();
        let mut symbols = Vec::new();
        let mut queue = BinaryHeap::new();
        for (start, end) in self.pre.split(text) {
            word.clear();
            if self.byte_encode {
                self.bytes.encode_into(&text[start..end], &mut word);
            } else {
                word.push_str(&text[start..end]);
            }
            let whole =
                self.ignore_merges || (self.newline_runs_whole && word.bytes().all(|b| b == b'\n'));
            if whole {
                if let Some(id) = vocab.id(&word) {
                    out.push(id);
                    continue;
                }
            }
            self.merge_word(&word, &mut key, &mut symbols, &mut queue);
            let mut i = if symbols.is_empty() { NONE } else { 0 };
            while i != NONE {
                let s: Symbol = symbols[i];
                let piece = &word[s.start..s.start + s.len];
                match vocab.id(piece) {
                    Some(id) => out.push(id),
                    // Only possible when a merge result or a character is
                    // missing from the vocabulary: spell it per byte, skipping
                    // bytes the vocabulary lacks, as llama.cpp does.
                    None if self.byte_encode => {
                        let mut buf = [0u8; 4];
                        out.extend(
                            piece
                                .chars()
                                .filter_map(|c| vocab.id(c.encode_utf8(&mut buf))),
                        );
                    }
                    None => out.extend(
                        piece
                            .bytes()
                            .filter_map(|b| vocab.id(&format!("<0x{b:02X}>"))),
                    ),
                }
                i = s.next;
            }
        }
    }

    /// Runs the merges over one byte-level word, leaving the surviving symbols
    /// linked from index 0 in `symbols`.
    fn merge_word(
        &self,
        word: &str,
        key: &mut String,
        symbols: &mut Vec<Symbol>,
        queue: &mut BinaryHeap<Candidate>,
    ) {
        symbols.clear();
        queue.clear();
        for (i, (start, c)) in word.char_indices().enumerate() {
            let len = c.len_utf8();
            symbols.push(Symbol {
                start,
                len,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if start + len == word.len() {
                    NONE
                } else {
                    i + 1
                },
            });
        }
        let try_add = |queue: &mut BinaryHeap<Candidate>,
                       symbols: &[Symbol],
                       key: &mut String,
                       left: usize,
                       right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let (l, r) = (symbols[left], symbols[right]);
            let ls = &word[l.start..l.start + l.len];
            let rs = &word[r.start..r.start + r.len];
            if let Some(rank) = self.ranks.rank(key, ls, rs) {
                queue.push(Candidate {
                    rank,
                    left,
                    right,
                    len: l.len + r.len,
                });
            }
        };
        for i in 1..symbols.len() {
            try_add(queue, symbols, key, i - 1, i);
        }
        while let Some(c) = queue.pop() {
            let (l, r) = (symbols[c.left], symbols[c.right]);
            // Stale once either side changed; symbols only grow.
            if l.len == 0 || r.len == 0 || l.len + r.len != c.len {
                continue;
            }
            symbols[c.left].len += r.len;
            symbols[c.left].next = r.next;
            symbols[c.right].len = 0;
            if r.next != NONE {
                symbols[r.next].prev = c.left;
            }
            try_add(queue, symbols, key, l.prev, c.left);
            try_add(queue, symbols, key, c.left, r.next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pretokenize::PreType;
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn bpe(merges: &[&str], ignore_merges: bool) -> Bpe {
        Bpe {
            ranks: MergeRanks::build(strings(merges)).unwrap(),
            pre: PreTokenizer::new(PreType::Gpt2).unwrap(),
            bytes: ByteLevel::new(),
            ignore_merges,
            byte_encode: true,
            newline_runs_whole: false,
            escape_whitespace: false,
        }
    }

    #[test]
    fn merges_in_rank_order() {
        let v = Vocab::build(
            strings(&["a", "b", "c", "Ġ", "ab", "bc", "Ġa", "Ġab"]),
            None,
            None,
        )
        .unwrap()
        .0;
        // "bc" outranks "ab": a|bc.
        assert_eq!(encode(&bpe(&["b c", "a b"], false), &v, "abc"), [0, 5]);
        // "ab" outranks "bc": ab|c.
        assert_eq!(encode(&bpe(&["a b", "b c"], false), &v, "abc"), [4, 2]);
        // The pre-tokenizer keeps the space with the word.
        assert_eq!(encode(&bpe(&["Ġ a", "Ġa b"], false), &v, "a ab"), [0, 7]);
    }

    #[test]
    fn ignore_merges_takes_whole_words() {
        let v = Vocab::build(strings(&["a", "b", "c", "abc"]), None, None)
            .unwrap()
            .0;
        assert_eq!(encode(&bpe(&[], false), &v, "abc"), [0, 1, 2]);
        assert_eq!(encode(&bpe(&[], true), &v, "abc"), [3]);
    }

    #[test]
    fn bad_merge_lines() {
        assert!(matches!(
            MergeRanks::build(strings(&["a b", "ab"])),
            Err(TokenizerError::BadMerge { index: 1, .. })
        ));
        assert!(MergeRanks::build(strings(&[" x"])).is_err());
        assert!(MergeRanks::build(strings(&[""])).is_err());
        let r = MergeRanks::build(strings(&["a b", "a b"])).unwrap();
        assert_eq!(r.rank(&mut String::new(), "a", "b"), Some(0));
    }

    fn encode(b: &Bpe, v: &Vocab, text: &str) -> Vec<u32> {
        let mut out = vec![];
        b.encode(v, text, &mut out);
        out
    }
}
