//! Chatting with a model: its conversation format, and when a reply ends.
//!
//! - [`template`]: renders a conversation with the model's own chat template
//!   (`tokenizer.chat_template`, Jinja), as Hugging Face transformers does;
//!   ChatML for files without one, as llama.cpp does.
//! - [`tojson`]: the `tojson` filter templates use for tool schemas.
//! - [`stop`]: user stop strings found in streamed text, held back while
//!   they may still be forming. (End-of-generation tokens are the
//!   tokenizer's: [`crate::tokenizer::Tokenizer::is_eog`].)
//! - [`cached_text`]: which part of a re-rendered conversation the KV cache
//!   already holds, so a turn evaluates only its new tokens.
//! - [`content_spans`]: the messages' contents kept as plain text when the
//!   rendering is tokenized, so a user cannot write a turn marker.
//! - [`reasoning`]: gpt-oss's harmony channels split into reasoning and
//!   content as a reply streams.
//! - [`tools`]: function calls in the family's own format, found in a
//!   reply, and the grammar of a reply that must be one.
//!
//! The command line's `chat` and a server share these.

pub mod cached_text;
pub mod content_spans;
pub mod reasoning;
pub mod stop;
pub mod template;
mod tojson;
pub mod tools;

pub use cached_text::{prompt_tokens, prompt_tokens_with_plain, CachedText, Feed};
pub use content_spans::{content_spans, message_prompt_tokens, plain_ranges, ControlTextError};
pub use stop::{StopStep, StopStrings};
pub use template::{
    ChatTemplate, Clock, Message, RenderOptions, TemplateError, TemplateOrigin, ToolCall,
    CHAT_TEMPLATE_KEY,
};
pub use tools::ToolFormat;
