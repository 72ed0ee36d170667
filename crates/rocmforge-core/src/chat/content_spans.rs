//! Message content as plain text inside a rendered conversation.
//!
//! A template's rendering is one string: its own turn markers
//! (`<|im_start|>`) and the messages' contents side by side. Tokenizing it
//! with special-token parsing, as llama.cpp does, lets a user who writes a
//! marker's text in a message forge a system or assistant turn. So the
//! contents' byte ranges are found, and control tokens are parsed only
//! outside them ([`Tokenizer::encode_with_plain`]).
//!
//! The ranges come from rendering the conversation once more with each
//! content replaced by a marker of its own (private-use characters around
//! the message's index), then putting the contents back where the markers
//! landed: if that rebuilds the rendering exactly, the template placed the
//! contents verbatim and the ranges are exact. A template that changes a
//! content (trims it, cuts reasoning out of it, branches on it) fails the
//! check; its conversation is refused only if a content holds a control
//! token's text, since otherwise nothing in it could be parsed as one.
//! Conversations without such text skip all this: their tokens are
//! [`super::prompt_tokens`]'s, unchanged.

use std::ops::Range;

use super::cached_text::prompt_tokens_with_plain;
use super::template::{ChatTemplate, Message, RenderOptions};
use crate::tokenizer::Tokenizer;

/// Around a message's index in the marker that stands for its content.
const OPEN: char = '\u{F8F0}';
const CLOSE: char = '\u{F8F1}';

/// A content with a control token's text that could not be kept as text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "message {index} holds the text of a special token, and the chat template does not place \
     message content verbatim, so it cannot be tokenized as plain text"
)]
pub struct ControlTextError {
    /// The message's index in the conversation.
    pub index: usize,
}

/// The byte ranges of `rendered` (`messages` rendered by `template` with
/// `opts`) that are the messages' contents, in the rendering's order; None
/// where the template does not place the contents verbatim.
pub fn content_spans(
    template: &ChatTemplate,
    messages: &[Message],
    opts: &RenderOptions,
    rendered: &str,
) -> Option<Vec<Range<usize>>> {
    let marked: Vec<Message> = messages
        .iter()
        .enumerate()
        // Only the content is marked: a turn's tool calls and names render
        // as in the real prompt.
        .map(|(i, m)| Message {
            content: format!("{OPEN}{i}{CLOSE}"),
            ..m.clone()
        })
        .collect();
    let skeleton = template.render(&marked, opts).ok()?;
    let mut rebuilt = String::with_capacity(rendered.len());
    let mut spans = Vec::new();
    let mut rest = skeleton.as_str();
    while let Some(at) = rest.find(OPEN) {
        rebuilt.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len_utf8()..];
        let end = after.find(CLOSE)?;
        let content = &messages.get(after[..end].parse::<usize>().ok()?)?.content;
        let start = rebuilt.len();
        rebuilt.push_str(content);
        spans.push(start..rebuilt.len());
        rest = &after[end + CLOSE.len_utf8()..];
    }
    rebuilt.push_str(rest);
    (rebuilt == rendered).then_some(spans)
}

/// The byte ranges of `rendered` (`messages` rendered by `template` with
/// `opts`) to tokenize as plain text: none where no content holds a control
/// token's text (nothing could be parsed as one), else the contents'
/// ranges ([`content_spans`]), or the error where the template does not
/// place them verbatim.
pub fn plain_ranges(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[Message],
    opts: &RenderOptions,
    rendered: &str,
) -> Result<Vec<Range<usize>>, ControlTextError> {
    let Some(index) = messages
        .iter()
        .position(|m| tok.has_control_text(&m.content))
    else {
        return Ok(Vec::new());
    };
    content_spans(template, messages, opts, rendered).ok_or(ControlTextError { index })
}

/// The tokens of `rendered`, the rendering of `messages` by `template` with
/// `opts`, each message's content tokenized as plain text (control tokens
/// only from the template's own text). Equal to
/// `prompt_tokens(tok, rendered)` where no content holds a control token's
/// text.
pub fn message_prompt_tokens(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[Message],
    opts: &RenderOptions,
    rendered: &str,
) -> Result<Vec<u32>, ControlTextError> {
    let plain = plain_ranges(tok, template, messages, opts, rendered)?;
    Ok(prompt_tokens_with_plain(tok, rendered, &plain))
}
