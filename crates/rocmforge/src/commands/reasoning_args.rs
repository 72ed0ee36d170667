//! `--reasoning-format`, shared by `chat` and `serve`: whether a reply's
//! reasoning (gpt-oss's analysis channel, a Qwen3 `<think>` block) is kept
//! apart from what it says ([`rocmforge_core::chat::reasoning`]).

use rocmforge_core::chat::reasoning::ReasoningFormat;
use rocmforge_core::chat::ChatTemplate;

/// llama-server's `--reasoning-format`: `auto` splits the reasoning out in
/// the template's format, `none` keeps the reply's text as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReasoningFlag {
    Auto,
    None,
}

impl ReasoningFlag {
    /// The format replies are split in, if any.
    pub fn format(self, template: &ChatTemplate) -> Option<ReasoningFormat> {
        match self {
            ReasoningFlag::Auto => template.reasoning_format(),
            ReasoningFlag::None => None,
        }
    }
}
