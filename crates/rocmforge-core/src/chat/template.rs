//! A model's chat template: the Jinja text a GGUF file carries in
//! `tokenizer.chat_template`, rendered as Hugging Face transformers renders
//! it in `apply_chat_template`, since that rendering is what the model saw
//! in training.
//!
//! What transformers sets up, and so this does too:
//! - Jinja with `trim_blocks` and `lstrip_blocks` on and the loop-controls
//!   extension (`{% break %}`, `{% continue %}`);
//! - the variables `messages`, `add_generation_prompt`, `bos_token`,
//!   `eos_token`, `tools` and `documents` (both none), and the caller's extra
//!   switches such as Qwen3's `enable_thinking`;
//! - the functions `raise_exception(message)` (the template refuses the
//!   conversation: [`TemplateError::Raised`]) and `strftime_now(format)`
//!   (the local time, C `strftime` directives);
//! - its own `tojson` filter (`json.dumps`, see [`super::tojson`]);
//! - Python's spelling of printed booleans and none (`True`, `None`).
//!
//! Templates call Python's string and dict methods (`.strip()`,
//! `.split()`, `.startswith()`, `.items()`); minijinja-contrib's `pycompat`
//! supplies them.
//!
//! # A file without a template
//! llama.cpp formats such a conversation as ChatML (`<|im_start|>role ...
//! <|im_end|>`), and so does [`ChatTemplate::from_metadata`]
//! ([`TemplateOrigin::ChatmlFallback`]). The caller can tell and warn: a
//! model not trained on ChatML will chat poorly with it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use chrono::NaiveDateTime;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Enumerator, Object, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State, Value};

use crate::gguf::GgufValue;

/// The metadata key holding the default chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// ChatML, the fallback for files without a template.
const CHATML: &str = include_str!("chatml.jinja");

/// The name the template is stored under; no extension, so nothing is
/// HTML-escaped.
const NAME: &str = "chat_template";

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant` (templates may know others, such as
    /// `tool`).
    pub role: String,
    pub content: String,
    /// An assistant turn's function calls (OpenAI's `tool_calls`).
    pub tool_calls: Vec<ToolCall>,
    /// A `tool` turn's answer to this call (`tool_call_id`).
    pub tool_call_id: Option<String>,
    /// A `tool` turn's function name, where the client gives it.
    pub name: Option<String>,
}

/// One function call of an assistant turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text (an object).
    pub arguments: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }
}

/// What a rendering needs besides the messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// End with the header of an assistant turn, so the model writes the
    /// reply next.
    pub add_generation_prompt: bool,
    /// The BOS token's text (`<s>`, `<|begin_of_text|>`), or empty.
    pub bos_token: String,
    /// The EOS token's text, or empty.
    pub eos_token: String,
    /// `enable_thinking` for templates with a reasoning switch (Qwen3);
    /// `None` leaves the variable undefined, which such templates read as
    /// their default.
    pub enable_thinking: Option<bool>,
    /// The functions the model may call: OpenAI's `tools` list; `None`:
    /// the template's `tools` is none.
    pub tools: Option<serde_json::Value>,
}

/// Where a template came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The file's `tokenizer.chat_template`, or text the caller gave.
    Given,
    /// The file has no template; ChatML stands in, as in llama.cpp.
    ChatmlFallback,
}

/// The clock `strftime_now` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The local time of day, as transformers' `datetime.now()`.
    Local,
    /// A fixed instant, for reproducible renderings.
    Fixed(NaiveDateTime),
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("`{CHAT_TEMPLATE_KEY}` is {found}, not a string")]
    NotAString { found: String },
    #[error("the chat template does not parse: {0}")]
    Syntax(#[source] Error),
    /// The template called `raise_exception`: it does not accept this
    /// conversation (roles out of order, a system message it has no place
    /// for, ...). The message is the template's own.
    #[error("the chat template refuses this conversation: {message}")]
    Raised { message: String },
    #[error("rendering the chat template failed: {0}")]
    Render(#[source] Error),
}

/// A message as templates see it: a map of `role` then `content`, the
/// order a JSON request lists them in, which `tojson` keeps.
#[derive(Debug)]
struct MessageValue(Message);

impl Object for MessageValue {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let m = &self.0;
        match key.as_str()? {
            "role" => Some(Value::from(m.role.as_str())),
            "content" => Some(Value::from(m.content.as_str())),
            // As transformers' callers pass them: OpenAI's shape, the
            // arguments an object (llama.cpp parses them too).
            "tool_calls" if !m.tool_calls.is_empty() => Some(Value::from(
                m.tool_calls
                    .iter()
                    .map(|c| {
                        let arguments: serde_json::Value = serde_json::from_str(&c.arguments)
                            .unwrap_or(serde_json::Value::String(c.arguments.clone()));
                        json_value(&serde_json::json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": arguments},
                        }))
                    })
                    .collect::<Vec<_>>(),
            )),
            "tool_call_id" => m.tool_call_id.as_deref().map(Value::from),
            "name" => m.name.as_deref().map(Value::from),
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let m = &self.0;
        let mut keys = vec!["role", "content"];
        if !m.tool_calls.is_empty() {
            keys.push("tool_calls");
        }
        if m.tool_call_id.is_some() {
            keys.push("tool_call_id");
        }
        if m.name.is_some() {
            keys.push("name");
        }
        Enumerator::Values(keys.into_iter().map(Value::from).collect())
    }
}

/// What `raise_exception` fails with, found again in the error's sources.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct RaisedByTemplate(String);

/// A compiled chat template, ready to render any number of conversations.
/// `Send + Sync`: one instance can serve every request of a server.
pub struct ChatTemplate {
    env: Environment<'static>,
    origin: TemplateOrigin,
    tool_format: Option<super::tools::ToolFormat>,
    reasoning: Option<super::reasoning::ReasoningFormat>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`.
    pub fn new(source: &str) -> Result<ChatTemplate, TemplateError> {
        Self::compile(source, TemplateOrigin::Given)
    }

    /// ChatML, llama.cpp's format for models without a template.
    pub fn chatml() -> ChatTemplate {
        Self::compile(CHATML, TemplateOrigin::ChatmlFallback).expect("the ChatML template parses")
    }

    /// The template in a file's metadata (`get` as
    /// [`crate::gguf::GgufFile::get`]), ChatML when it has none.
    pub fn from_metadata<'a>(
        get: impl Fn(&str) -> Option<&'a GgufValue>,
    ) -> Result<ChatTemplate, TemplateError> {
        match get(CHAT_TEMPLATE_KEY) {
            None => Ok(Self::chatml()),
            Some(GgufValue::String(s)) => Self::new(s),
            Some(other) => Err(TemplateError::NotAString {
                found: other.brief(),
            }),
        }
    }

    pub fn from_gguf(file: &crate::gguf::GgufFile) -> Result<ChatTemplate, TemplateError> {
        Self::from_metadata(|key| file.get(key))
    }

    pub fn origin(&self) -> TemplateOrigin {
        self.origin
    }

    /// The format the template writes function calls in, if any.
    pub fn tool_format(&self) -> Option<super::tools::ToolFormat> {
        self.tool_format
    }

    /// How replies carry their reasoning (gpt-oss's channels, a
    /// `<think>` block), which [`super::reasoning`] splits from content.
    pub fn reasoning_format(&self) -> Option<super::reasoning::ReasoningFormat> {
        self.reasoning
    }

    /// Makes `strftime_now` read `clock` (the local time by default).
    pub fn with_clock(mut self, clock: Clock) -> ChatTemplate {
        self.env.add_function("strftime_now", move |format: &str| {
            strftime_now(clock, format)
        });
        self
    }

    fn compile(source: &str, origin: TemplateOrigin) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_syntax(
            SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .expect("the default delimiters are valid"),
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", super::tojson::tojson);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, "raise_exception")
                    .with_source(RaisedByTemplate(message)))
            },
        );
        env.add_template_owned(NAME, source.to_owned())
            .map_err(TemplateError::Syntax)?;
        let tool_format = super::tools::ToolFormat::of_template(source);
        Ok(ChatTemplate {
            env,
            origin,
            tool_format,
            reasoning: super::reasoning::ReasoningFormat::of_template(source),
        }
        .with_clock(Clock::Local))
    }

    /// The prompt text for `messages`.
    pub fn render(
        &self,
        messages: &[Message],
        opts: &RenderOptions,
    ) -> Result<String, TemplateError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| Value::from_object(MessageValue(m.clone())))
            .collect();
        let mut vars = BTreeMap::from([
            ("messages", Value::from(messages)),
            (
                "add_generation_prompt",
                Value::from(opts.add_generation_prompt),
            ),
            ("bos_token", Value::from(opts.bos_token.as_str())),
            ("eos_token", Value::from(opts.eos_token.as_str())),
            // transformers passes both, as none when the caller has none.
            (
                "tools",
                opts.tools.as_ref().map_or(Value::from(()), json_value),
            ),
            ("documents", Value::from(())),
        ]);
        if let Some(on) = opts.enable_thinking {
            vars.insert("enable_thinking", Value::from(on));
        }
        let template = self
            .env
            .get_template(NAME)
            .expect("compiled in ChatTemplate::compile");
        template
            .render(Value::from_object(vars))
            .map_err(|e| match raised_message(&e) {
                Some(message) => TemplateError::Raised { message },
                None => TemplateError::Render(e),
            })
    }
}

/// A JSON value as a template value, object keys in their order.
fn json_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => Value::from(a.iter().map(json_value).collect::<Vec<_>>()),
        J::Object(o) => Value::from_pairs(o.iter().map(|(k, v)| (k.as_str(), json_value(v)))),
    }
}

/// The message of a `raise_exception` call somewhere in `e`'s sources.
fn raised_message(e: &Error) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<RaisedByTemplate>() {
            return Some(r.0.clone());
        }
        cur = err.source();
    }
    None
}

/// Prints values as Python's Jinja does where minijinja's own spelling
/// differs: `True`, `False` and `None` rather than `true`, `false` and
/// nothing.
fn python_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    let python = match value.kind() {
        ValueKind::Bool if value.is_true() => "True",
        ValueKind::Bool => "False",
        ValueKind::None => "None",
        _ => return minijinja::escape_formatter(out, state, value),
    };
    out.write_str(python).map_err(Error::from)
}

/// `strftime_now(format)`: the time in C `strftime` notation, as
/// `datetime.now().strftime(format)`.
fn strftime_now(clock: Clock, format: &str) -> Result<String, Error> {
    let now = match clock {
        Clock::Local => chrono::Local::now().naive_local(),
        Clock::Fixed(t) => t,
    };
    // chrono reports a directive it does not know as a formatting error,
    // which `to_string` would turn into a panic.
    let mut out = String::new();
    write!(out, "{}", now.format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: unsupported format {format:?}"),
        )
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> Vec<Message> {
        vec![
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
        ]
    }

    fn opts() -> RenderOptions {
        RenderOptions {
            add_generation_prompt: true,
            ..RenderOptions::default()
        }
    }

    #[test]
    fn a_file_without_a_template_gets_chatml() {
        let t = ChatTemplate::from_metadata(|_| None).unwrap();
        assert_eq!(t.origin(), TemplateOrigin::ChatmlFallback);
        assert_eq!(
            t.render(&conversation(), &opts()).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn a_template_of_the_wrong_type_is_an_error() {
        let v = GgufValue::U32(7);
        let e = ChatTemplate::from_metadata(|_| Some(&v)).unwrap_err();
        assert!(matches!(e, TemplateError::NotAString { .. }), "{e}");
        assert!(e.to_string().contains(CHAT_TEMPLATE_KEY), "{e}");
    }

    #[test]
    fn syntax_errors_are_reported_at_compile_time() {
        let e = ChatTemplate::new("{% for m in messages %}{{ m.content }}").unwrap_err();
        assert!(matches!(e, TemplateError::Syntax(_)), "{e}");
    }

    #[test]
    fn raise_exception_carries_the_templates_message() {
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}").unwrap();
        match t.render(&conversation(), &opts()) {
            Err(TemplateError::Raised { message }) => assert_eq!(message, "roles must alternate"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_render_failures_are_render_errors() {
        let t = ChatTemplate::new("{{ messages[0].content.nosuchmethod() }}").unwrap();
        let e = t.render(&conversation(), &opts()).unwrap_err();
        assert!(matches!(e, TemplateError::Render(_)), "{e}");
    }

    #[test]
    fn strftime_now_reads_the_chosen_clock() {
        let when = chrono::NaiveDate::from_ymd_opt(2024, 7, 26)
            .unwrap()
            .and_hms_opt(9, 5, 0)
            .unwrap();
        let t = ChatTemplate::new("{{ strftime_now('%d %b %Y %H:%M') }}")
            .unwrap()
            .with_clock(Clock::Fixed(when));
        assert_eq!(t.render(&[], &opts()).unwrap(), "26 Jul 2024 09:05");
        let bad = ChatTemplate::new("{{ strftime_now('%Q') }}").unwrap();
        assert!(matches!(
            bad.render(&[], &opts()),
            Err(TemplateError::Render(_))
        ));
    }

    #[test]
    fn enable_thinking_is_undefined_unless_set() {
        let t = ChatTemplate::new(
            "{% if enable_thinking is defined %}{{ enable_thinking }}{% else %}unset{% endif %}",
        )
        .unwrap();
        assert_eq!(t.render(&[], &opts()).unwrap(), "unset");
        let off = RenderOptions {
            enable_thinking: Some(false),
            ..opts()
        };
        assert_eq!(t.render(&[], &off).unwrap(), "False");
    }
}
