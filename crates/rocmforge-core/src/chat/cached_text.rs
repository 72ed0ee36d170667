//! Which part of a re-rendered conversation the KV cache already holds.
//!
//! A chat renders the whole conversation with its template every turn, yet
//! evaluating it all again would cost a full prompt evaluation per turn. So
//! the text whose tokens are in the cache is remembered (each prompt fed,
//! then each generated token's piece), and a new rendering that starts with
//! exactly that text only needs its remainder evaluated: the new user turn
//! and the assistant header, usually after the end-of-turn marker of the
//! last reply, whose token was sampled but never evaluated.
//!
//! When the rendering does not start with the cached text, the cache is
//! started over and the whole rendering evaluated. That happens when a
//! template rewrites history (Qwen3 drops the reasoning of earlier replies,
//! Llama 2 strips the spaces around them), when a reply ended with a token
//! that prints nothing or was cut at a stop string, and after the context
//! filled up.
//!
//! Comparing text rather than tokens is what llama.cpp's chat does too
//! (`common_chat_format_single`): tokenizing the whole rendering again could
//! split the earlier replies into other tokens than the ones generated,
//! which would make nothing reusable. The price is that the remainder is
//! tokenized on its own, so a word straddling the boundary could be split
//! differently than in one pass; templates put a special token there.

use crate::tokenizer::Tokenizer;

/// The text whose tokens are in the KV cache, in order.
#[derive(Debug, Clone, Default)]
pub struct CachedText {
    bytes: Vec<u8>,
}

/// The tokens to evaluate for a new rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feed {
    /// The cache holds a prefix of the rendering: evaluate these after it.
    Append(Vec<u32>),
    /// It does not: clear the cache and evaluate these from position 0.
    Restart(Vec<u32>),
}

impl CachedText {
    pub fn new() -> CachedText {
        CachedText::default()
    }

    /// What to evaluate for `rendered`, the whole conversation rendered by
    /// its template, and records it as cached (call
    /// [`Self::clear`] if the evaluation then fails).
    pub fn feed(&mut self, tok: &Tokenizer, rendered: &str) -> Feed {
        self.feed_with_plain(tok, rendered, &[])
    }

    /// As [`Self::feed`], with control tokens kept as text inside the byte
    /// ranges `plain` of `rendered` (the messages' contents:
    /// [`super::content_spans`]).
    pub fn feed_with_plain(
        &mut self,
        tok: &Tokenizer,
        rendered: &str,
        plain: &[std::ops::Range<usize>],
    ) -> Feed {
        let cut = self.bytes.len();
        let rest = match self.bytes.is_empty() {
            true => None,
            false => rendered.as_bytes().strip_prefix(self.bytes.as_slice()),
        };
        // A cut inside a character (the cache ended on a byte token) is no
        // place to start tokenizing; nor is an empty remainder, since a
        // step needs at least one token.
        let append = rest
            .and_then(|r| std::str::from_utf8(r).ok())
            .map(|r| {
                // The ranges as offsets into the remainder.
                let shifted: Vec<_> = plain
                    .iter()
                    .filter(|p| p.end > cut)
                    .map(|p| p.start.max(cut) - cut..p.end - cut)
                    .collect();
                tok.encode_with_plain(r, false, &shifted)
            })
            .filter(|t| !t.is_empty());
        self.bytes.clear();
        self.bytes.extend_from_slice(rendered.as_bytes());
        match append {
            Some(tokens) => Feed::Append(tokens),
            None => Feed::Restart(prompt_tokens_with_plain(tok, rendered, plain)),
        }
    }

    /// Records a generated token that was evaluated.
    pub fn push_token(&mut self, tok: &Tokenizer, id: u32) {
        self.bytes.extend_from_slice(&tok.token_to_piece(id));
    }

    /// Forgets everything: the cache was reset.
    pub fn clear(&mut self) {
        self.bytes.clear();
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// The tokens of a whole rendering. Templates write the BOS token's text
/// themselves (`{{ bos_token }}`), and it becomes the BOS id as a special
/// token; the tokenizer adds one only when the text does not start with it,
/// so a prompt never begins with two (llama.cpp strips the text instead,
/// with the same result).
pub fn prompt_tokens(tok: &Tokenizer, rendered: &str) -> Vec<u32> {
    prompt_tokens_with_plain(tok, rendered, &[])
}

/// As [`prompt_tokens`], with control tokens kept as text inside the byte
/// ranges `plain` (the messages' contents: [`super::content_spans`]).
pub fn prompt_tokens_with_plain(
    tok: &Tokenizer,
    rendered: &str,
    plain: &[std::ops::Range<usize>],
) -> Vec<u32> {
    let bos_text = tok.bos().and_then(|id| tok.token_text(id));
    let has_bos = bos_text.is_some_and(|b| !b.is_empty() && rendered.starts_with(b));
    tok.encode_with_plain(rendered, tok.add_bos_default() && !has_bos, plain)
}
