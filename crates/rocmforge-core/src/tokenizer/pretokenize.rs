//! Pre-tokenizers for byte-level BPE: regexes that cut text into words before
//! merges run, chosen by `tokenizer.ggml.pre`.
//!
//! As in llama.cpp, a pre-tokenizer is a list of regexes applied one after the
//! other: each one splits every piece the previous one produced, and text between
//! matches stays as a piece of its own, so nothing is ever dropped.
//!
//! The patterns are the ones llama.cpp uses (its ASCII-only spellings of the
//! case-insensitive contractions included) and run with real Unicode classes.
//! llama.cpp evaluates them either with hand-written splitters (gpt-2, llama3)
//! or with `std::regex` over text whose non-ASCII characters are collapsed to
//! one stand-in per category (letter, number, whitespace, ...); for patterns that
//! only ask about `\p{L}`, `\p{N}` and `\s` both give the same pieces as a Unicode
//! regex, which is why this module does not imitate the collapsing.

use fancy_regex::Regex;

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];

const DEEPSEEK_CODER: &[&str] = &[
    r"[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
    r"\p{N}",
];

const FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"];

const STARCODER: &[&str] = &[r"\p{N}", GPT2];

const CHATGLM4: &str = LLAMA3;

const BLOOM: &str = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+";

/// Pre-tokenizer families: which regexes run and the vocabulary flags that come
/// with them in llama.cpp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizerKind {
    Default,
    Gpt2,
    Llama3,
    Qwen2,
    DeepseekCoder,
    Falcon,
    Starcoder,
    ChatGlm4,
    Bloom,
}

impl PreTokenizerKind {
    /// The family of a `tokenizer.ggml.pre` name, or `None` for names this crate
    /// does not know (callers fall back to [`PreTokenizerKind::Default`]).
    pub fn from_name(name: &str) -> Option<Self> {
        use PreTokenizerKind::*;
        Some(match name {
            "default" => Default,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => Llama3,
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "megrez"
            | "hunyuan" | "solar-open" => Qwen2,
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en"
            | "jina-v2-code" | "roberta-bpe" | "mpt" | "olmo" | "jais" | "trillion"
            | "granite-docling" | "exaone4" => Gpt2,
            "deepseek-coder" => DeepseekCoder,
            "falcon" => Falcon,
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone"
            | "minerva-7b" | "mellum2" => Starcoder,
            "glm4" | "chatglm-bpe" => ChatGlm4,
            "bloom" | "poro-chat" | "gpt3-finnish" => Bloom,
            _ => return None,
        })
    }

    fn patterns(self) -> &'static [&'static str] {
        use PreTokenizerKind::*;
        match self {
            Default => DEFAULT,
            Gpt2 => &[GPT2],
            Llama3 => &[LLAMA3],
            Qwen2 => &[QWEN2],
            DeepseekCoder => DEEPSEEK_CODER,
            Falcon => FALCON,
            Starcoder => STARCODER,
            ChatGlm4 => &[CHATGLM4],
            Bloom => &[BLOOM],
        }
    }

    /// The llama3 family looks a whole word up in the vocabulary before merging
    /// it (`ignore_merges`), because its merges cannot rebuild some tokens.
    pub(crate) fn ignores_merges(self, name: &str) -> bool {
        self == PreTokenizerKind::Llama3 && !matches!(name, "dbrx" | "smaug-bpe")
    }

    /// Families whose files expect BOS unless `add_bos_token` says otherwise.
    pub(crate) fn adds_bos_by_default(self, name: &str) -> bool {
        self.ignores_merges(name)
    }
}

/// Compiled regexes of one pre-tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct PreTokenizer {
    regexes: Vec<Regex>,
}

impl PreTokenizer {
    /// Compiles the family's patterns; the error is the regex engine's message.
    pub(crate) fn new(kind: PreTokenizerKind) -> Result<Self, String> {
        let regexes = kind
            .patterns()
            .iter()
            .map(|p| {
                fancy_regex::RegexBuilder::new(p)
                    // Generous: the lookahead patterns backtrack at most once per
                    // whitespace run, so hitting this means hostile input.
                    .backtrack_limit(10_000_000)
                    .build()
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?;
        Ok(PreTokenizer { regexes })
    }

    /// Cuts `text` into words (as byte ranges of `text`, in order, covering it).
    pub(crate) fn split(&self, text: &str) -> Vec<(usize, usize)> {
        let mut pieces = if text.is_empty() {
            Vec::new()
        } else {
            vec![(0, text.len())]
        };
        let mut next = Vec::new();
        for re in &self.regexes {
            next.clear();
            for &(start, end) in &pieces {
                split_one(re, text, start, end, &mut next);
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

    fn words(kind: PreTokenizerKind, text: &str) -> Vec<String> {
        let pt = PreTokenizer::new(kind).unwrap();
        pt.split(text)
            .into_iter()
            .map(|(a, b)| text[a..b].to_string())
            .collect()
    }

    #[test]
    fn every_family_compiles() {
        use PreTokenizerKind::*;
        for kind in [
            Default,
            Gpt2,
            Llama3,
            Qwen2,
            DeepseekCoder,
            Falcon,
            Starcoder,
            ChatGlm4,
            Bloom,
        ] {
            PreTokenizer::new(kind).unwrap();
        }
    }

    #[test]
    fn gpt2_splits_like_openai() {
        assert_eq!(
            words(PreTokenizerKind::Gpt2, "Hello world's  end 123!!\n"),
            ["Hello", " world", "'s", " ", " end", " 123", "!!", "\n"]
        );
    }

    #[test]
    fn qwen2_splits_digits_singly_and_keeps_newlines() {
        assert_eq!(
            words(PreTokenizerKind::Qwen2, "ab 123\n\n  x"),
            ["ab", " ", "1", "2", "3", "\n\n", " ", " x"]
        );
    }

    #[test]
    fn llama3_groups_three_digits_and_case_insensitive_contractions() {
        assert_eq!(
            words(PreTokenizerKind::Llama3, "12345 I'M"),
            ["123", "45", " I", "'M"]
        );
    }

    #[test]
    fn unicode_letters_and_marks() {
        // Combining marks are neither letters nor numbers, so they split words.
        assert_eq!(words(PreTokenizerKind::Gpt2, " Äpfel"), [" Äpfel"]);
        assert_eq!(
            words(PreTokenizerKind::Gpt2, "e\u{301}x"),
            ["e", "\u{301}", "x"]
        );
    }

    #[test]
    fn pieces_cover_the_text() {
        let text = "  \t mixed ½ ١٢٣ text,, with \u{3000}odd\r\nspaces  ";
        for kind in [PreTokenizerKind::Default, PreTokenizerKind::Qwen2] {
            let joined: String = words(kind, text).concat();
            assert_eq!(joined, text);
        }
    }
}
