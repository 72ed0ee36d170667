//! Constrained decoding: the tokens a JSON schema or a grammar allows next,
//! as a mask over the logits, from the `llguidance` crate.
//!
//! llguidance walks a trie of the vocabulary's byte strings against an
//! Earley parser of the grammar and its lexer, so a mask over a
//! 150k-token vocabulary takes about a millisecond; writing our own would
//! mean a JSON-schema compiler, a lexer and that trie, for the same result.
//! [`Grammars`] builds the trie once per tokenizer; each request gets a
//! [`Constraint`] of its own, which masks the logits before sampling and
//! takes each sampled token.
//!
//! Control tokens take part as llguidance's special tokens (their text
//! after its marker byte), so a grammar never spells them out of pieces,
//! and the end-of-generation tokens are its end: a grammar that is
//! complete allows only them.

pub mod gbnf;

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

use crate::tokenizer::Tokenizer;

#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The schema or grammar a request gave cannot be compiled; the text
    /// is llguidance's reason, its first line ([`GrammarError::invalid`]).
    #[error("{0}")]
    Invalid(String),
    /// The tokenizer cannot be described to llguidance (no end token).
    #[error("constrained decoding needs an end-of-generation token, and this vocabulary has none")]
    NoEndToken,
    /// The parser failed mid-way (a token it did not allow, a limit).
    #[error("constrained decoding failed: {0}")]
    Failed(String),
}

impl GrammarError {
    /// [`GrammarError::Invalid`] of llguidance's reason, which can run over
    /// lines: the first says what is wrong, and a caller's error is one
    /// line.
    pub fn invalid(reason: impl std::fmt::Display) -> GrammarError {
        let reason = reason.to_string();
        GrammarError::Invalid(reason.lines().next().unwrap_or("").to_string())
    }
}

/// llguidance's JSON options for OpenAI's layout (`", "` and `": "`, no
/// other whitespace: left free, a sampler can pad a reply with whitespace
/// for ever), as a schema's `x-guidance`.
pub fn openai_json_layout() -> serde_json::Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
    })
}

/// The vocabulary as llguidance sees it, built once per tokenizer.
pub struct Grammars {
    factory: Arc<ParserFactory>,
}

/// What llguidance asks of a tokenizer: its trie, and tokenizing text
/// (for grammars' literal strings).
struct Env {
    trie: TokTrie,
    tok: Tokenizer,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.tok
            .encode(&String::from_utf8_lossy(s), false, false)
            .into_iter()
            .map(|t| t as TokenId)
            .collect()
    }
}

impl Grammars {
    pub fn new(tok: &Tokenizer) -> Result<Grammars, GrammarError> {
        let n = tok.vocab_size();
        let eog = tok.eog_ids();
        let end = tok
            .eot()
            .or_else(|| tok.eos())
            .or_else(|| eog.first().copied())
            .ok_or(GrammarError::NoEndToken)?;
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                if tok.is_control(id) {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tok.token_text(id).unwrap_or("").as_bytes());
                    w
                } else {
                    tok.token_to_piece(id)
                }
            })
            .collect();
        let mut info = TokRxInfo::new(n as u32, end);
        info.tok_bos = tok.bos();
        info.tok_end_of_turn = tok.eot();
        let ends: Vec<TokenId> = eog.iter().copied().filter(|&t| (t as usize) < n).collect();
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&ends);
        let env: TokEnv = Arc::new(Env {
            trie,
            tok: tok.clone(),
        });
        let mut factory = ParserFactory::new_simple(&env).map_err(GrammarError::invalid)?;
        factory.quiet();
        Ok(Grammars {
            factory: Arc::new(factory),
        })
    }

    /// Replies that are one JSON value matching `schema` (OpenAI's
    /// `response_format: json_schema`), laid out as OpenAI's are
    /// ([`openai_json_layout`]). A schema's own `x-guidance` options
    /// (llguidance's) win.
    pub fn json_schema(&self, schema: &serde_json::Value) -> Result<Constraint, GrammarError> {
        let mut schema = schema.clone();
        let Some(fields) = schema.as_object_mut() else {
            return Err(GrammarError::Invalid(format!(
                "a JSON schema is an object, not {schema}"
            )));
        };
        fields
            .entry("x-guidance")
            .or_insert_with(openai_json_layout);
        self.constraint(TopLevelGrammar::from_json_schema(schema))
    }

    /// Replies that are one JSON object (`response_format: json_object`).
    pub fn json_object(&self) -> Result<Constraint, GrammarError> {
        self.json_schema(&serde_json::json!({"type": "object"}))
    }

    /// Replies in a llama.cpp GBNF grammar (llama-server's `grammar`),
    /// read as llguidance's Lark ([`gbnf::to_lark`]).
    pub fn gbnf(&self, grammar: &str) -> Result<Constraint, GrammarError> {
        let lark = gbnf::to_lark(grammar).map_err(GrammarError::invalid)?;
        self.lark(&lark)
    }

    /// Replies in llguidance's Lark-like grammar syntax.
    pub fn lark(&self, grammar: &str) -> Result<Constraint, GrammarError> {
        self.constraint(TopLevelGrammar::from_lark(grammar.to_string()))
    }

    fn constraint(&self, grammar: TopLevelGrammar) -> Result<Constraint, GrammarError> {
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(GrammarError::invalid)?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::invalid(e));
        }
        Ok(Constraint { matcher })
    }
}

/// One reply's grammar state.
pub struct Constraint {
    matcher: Matcher,
}

impl Constraint {
    /// Sets the logits of the tokens the grammar does not allow next to
    /// negative infinity (once it has ended: all but the end tokens).
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError::Failed(e.to_string()))?;
        for (id, l) in logits.iter_mut().enumerate() {
            if !allowed.is_allowed(id as TokenId) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Takes the sampled token (one the mask allowed). Once the grammar
    /// has ended, the end token the mask left is taken as it is.
    pub fn accept(&mut self, id: u32) -> Result<(), GrammarError> {
        if self.matcher.is_stopped() && !self.matcher.is_error() {
            return Ok(());
        }
        self.matcher
            .consume_token(id as TokenId)
            .map_err(|e| GrammarError::Failed(e.to_string()))
    }

    /// The next token under the grammar: `logits` masked ([`Self::mask`]),
    /// sampled by `sampler`, and the pick accepted ([`Self::accept`]).
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        sampler: &mut crate::sampler::Sampler,
    ) -> Result<u32, GrammarError> {
        self.mask(logits)?;
        let id = sampler.sample(logits);
        self.accept(id)?;
        Ok(id)
    }

    /// Whether the grammar has ended (an end token was taken).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}
