//! Pre-tokenizers for BPE: the steps that cut text into words before merges
//! run, chosen by `tokenizer.ggml.pre`.
//!
//! As in llama.cpp, a pre-tokenizer is a list of steps applied one after the
//! other: each one splits every piece the previous one produced, and text
//! between matches stays as a piece of its own, so nothing is ever dropped.
//!
//! - `names`: every `tokenizer.ggml.pre` name llama.cpp accepts → its
//!   pre-tokenizer type and vocabulary flags.
//! - `patterns`: each type's steps, llama.cpp's regexes as data.
//! - `collapse`: runs those regexes with `std::regex`'s semantics as llama.cpp
//!   feeds it (category stand-ins), which is where a plain Unicode regex would
//!   split differently.
//! - `custom`: the two splitters llama.cpp hand-writes.
//!
//! llama.cpp also hand-writes fast paths for its most common patterns (gpt-2,
//! llama3, qwen2, qwen35); they split exactly as the regexes do, so here those
//! patterns run through the regex engine like every other.

mod collapse;
mod custom;
mod names;
mod patterns;

use fancy_regex::Regex;

pub(crate) use names::PreType;
pub(crate) use names::{all_names, lookup, missing};
use patterns::Pattern;

#[derive(Debug, Clone)]
enum Step {
    Regex { re: Regex, collapse: bool },
    KimiK2,
    DigitGroups,
}

/// Compiled steps of one pre-tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct PreTokenizer {
    steps: Vec<Step>,
}

impl PreTokenizer {
    /// Compiles the type's patterns; the error is the regex engine's message.
    pub(crate) fn new(kind: PreType) -> Result<Self, String> {
        let steps = patterns::patterns(kind)
            .iter()
            .map(|p| match *p {
                Pattern::KimiK2 => Ok(Step::KimiK2),
                Pattern::DigitGroups => Ok(Step::DigitGroups),
                Pattern::Regex(p) => {
                    let collapse = collapse::uses_categories(p);
                    fancy_regex::RegexBuilder::new(&collapse::translate(p, collapse))
                        // Generous: the lookahead patterns backtrack at most
                        // once per whitespace run, so hitting this means
                        // hostile input.
                        .backtrack_limit(10_000_000)
                        .build()
                        .map(|re| Step::Regex { re, collapse })
                        .map_err(|e| format!("{p:?}: {e}"))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(PreTokenizer { steps })
    }

    /// Cuts `text` into words (as byte ranges of `text`, in order, covering it).
    pub(crate) fn split(&self, text: &str) -> Vec<(usize, usize)> {
        let mut pieces = if text.is_empty() {
            Vec::new()
        } else {
            vec![(0, text.len())]
        };
        // The texts the regexes see, built when first needed.
        let mut stand_ins: [Option<String>; 2] = [None, None];
        let mut next = Vec::new();
        for step in &self.steps {
            next.clear();
            for &(start, end) in &pieces {
                match step {
                    Step::Regex { re, collapse } => {
                        let seen = stand_ins[usize::from(*collapse)]
                            .get_or_insert_with(|| collapse::stand_in_text(text, *collapse));
                        split_one(re, seen, start, end, &mut next);
                    }
                    Step::KimiK2 => custom::kimi_k2(&text[start..end], start, &mut next),
                    Step::DigitGroups => custom::digit_groups(&text[start..end], start, &mut next),
                }
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        pieces
    }
}

fn split_one(re: &Regex, text: &str, start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    let piece = &text[start..end];
    let mut done = 0;
    for m in re.find_iter(piece) {
        let Ok(m) = m else {
            // Backtrack limit hit: keep the rest as one piece rather than fail.
            break;
        };
        if m.start() > done {
            out.push((start + done, start + m.start()));
        }
        if m.end() > m.start() {
            out.push((start + m.start(), start + m.end()));
        }
        done = m.end();
    }
    if done < piece.len() {
        out.push((start + done, end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(name: &str, text: &str) -> Vec<String> {
        let pt = PreTokenizer::new(lookup(name).unwrap().kind).unwrap();
        pt.split(text)
            .into_iter()
            .map(|(a, b)| text[a..b].to_string())
            .collect()
    }

    #[test]
    fn every_name_compiles() {
        for name in all_names() {
            PreTokenizer::new(lookup(name).unwrap().kind).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn gpt2_splits_like_openai() {
        assert_eq!(
            words("gpt-2", "Hello world's  end 123!!\n"),
            ["Hello", " world", "'s", " ", " end", " 123", "!!", "\n"]
        );
    }

    #[test]
    fn qwen2_splits_digits_singly_and_keeps_newlines() {
        assert_eq!(
            words("qwen2", "ab 123\n\n  x"),
            ["ab", " ", "1", "2", "3", "\n\n", " ", " x"]
        );
    }

    #[test]
    fn llama3_groups_three_digits_and_case_insensitive_contractions() {
        assert_eq!(words("llama3", "12345 I'M"), ["123", "45", " I", "'M"]);
    }

    #[test]
    fn unicode_letters_and_marks() {
        // Combining marks are neither letters nor numbers, so they split words,
        // except for qwen35, whose words take marks.
        assert_eq!(words("gpt-2", " Äpfel"), [" Äpfel"]);
        assert_eq!(words("gpt-2", "e\u{301}x"), ["e", "\u{301}", "x"]);
        assert_eq!(words("qwen35", "e\u{301}x"), ["e\u{301}x"]);
    }

    #[test]
    fn categories_collapse_as_in_llama_cpp() {
        // `\p{Lu}` stands for every letter once collapsed, so tiny_aya's
        // case split does not split non-ASCII words at case changes...
        assert_eq!(words("tiny_aya", "ÄpfelÄpfel"), ["ÄpfelÄpfel"]);
        // ...and the ideographic space in deepseek-llm's punctuation class
        // never matches, because the text's one became a whitespace stand-in.
        assert_eq!(words("deepseek-llm", "!\u{3000}"), ["!", "\u{3000}"]);
    }

    #[test]
    fn pieces_cover_the_text() {
        let text = "  \t mixed ½ ١٢٣ text,, with \u{3000}odd\r\nspaces 我想 🦙 ";
        for name in all_names() {
            let joined: String = words(name, text).concat();
            assert_eq!(joined, text, "{name}");
        }
    }
}
