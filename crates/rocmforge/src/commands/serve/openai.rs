//! OpenAI's request and response shapes (chat completions, legacy
//! completions, models), as serde types. Unknown request fields are
//! ignored, as OpenAI's own server and llama-server do: clients send
//! fields (`user`, `presence_penalty`, ...) that change nothing here.

use serde::{Deserialize, Serialize};

/// `stop`: one string or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// A message's `content`: a string, a list of parts (of which the text
/// parts are read), or null (an assistant turn that only called tools).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    /// An assistant turn's calls, sent back with the conversation.
    #[serde(default)]
    pub tool_calls: Option<Vec<InToolCall>>,
    /// A `tool` turn: the call it answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// A call in a request's assistant turn.
#[derive(Debug, Deserialize)]
pub struct InToolCall {
    #[serde(default)]
    pub id: Option<String>,
    pub function: InFunction,
}

#[derive(Debug, Deserialize)]
pub struct InFunction {
    pub name: String,
    /// JSON text (OpenAI's), or an object (some clients').
    #[serde(default)]
    pub arguments: Option<serde_json::Value>,
}

/// The sampling fields both endpoints share.
#[derive(Debug, Deserialize, Default)]
pub struct Sampling {
    pub model: Option<String>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub max_tokens: Option<u64>,
    pub stop: Option<Stop>,
    /// Negative (llama.cpp's -1) means a random seed, as a missing one does.
    pub seed: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub n: Option<u64>,
    /// llama-server's: `false` evaluates the whole prompt again instead of
    /// reusing a slot's cached prefix.
    pub cache_prompt: Option<bool>,
    /// OpenAI's structured output: `{"type": "text" | "json_object" |
    /// "json_schema", "json_schema": {"name", "schema", "strict"}}`.
    pub response_format: Option<serde_json::Value>,
    /// llama-server's: a GBNF grammar the reply follows.
    pub grammar: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    /// The newer name of `max_tokens`.
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<u64>,
    /// Functions the model may call (`{"type": "function", "function":
    /// {"name", "description", "parameters"}}`).
    pub tools: Option<Vec<serde_json::Value>>,
    /// `auto`, `none`, `required` or `{"type": "function", "function":
    /// {"name": ...}}`.
    pub tool_choice: Option<serde_json::Value>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// `prompt`: a string, or a list holding one (a batch of several prompts
/// is `n` > 1 in disguise, refused the same way).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    /// Legacy logprobs: how many alternatives per token (0-5).
    pub logprobs: Option<u64>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// The model ended its turn, or a stop string appeared.
    Stop,
    /// `max_tokens`, or the context filled up.
    Length,
    /// The reply is function calls.
    #[serde(rename = "tool_calls")]
    ToolCalls,
}

#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

/// OpenAI's `usage.prompt_tokens_details`.
#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
pub struct PromptTokensDetails {
    /// Prompt tokens a slot's cache held, not evaluated again.
    pub cached_tokens: usize,
}

impl Usage {
    pub fn cached(prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

/// One alternative at a position: its text, log-probability and bytes.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// The chosen token's log-probability and the most likely alternatives
/// (chat's `logprobs.content[]` entry).
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<TokenLogprob>,
}

#[derive(Debug, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    /// Null when the reply is only calls, as OpenAI's.
    pub content: Option<String>,
    /// The reply's reasoning (gpt-oss's analysis channel), as
    /// llama-server returns it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<super::tools::ApiToolCall>>,
}

#[derive(Debug, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: FinishReason,
}

#[derive(Debug, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Debug, Serialize, Default)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<super::tools::ApiToolCall>>,
}

#[derive(Debug, Serialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<FinishReason>,
}

/// A `chat.completion.chunk`; the last one carries `finish_reason` and
/// `usage`.
#[derive(Debug, Serialize)]
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// Legacy completion logprobs: parallel lists, alternatives as maps.
#[derive(Debug, Serialize, Default)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<serde_json::Map<String, serde_json::Value>>,
    pub text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    /// Appends one token whose text starts at `offset` in the reply.
    pub fn push(&mut self, lp: &TokenLogprob, offset: usize) {
        self.tokens.push(lp.token.clone());
        self.token_logprobs.push(lp.logprob);
        self.top_logprobs.push(
            lp.top_logprobs
                .iter()
                .map(|t| (t.token.clone(), serde_json::Value::from(t.logprob)))
                .collect(),
        );
        self.text_offset.push(offset);
    }
}

#[derive(Debug, Serialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<FinishReason>,
}

/// A `text_completion`, whole or as one streamed chunk.
#[derive(Debug, Serialize)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Serialize)]
pub struct ModelEntry {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
}

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelEntry>,
}
