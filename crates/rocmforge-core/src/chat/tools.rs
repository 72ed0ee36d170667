//! Function calls in a model's own format: found in a reply, and the
//! grammar that makes a reply one (OpenAI's `tool_choice: required` or a
//! named function).
//!
//! Each family writes calls its own way, as its chat template shows (the
//! format is read off the template's text):
//! - Hermes / Qwen 2.5 and 3: `<tool_call>\n{"name": ..., "arguments":
//!   {...}}\n</tool_call>`, one block per call;
//! - Llama 3.1 and 3.2: the reply is one JSON object `{"name": ...,
//!   "parameters": {...}}`;
//! - Mistral (Nemo, Small): `[TOOL_CALLS][{"name": ..., "arguments":
//!   {...}}, ...]`;
//! - gpt-oss's harmony: messages `<|start|>assistant<|channel|>C<|message|>
//!   ...<|end|>`, a call being a message to a function, its arguments the
//!   body: `<|channel|>commentary to=functions.NAME <|constrain|>json
//!   <|message|>{...}`, ended by `<|call|>` (an end of generation). The
//!   recipient may also stand before the channel (`to=functions.NAME
//!   <|channel|>commentary json`, as the template renders calls back).
//!   The reply's first message has no `<|start|>assistant`: the generation
//!   prompt ends with it.
//!
//! A call found is given an id (`call` and five digits: Mistral's
//! templates take nine letters and digits only), its arguments kept as
//! JSON text, as OpenAI's `tool_calls` carry them.

use serde_json::{json, Value};

use super::template::ToolCall;

/// How a family's replies call functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    Llama3,
    Mistral,
    Harmony,
}

/// A reply split into its text and its calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl ToolFormat {
    /// The format a chat template's text writes calls in; `None` for a
    /// template that renders no calls.
    pub fn of_template(source: &str) -> Option<ToolFormat> {
        if source.contains("<tool_call>") {
            Some(ToolFormat::Hermes)
        } else if source.contains("[TOOL_CALLS]") {
            Some(ToolFormat::Mistral)
        } else if source.contains("<|call|>") && source.contains("to=") {
            Some(ToolFormat::Harmony)
        } else if source.contains("<|python_tag|>") || source.contains("\"parameters\": ") {
            Some(ToolFormat::Llama3)
        } else {
            None
        }
    }

    /// The calls in `text` and what is left of it; text that is no call
    /// of this format stays content.
    pub fn parse(self, text: &str) -> Reply {
        let mut calls = Vec::new();
        let content = match self {
            ToolFormat::Hermes => {
                let mut rest = String::new();
                let mut s = text;
                while let Some(start) = s.find("<tool_call>") {
                    let body = &s[start + "<tool_call>".len()..];
                    let Some(end) = body.find("</tool_call>") else {
                        break;
                    };
                    match call_of(body[..end].trim(), "arguments") {
                        Some(c) => {
                            rest.push_str(&s[..start]);
                            calls.push(c);
                        }
                        None => rest.push_str(
                            &s[..start + "<tool_call>".len() + end + "</tool_call>".len()],
                        ),
                    }
                    s = &body[end + "</tool_call>".len()..];
                }
                rest.push_str(s);
                rest
            }
            ToolFormat::Llama3 => {
                let t = text.trim().trim_start_matches("<|python_tag|>");
                match call_of(t, "parameters").or_else(|| call_of(t, "arguments")) {
                    Some(c) => {
                        calls.push(c);
                        String::new()
                    }
                    None => text.to_string(),
                }
            }
            ToolFormat::Mistral => match text.find("[TOOL_CALLS]") {
                Some(at) => {
                    let list = text[at + "[TOOL_CALLS]".len()..].trim();
                    let found: Option<Vec<ToolCall>> = serde_json::from_str::<Vec<Value>>(list)
                        .ok()
                        .and_then(|items| {
                            items
                                .iter()
                                .map(|v| call_of_value(v, "arguments"))
                                .collect()
                        });
                    match found {
                        Some(c) => {
                            calls = c;
                            text[..at].to_string()
                        }
                        None => text.to_string(),
                    }
                }
                None => text.to_string(),
            },
            // What is said around the calls is the reply's content as the
            // reasoning reader splits it (final, preambles).
            ToolFormat::Harmony => {
                calls = harmony_calls(text);
                if calls.is_empty() {
                    text.to_string()
                } else {
                    super::reasoning::ReasoningFormat::Harmony
                        .split(text, false)
                        .1
                }
            }
        };
        for (i, c) in calls.iter_mut().enumerate() {
            c.id = call_id(i);
        }
        Reply {
            content: content.trim().to_string(),
            calls,
        }
    }

    /// A Lark grammar (llguidance's) of replies that are one call of one
    /// of `functions` (OpenAI `tools` entries' `function` objects: `name`,
    /// `parameters`).
    pub fn call_grammar(self, functions: &[Value]) -> Result<String, String> {
        if self == ToolFormat::Harmony {
            return harmony_call_grammar(functions);
        }
        let args_key = match self {
            ToolFormat::Llama3 => "parameters",
            ToolFormat::Hermes | ToolFormat::Mistral | ToolFormat::Harmony => "arguments",
        };
        let one_of: Vec<Value> = functions
            .iter()
            .map(|f| {
                let name = f
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("a function needs a name")?;
                let params = f
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"}));
                Ok(json!({
                    "type": "object",
                    "properties": {"name": {"const": name}, args_key: params},
                    "required": ["name", args_key],
                    "additionalProperties": false,
                }))
            })
            .collect::<Result<_, String>>()?;
        if one_of.is_empty() {
            return Err("no function to call".into());
        }
        let call = json!({
            "anyOf": one_of,
            "x-guidance": crate::grammar::openai_json_layout(),
        });
        Ok(match self {
            ToolFormat::Hermes => {
                format!("start: \"<tool_call>\\n\" %json {call} \"\\n</tool_call>\"")
            }
            ToolFormat::Llama3 => format!("start: %json {call}"),
            ToolFormat::Mistral => {
                let list = json!({
                    "type": "array", "items": {"anyOf": call["anyOf"]}, "minItems": 1, "maxItems": 1,
                    "x-guidance": call["x-guidance"],
                });
                format!("start: \"[TOOL_CALLS]\" %json {list}")
            }
            ToolFormat::Harmony => unreachable!("returned above"),
        })
    }
}

/// A harmony reply's calls: its messages to `functions.NAME` whose body
/// is JSON ([`super::reasoning::harmony_messages`]).
fn harmony_calls(text: &str) -> Vec<ToolCall> {
    super::reasoning::harmony_messages(text)
        .filter_map(|(header, body)| {
            let (_, recipient) = super::reasoning::harmony_header(header);
            let name = recipient?
                .strip_prefix("functions.")
                .filter(|n| !n.is_empty())?;
            let args = serde_json::from_str::<Value>(body.trim()).ok()?;
            Some(ToolCall {
                id: String::new(),
                name: name.to_string(),
                arguments: arguments_text(args),
            })
        })
        .collect()
}

/// Replies that are one harmony call of one of `functions`: the message
/// header to the function (as gpt-oss writes it: the channel, then the
/// recipient and the `json` constraint), then arguments that follow its
/// `parameters`; `<|call|>` ends the reply (an end of generation).
fn harmony_call_grammar(functions: &[Value]) -> Result<String, String> {
    let mut rules = Vec::with_capacity(functions.len());
    for (i, f) in functions.iter().enumerate() {
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a function needs a name")?;
        let mut params = f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        if let Some(fields) = params.as_object_mut() {
            fields
                .entry("x-guidance")
                .or_insert_with(crate::grammar::openai_json_layout);
        }
        // A JSON string literal is a Lark one (the same escapes).
        let header = serde_json::to_string(&format!(
            "<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
        ))
        .map_err(|e| e.to_string())?;
        rules.push(format!("call{i}: {header} %json {params}"));
    }
    if rules.is_empty() {
        return Err("no function to call".into());
    }
    let start: Vec<String> = (0..rules.len()).map(|i| format!("call{i}")).collect();
    Ok(format!(
        "start: {}\n{}",
        start.join(" | "),
        rules.join("\n")
    ))
}

/// The id of a reply's call `i`, or of a client's call that came without
/// one: nine letters and digits, as Mistral's templates demand.
pub fn call_id(i: usize) -> String {
    format!("call{i:05}")
}

/// A call's arguments as the text OpenAI's `arguments` holds: a JSON
/// string as it is, any other value (an object) serialised.
pub fn arguments_text(args: Value) -> String {
    match args {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// `{"name": ..., "<args_key>": {...}}` as a call.
fn call_of(text: &str, args_key: &str) -> Option<ToolCall> {
    call_of_value(&serde_json::from_str(text).ok()?, args_key)
}

/// [`call_of`] of a value already parsed.
fn call_of_value(v: &Value, args_key: &str) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v.get(args_key).cloned().unwrap_or_else(|| json!({}));
    Some(ToolCall {
        id: String::new(),
        name,
        arguments: arguments_text(args),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn call_ids_are_nine_letters_and_digits_and_arguments_are_text() {
        for i in [0, 7, 12345] {
            let id = call_id(i);
            assert_eq!(id.len(), 9, "{id}");
            assert!(id.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
        }
        assert_eq!(arguments_text(json!("{\"a\": 1}")), "{\"a\": 1}");
        assert_eq!(arguments_text(json!({"a": 1})), "{\"a\":1}");
    }

    #[test]
    fn formats_are_read_off_templates() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/chat-templates/"
        );
        let read = |f: &str| std::fs::read_to_string(format!("{dir}{f}")).unwrap();
        assert_eq!(
            ToolFormat::of_template(&read("qwen3.jinja")),
            Some(ToolFormat::Hermes)
        );
        assert_eq!(
            ToolFormat::of_template(&read("qwen2.5.jinja")),
            Some(ToolFormat::Hermes)
        );
        assert_eq!(
            ToolFormat::of_template(&read("llama3.1.jinja")),
            Some(ToolFormat::Llama3)
        );
        assert_eq!(
            ToolFormat::of_template(&read("mistral-nemo.jinja")),
            Some(ToolFormat::Mistral)
        );
        assert_eq!(
            ToolFormat::of_template(&read("gpt-oss.jinja")),
            Some(ToolFormat::Harmony)
        );
        assert_eq!(ToolFormat::of_template(&read("gemma3.jinja")), None);
    }

    #[test]
    fn calls_are_found_and_the_rest_is_content() {
        let r = ToolFormat::Hermes.parse(
            "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>",
        );
        assert_eq!(r.content, "Let me look.");
        assert_eq!(
            r.calls,
            [
                call("call00000", "weather", r#"{"city":"Oslo"}"#),
                call("call00001", "time", "{}")
            ]
        );
        // Not JSON: left as text.
        let r = ToolFormat::Hermes.parse("<tool_call>oops</tool_call> hi");
        assert_eq!(
            (r.content.as_str(), r.calls.len()),
            ("<tool_call>oops</tool_call> hi", 0)
        );
        let r = ToolFormat::Llama3
            .parse("{\"name\": \"weather\", \"parameters\": {\"city\": \"Oslo\"}}");
        assert_eq!(
            r.calls,
            [call("call00000", "weather", r#"{"city":"Oslo"}"#)]
        );
        assert_eq!(ToolFormat::Llama3.parse("Hello there").calls, []);
        let r =
            ToolFormat::Mistral.parse("[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}]");
        assert_eq!(r.calls, [call("call00000", "a", r#"{"x":1}"#)]);
    }

    #[test]
    fn harmony_calls_are_messages_to_functions() {
        // Reasoning, then the call, as gpt-oss writes it (its `<|call|>`
        // ends generation, so it is not in the text).
        let r = ToolFormat::Harmony.parse(
            "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}",
        );
        assert_eq!(
            r.calls,
            [call("call00000", "get_weather", r#"{"city":"Oslo"}"#)]
        );
        assert_eq!(r.content, "");
        // The recipient before the channel, a preamble said to the user.
        let r = ToolFormat::Harmony.parse(
            "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.time<|channel|>commentary json<|message|>{}<|call|>",
        );
        assert_eq!(r.calls, [call("call00000", "time", "{}")]);
        assert_eq!(r.content, "Checking.");
        // No call: the text as it is; a body that is not JSON is no call.
        let plain = "<|channel|>final<|message|>Hello.";
        assert_eq!(ToolFormat::Harmony.parse(plain).content, plain);
        let bad = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops";
        assert_eq!(ToolFormat::Harmony.parse(bad).calls, []);
    }

    #[test]
    fn call_grammars_name_every_function() {
        let f = [
            json!({"name": "weather", "parameters": {"type": "object"}}),
            json!({"name": "time"}),
        ];
        let g = ToolFormat::Hermes.call_grammar(&f).unwrap();
        assert!(g.starts_with("start: \"<tool_call>\\n\" %json {"), "{g}");
        assert!(
            g.contains("\"const\":\"weather\"") && g.contains("\"const\":\"time\""),
            "{g}"
        );
        assert!(ToolFormat::Mistral
            .call_grammar(&f)
            .unwrap()
            .contains("[TOOL_CALLS]"));
        let g = ToolFormat::Harmony.call_grammar(&f).unwrap();
        assert!(g.starts_with("start: call0 | call1\n"), "{g}");
        assert!(
            g.contains(r#"call1: "<|channel|>commentary to=functions.time <|constrain|>json<|message|>" %json {"#),
            "{g}"
        );
        assert!(ToolFormat::Harmony.call_grammar(&[]).is_err());
        assert!(ToolFormat::Llama3.call_grammar(&[json!({})]).is_err());
        assert!(ToolFormat::Llama3.call_grammar(&[]).is_err());
    }
}
