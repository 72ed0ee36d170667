//! OpenAI's `tools` and `tool_choice` on chat completions.
//!
//! The tools are rendered by the model's chat template (its `tools`
//! variable), calls the model writes in its family's format are found in
//! the reply ([`ToolFormat::parse`]) and returned as `tool_calls`, and an
//! assistant turn's `tool_calls` and the `tool` turns answering them are
//! rendered back on the next request. `tool_choice`:
//! - `auto` (the default with tools): the model may call or answer;
//! - `none`: tools are shown but the reply is text;
//! - `required`, or `{"type": "function", "function": {"name": ...}}`: the
//!   reply is decoded under the grammar of one call (of any tool, or of
//!   that one), so it is a call whatever the model would have written.

use rocmforge_core::chat::ToolFormat;
use serde::Serialize;
use serde_json::Value;

use super::errors::ApiError;

/// What a request's tools ask of the reply.
pub struct ToolRequest {
    /// The `tools` list, for the template.
    pub list: Value,
    /// The format replies are parsed in; `None` with `tool_choice: none`.
    pub parse: Option<ToolFormat>,
    /// The grammar of a call the reply must be (required / named).
    pub grammar: Option<String>,
}

/// `tools` and `tool_choice` checked against each other and the model's
/// format (`None`: its template renders no calls).
pub fn tool_request(
    tools: Option<Vec<Value>>,
    choice: Option<&Value>,
    format: Option<ToolFormat>,
) -> Result<Option<ToolRequest>, ApiError> {
    let bad = |m: String| ApiError::invalid(m, Some("tools"));
    let Some(tools) = tools.filter(|t| !t.is_empty()) else {
        if choice.is_some_and(|c| c != "none" && c != "auto") {
            return Err(ApiError::invalid(
                "tool_choice needs tools",
                Some("tool_choice"),
            ));
        }
        return Ok(None);
    };
    let mut functions = Vec::with_capacity(tools.len());
    for t in &tools {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(format!(
                "a tool must be {{\"type\": \"function\", ...}}, not {t}"
            )));
        }
        let f = t
            .get("function")
            .filter(|f| {
                f.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty())
            })
            .ok_or_else(|| bad(format!("a tool needs function.name: {t}")))?;
        functions.push(f.clone());
    }
    let bad_choice = |m: String| ApiError::invalid(m, Some("tool_choice"));
    let must: Option<Vec<Value>> = match choice {
        None => None,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => None,
            "none" => {
                return Ok(Some(ToolRequest {
                    list: Value::Array(tools),
                    parse: None,
                    grammar: None,
                }))
            }
            "required" => Some(functions.clone()),
            other => {
                return Err(bad_choice(format!(
                    "tool_choice '{other}' is not one of auto, none, required or a named function"
                )))
            }
        },
        Some(c) => {
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad_choice(format!("tool_choice {c} names no function")))?;
            let f = functions
                .iter()
                .find(|f| f["name"] == name)
                .ok_or_else(|| {
                    bad_choice(format!(
                        "tool_choice names '{name}', which is not among the tools"
                    ))
                })?;
            Some(vec![f.clone()])
        }
    };
    let grammar = match (&must, format) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(bad_choice(
                "this model's chat template writes no tool calls, so a call cannot be required"
                    .into(),
            ))
        }
        (Some(fs), Some(f)) => Some(f.call_grammar(fs).map_err(bad)?),
    };
    Ok(Some(ToolRequest {
        list: Value::Array(tools),
        parse: format,
        grammar,
    }))
}

/// A call as OpenAI returns it.
#[derive(Debug, Serialize, Clone)]
pub struct ApiToolCall {
    /// Its place among the reply's calls (stream deltas carry it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: ApiFunction,
}

#[derive(Debug, Serialize, Clone)]
pub struct ApiFunction {
    pub name: String,
    /// JSON text, as OpenAI's.
    pub arguments: String,
}

/// The calls of a reply, for `message.tool_calls` (`indexed`: with their
/// index, for a stream's delta).
pub fn api_calls(calls: &[rocmforge_core::chat::ToolCall], indexed: bool) -> Vec<ApiToolCall> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| ApiToolCall {
            index: indexed.then_some(i),
            id: c.id.clone(),
            kind: "function",
            function: ApiFunction {
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            },
        })
        .collect()
}
