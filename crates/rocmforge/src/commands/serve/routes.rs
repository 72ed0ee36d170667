//! The HTTP side: routes, request checking, and turning a job's events into
//! an OpenAI response, whole or streamed as server-sent events.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rocmforge_core::chat::reasoning::{joined, Part, ReasoningFormat};
use rocmforge_core::chat::{tools, Message, ToolCall};
use rocmforge_core::sampler::SamplerConfig;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use super::errors::ApiError;
use super::limits::{read_body, BodyBudget, Limits};
use super::metrics::Metrics;
use super::openai::{
    AssistantMessage, ChatChoice, ChatChunk, ChatCompletion, ChatLogprobs, ChatRequest,
    ChunkChoice, Completion, CompletionChoice, CompletionLogprobs, CompletionRequest, Content,
    Delta, FinishReason, ModelEntry, ModelList, Prompt, Sampling, TokenLogprob, Usage,
};
use super::tools::{api_calls, tool_request};
use super::worker::{Event, Generation, Input, Job, OutputFormat};

/// Request bodies above this are refused with 413: a chat that fills any
/// context this server runs is far smaller, and an unbounded body is memory
/// anyone could take.
pub const BODY_LIMIT: usize = 1 << 20;

/// Bodies are read up to this before the 413: a server that answers while
/// the client is still sending closes on it, and the client, its write cut
/// off (EPIPE), never reads the answer. Reading a moderately oversized body
/// to its end lets the error reach the client; beyond this the connection is
/// cut as it arrives.
pub const READ_LIMIT: usize = 16 << 20;

/// OpenAI's own limits on alternatives per token.
const MAX_TOP_LOGPROBS: u64 = 20;
const MAX_LEGACY_LOGPROBS: u64 = 5;

pub struct AppState {
    pub jobs: mpsc::Sender<Job>,
    /// The id clients name the model by: the file's stem.
    pub model_id: String,
    /// When the server started, as the model's `created`.
    pub created: u64,
    pub metrics: Arc<Metrics>,
    pub api_key: Option<String>,
    pub next_id: AtomicU64,
    pub limits: Limits,
    /// Request bodies being read, against `limits.max_buffered`.
    pub body_budget: Arc<BodyBudget>,
    /// How the chat template writes function calls, if it does.
    pub tool_format: Option<rocmforge_core::chat::ToolFormat>,
    /// How chat replies carry their reasoning, split into
    /// `reasoning_content` and `content` (`--reasoning-format auto`).
    pub reasoning: Option<ReasoningFormat>,
}

pub type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    // Only the API needs the key: health checks and Prometheus scrapes come
    // from infrastructure that does not hold it, as with llama-server.
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|uri: Uri| async move { ApiError::not_found(uri.path()) })
        .method_not_allowed_fallback(|| async {
            ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                ..ApiError::invalid("Method not allowed on this route", None)
            }
        })
        .layer(DefaultBodyLimit::max(READ_LIMIT))
        // The body is read (bounded) only once the key is known good, and
        // the key is checked before routing: a wrong method on an API
        // route is 401 without the key, 405 with it.
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), require_key))
        .with_state(state)
}

async fn require_key(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/v1/") || req.uri().path() == "/v1";
    if let Some(key) = st.api_key.as_ref().filter(|_| api) {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        if !given.is_some_and(|g| same_secret(g.as_bytes(), key.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// The credentials of an `Authorization` value of the Bearer scheme, whose
/// name matches without regard to case (RFC 7235).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares without stopping at the first difference, so the time taken
/// does not tell an attacker how much of a guess was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn metrics(State(st): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        st.metrics.render(),
    )
        .into_response()
}

async fn models(State(st): State<Shared>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![ModelEntry {
            id: st.model_id.clone(),
            object: "model",
            created: st.created,
            owned_by: "rocmforge",
        }],
    })
}

async fn chat_completions(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    Metrics::add(&st.metrics.chat_requests, 1);
    let response = chat(&st, body).await;
    answer(&st, response)
}

async fn completions(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    Metrics::add(&st.metrics.completion_requests, 1);
    let response = complete(&st, body).await;
    answer(&st, response)
}

fn answer(st: &AppState, r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(|e| {
        Metrics::add(&st.metrics.failed_requests, 1);
        e.into_response()
    })
}

/// The body as `T`. The body is read as bytes rather than through axum's
/// `Json` so that its rejections (plain text) become OpenAI errors, and so
/// that a client that sends no JSON content type is still served.
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|r| ApiError::from_body_rejection(&r))?;
    if body.len() > BODY_LIMIT {
        return Err(ApiError::too_large());
    }
    serde_json::from_slice(&body).map_err(|e| ApiError::from_json(&e))
}

async fn chat(st: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(body)?;
    let top_logprobs = match (req.logprobs, req.top_logprobs) {
        (_, Some(n)) if n > MAX_TOP_LOGPROBS => {
            return Err(ApiError::invalid(
                format!("top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {n}"),
                Some("top_logprobs"),
            ))
        }
        (false, Some(_)) => {
            return Err(ApiError::invalid(
                "top_logprobs needs logprobs: true",
                Some("top_logprobs"),
            ))
        }
        (true, n) => Some(n.unwrap_or(0) as usize),
        (false, None) => None,
    };
    let messages = req
        .messages
        .into_iter()
        .map(|m| {
            let content = match m.content {
                None => String::new(),
                Some(Content::Text(t)) => t,
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        match (p.kind.as_str(), p.text) {
                            ("text", Some(t)) => text.push_str(&t),
                            (kind, _) => {
                                return Err(ApiError::invalid(
                                    format!(
                                    "message content of type `{kind}` is not supported (text only)"
                                ),
                                    Some("messages"),
                                ))
                            }
                        }
                    }
                    text
                }
            };
            let mut message = Message::new(m.role, content);
            message.tool_calls = m
                .tool_calls
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: c.id.unwrap_or_else(|| tools::call_id(i)),
                    name: c.function.name,
                    arguments: c
                        .function
                        .arguments
                        .map_or_else(|| "{}".into(), tools::arguments_text),
                })
                .collect();
            message.tool_call_id = m.tool_call_id;
            message.name = m.name;
            Ok(message)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "messages must not be empty",
            Some("messages"),
        ));
    }
    let mut sampling = req.sampling;
    sampling.max_tokens = sampling.max_tokens.or(req.max_completion_tokens);
    let stream = sampling.stream;
    let tools = tool_request(req.tools, req.tool_choice.as_ref(), st.tool_format)?;
    let mut generation = generation(st, sampling, top_logprobs)?;
    if let Some(grammar) = tools.as_ref().and_then(|t| t.grammar.clone()) {
        if generation.format.is_some() {
            return Err(ApiError::invalid(
                "a required tool call cannot also follow response_format or grammar",
                Some("tool_choice"),
            ));
        }
        generation.format = Some(OutputFormat::Lark(grammar));
    }
    let parse = tools.as_ref().and_then(|t| t.parse);
    let reasoning = st.reasoning;
    let tools_list = tools.map(|t| t.list);
    let mut events = submit(st, Input::Chat(messages, tools_list), generation)?;
    let (prompt_tokens, opened) = started(&mut events).await?;
    let id = format!("chatcmpl-{}", st.next_id.fetch_add(1, Ordering::Relaxed));
    let created = now();
    let model = st.model_id.clone();
    if stream {
        let chunk = move |delta: Delta,
                          logprobs: Option<ChatLogprobs>,
                          finish_reason: Option<FinishReason>,
                          usage: Option<Usage>| {
            sse_json(&ChatChunk {
                id: id.clone(),
                object: "chat.completion.chunk",
                created,
                model: model.clone(),
                choices: vec![ChunkChoice {
                    index: 0,
                    delta,
                    logprobs,
                    finish_reason,
                }],
                usage,
            })
        };
        // OpenAI's first chunk names the role with empty content.
        let first = chunk(
            Delta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..Delta::default()
            },
            None,
            None,
            None,
        );
        if let Some(format) = parse {
            // A reply that may hold calls is read whole, then sent as its
            // text and its calls.
            let reply = collect(&mut events, prompt_tokens).await;
            let chunks = match reply {
                Err(e) => vec![sse_json(&e.body())],
                Ok(reply) => {
                    let (reasoning, content, calls, finish) = reply_parts(
                        (reasoning, opened),
                        Some(format),
                        reply.text,
                        reply.finish_reason,
                    );
                    let mut out = Vec::new();
                    if let Some(reasoning) = reasoning {
                        out.push(chunk(
                            Delta {
                                reasoning_content: Some(reasoning),
                                ..Delta::default()
                            },
                            None,
                            None,
                            None,
                        ));
                    }
                    if let Some(content) = content.filter(|c| !c.is_empty()) {
                        out.push(chunk(
                            Delta {
                                content: Some(content),
                                ..Delta::default()
                            },
                            None,
                            None,
                            None,
                        ));
                    }
                    if !calls.is_empty() {
                        out.push(chunk(
                            Delta {
                                tool_calls: Some(api_calls(&calls, true)),
                                ..Delta::default()
                            },
                            None,
                            None,
                            None,
                        ));
                    }
                    out.push(chunk(
                        Delta::default(),
                        None,
                        Some(finish),
                        Some(reply.usage),
                    ));
                    out
                }
            };
            return Ok(sse(tokio_stream::iter(
                std::iter::once(first).chain(chunks),
            )));
        }
        // Each token's text released as reasoning or content once no
        // marker can be forming in it (what is left goes with the last
        // chunk).
        let mut reader = reasoning.map(|f| f.reader(opened));
        let rest = UnboundedReceiverStream::new(events).map(move |ev| match ev {
            Event::Token { text, logprob } => {
                let (reasoning_content, content) = match reader.as_mut() {
                    Some(r) => parts_text(r.push(&text)),
                    None => (None, Some(text)),
                };
                chunk(
                    Delta {
                        content,
                        reasoning_content,
                        ..Delta::default()
                    },
                    logprob.map(|lp| ChatLogprobs { content: vec![lp] }),
                    None,
                    None,
                )
            }
            Event::Done {
                finish_reason,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
            } => chunk(
                {
                    let (reasoning_content, content) = reader
                        .as_mut()
                        .map_or((None, None), |r| parts_text(r.finish()));
                    Delta {
                        content,
                        reasoning_content,
                        ..Delta::default()
                    }
                },
                None,
                Some(finish_reason),
                Some(Usage::cached(
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                )),
            ),
            Event::Failed(m) => sse_json(&ApiError::server(m).body()),
            Event::Rejected(e) => sse_json(&e.body()),
            Event::Started { .. } => sse_json(&ApiError::server("job started twice").body()),
        });
        return Ok(sse(tokio_stream::once(first).chain(rest)));
    }
    let reply = collect(&mut events, prompt_tokens).await?;
    let logprobs = top_logprobs.map(|_| ChatLogprobs {
        content: reply.logprobs,
    });
    let (reasoning_content, content, calls, finish_reason) = reply_parts(
        (st.reasoning, opened),
        parse,
        reply.text,
        reply.finish_reason,
    );
    let tool_calls = (!calls.is_empty()).then(|| api_calls(&calls, false));
    Ok(Json(ChatCompletion {
        id,
        object: "chat.completion",
        created,
        model,
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content,
                reasoning_content,
                tool_calls,
            },
            logprobs,
            finish_reason,
        }],
        usage: reply.usage,
    })
    .into_response())
}

async fn complete(
    st: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(body)?;
    let prompt = match req.prompt {
        Prompt::One(p) => p,
        Prompt::Many(mut v) if v.len() == 1 => v.remove(0),
        Prompt::Many(v) => {
            return Err(ApiError::invalid(
                format!("only one prompt per request is supported, got {}", v.len()),
                Some("prompt"),
            ))
        }
    };
    let top_logprobs = match req.logprobs {
        Some(n) if n > MAX_LEGACY_LOGPROBS => {
            return Err(ApiError::invalid(
                format!("logprobs must be between 0 and {MAX_LEGACY_LOGPROBS}, got {n}"),
                Some("logprobs"),
            ))
        }
        n => n.map(|n| n as usize),
    };
    let stream = req.sampling.stream;
    let generation = generation(st, req.sampling, top_logprobs)?;
    let mut events = submit(st, Input::Text(prompt), generation)?;
    let (prompt_tokens, _) = started(&mut events).await?;
    let id = format!("cmpl-{}", st.next_id.fetch_add(1, Ordering::Relaxed));
    let created = now();
    let model = st.model_id.clone();
    let completion = move |text: String,
                           logprobs: Option<CompletionLogprobs>,
                           finish_reason: Option<FinishReason>,
                           usage: Option<Usage>| Completion {
        id: id.clone(),
        object: "text_completion",
        created,
        model: model.clone(),
        choices: vec![CompletionChoice {
            index: 0,
            text,
            logprobs,
            finish_reason,
        }],
        usage,
    };
    if stream {
        let mut offset = 0;
        let chunks = UnboundedReceiverStream::new(events).map(move |ev| match ev {
            Event::Token { text, logprob } => {
                let logprobs = logprob.map(|lp| {
                    let mut l = CompletionLogprobs::default();
                    l.push(&lp, offset);
                    l
                });
                offset += text.len();
                sse_json(&completion(text, logprobs, None, None))
            }
            Event::Done {
                finish_reason,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
            } => sse_json(&completion(
                String::new(),
                None,
                Some(finish_reason),
                Some(Usage::cached(
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                )),
            )),
            Event::Failed(m) => sse_json(&ApiError::server(m).body()),
            Event::Rejected(e) => sse_json(&e.body()),
            Event::Started { .. } => sse_json(&ApiError::server("job started twice").body()),
        });
        return Ok(sse(chunks));
    }
    let reply = collect(&mut events, prompt_tokens).await?;
    let logprobs = top_logprobs.map(|_| {
        let mut l = CompletionLogprobs::default();
        let mut offset = 0;
        for (lp, len) in reply.logprobs.iter().zip(&reply.token_text_lens) {
            l.push(lp, offset);
            offset += len;
        }
        l
    });
    Ok(Json(completion(
        reply.text,
        logprobs,
        Some(reply.finish_reason),
        Some(reply.usage),
    ))
    .into_response())
}

/// The sampling fields checked and turned into the worker's settings.
fn generation(
    st: &AppState,
    s: Sampling,
    top_logprobs: Option<usize>,
) -> Result<Generation, ApiError> {
    // Lenient as llama-server, but not blind: a missing model means the one
    // served; another name is an error rather than a silent substitution.
    if let Some(m) = s.model.as_deref().filter(|m| !m.is_empty()) {
        if m != st.model_id {
            return Err(ApiError::model_not_found(m, &st.model_id));
        }
    }
    if let Some(n) = s.n.filter(|&n| n != 1) {
        return Err(ApiError::invalid(
            format!("n must be 1 (one choice per request), got {n}"),
            Some("n"),
        ));
    }
    let defaults = SamplerConfig::default();
    let sampler = SamplerConfig {
        temperature: s.temperature.unwrap_or(defaults.temperature),
        top_p: s.top_p.unwrap_or(defaults.top_p),
        seed: match s.seed {
            Some(seed) if seed >= 0 => seed as u64,
            _ => random_seed(),
        },
        ..defaults
    };
    sampler.validate().map_err(|e| {
        let param = match e {
            rocmforge_core::sampler::SamplerError::TopP(_) => "top_p",
            _ => "temperature",
        };
        ApiError::invalid(e.to_string(), Some(param))
    })?;
    if s.max_tokens == Some(0) {
        return Err(ApiError::invalid(
            "max_tokens must be at least 1",
            Some("max_tokens"),
        ));
    }
    let max_tokens = s
        .max_tokens
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let format = output_format(s.response_format.as_ref(), s.grammar)?;
    Ok(Generation {
        sampler,
        max_tokens,
        stops: s.stop.map(|s| s.into_vec()).unwrap_or_default(),
        top_logprobs,
        cache_prompt: s.cache_prompt.unwrap_or(true),
        format,
    })
}

/// `response_format` and `grammar` checked for shape; the schema or
/// grammar itself is compiled by the worker, which refuses a bad one.
fn output_format(
    response_format: Option<&serde_json::Value>,
    grammar: Option<String>,
) -> Result<Option<OutputFormat>, ApiError> {
    let bad = |m: String| ApiError::invalid(m, Some("response_format"));
    let format = match response_format {
        None => None,
        Some(f) => match f.get("type").and_then(|t| t.as_str()) {
            Some("text") => None,
            Some("json_object") => Some(OutputFormat::JsonObject),
            Some("json_schema") => {
                let schema = f
                    .get("json_schema")
                    .and_then(|j| j.get("schema"))
                    .ok_or_else(|| {
                        bad("response_format json_schema needs json_schema.schema".into())
                    })?;
                Some(OutputFormat::JsonSchema(schema.clone()))
            }
            Some(other) => {
                return Err(bad(format!(
                    "response_format type '{other}' is not one of text, json_object, json_schema"
                )))
            }
            None => return Err(bad("response_format needs a type".into())),
        },
    };
    match (format, grammar) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "give response_format or grammar, not both",
            Some("grammar"),
        )),
        (f, None) => Ok(f),
        (None, Some(g)) => Ok(Some(OutputFormat::Gbnf(g))),
    }
}

/// A seed that differs between requests, as OpenAI's are without `seed`.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Queues a job; its events come back through the returned receiver.
fn submit(
    st: &AppState,
    input: Input,
    generation: Generation,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    let (events, rx) = unbounded_channel();
    let waiting = st.metrics.queued.fetch_add(1, Ordering::AcqRel);
    if waiting >= st.limits.max_queue as u64 {
        Metrics::sub(&st.metrics.queued, 1);
        return Err(ApiError::busy(format!(
            "{waiting} requests are waiting for the model, this server's most; try again shortly"
        )));
    }
    st.jobs
        .send(Job {
            input,
            generation,
            events,
        })
        .map_err(|_| {
            Metrics::sub(&st.metrics.queued, 1);
            ApiError::server("the model worker has stopped")
        })?;
    Ok(rx)
}

/// Waits for the job to start: its prompt tokens and whether the prompt
/// opened the reply's reasoning, or why it cannot run. A
/// streamed reply sends its headers only after this, so that a rejected
/// request still gets its error status.
async fn started(events: &mut UnboundedReceiver<Event>) -> Result<(usize, bool), ApiError> {
    match events.recv().await {
        Some(Event::Started {
            prompt_tokens,
            reasoning_open,
        }) => Ok((prompt_tokens, reasoning_open)),
        Some(Event::Rejected(e)) => Err(e),
        Some(Event::Failed(m)) => Err(ApiError::server(m)),
        _ => Err(ApiError::server(
            "the model worker ended the request without an answer",
        )),
    }
}

/// A whole reply, for non-streamed responses.
struct Reply {
    text: String,
    logprobs: Vec<TokenLogprob>,
    /// The text length each logprob's token released, for legacy offsets.
    token_text_lens: Vec<usize>,
    finish_reason: FinishReason,
    usage: Usage,
}

async fn collect(
    events: &mut UnboundedReceiver<Event>,
    prompt_tokens: usize,
) -> Result<Reply, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    let mut token_text_lens = Vec::new();
    while let Some(ev) = events.recv().await {
        match ev {
            Event::Token { text: t, logprob } => {
                if let Some(lp) = logprob {
                    logprobs.push(lp);
                    token_text_lens.push(t.len());
                }
                text.push_str(&t);
            }
            Event::Done {
                finish_reason,
                cached_tokens,
                completion_tokens,
                ..
            } => {
                return Ok(Reply {
                    text,
                    logprobs,
                    token_text_lens,
                    finish_reason,
                    usage: Usage::cached(prompt_tokens, cached_tokens, completion_tokens),
                })
            }
            Event::Failed(m) => return Err(ApiError::server(m)),
            Event::Rejected(e) => return Err(e),
            Event::Started { .. } => {}
        }
    }
    Err(ApiError::server(
        "the model worker ended the request without an answer",
    ))
}

fn sse_json(value: &impl serde::Serialize) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().data(serde_json::to_string(value).unwrap_or_else(|e| {
        format!(r#"{{"error":{{"message":"cannot encode a chunk: {e}","type":"server_error","param":null,"code":null}}}}"#)
    })))
}

/// The events as an SSE response, ended by OpenAI's `data: [DONE]`.
fn sse(
    events: impl tokio_stream::Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
) -> Response {
    let done = tokio_stream::once(Ok(SseEvent::default().data("[DONE]")));
    Sse::new(events.chain(done)).into_response()
}

/// A finished chat reply as the client gets it, whole or streamed: its
/// reasoning in the template's format (gpt-oss's analysis channel, a
/// `<think>` block, which the prompt may have `opened`), then
/// [`split_reply`]'s content, calls and finish, the
/// content being what is left of the text when there is no call.
fn reply_parts(
    (reasoning, opened): (Option<ReasoningFormat>, bool),
    parse: Option<rocmforge_core::chat::ToolFormat>,
    text: String,
    finish: FinishReason,
) -> (Option<String>, Option<String>, Vec<ToolCall>, FinishReason) {
    let split = reasoning.map(|f| f.split(&text, opened));
    let (content, calls, finish) = split_reply(parse, text, finish);
    match split {
        Some((reasoning, said)) if calls.is_empty() => (reasoning, Some(said), calls, finish),
        Some((reasoning, _)) => (reasoning, content, calls, finish),
        None => (None, content, calls, finish),
    }
}

/// Parts released by a reasoning reader as (reasoning, content), each
/// `None` when empty.
fn parts_text(parts: Vec<Part>) -> (Option<String>, Option<String>) {
    let (reasoning, content) = joined(parts);
    (
        (!reasoning.is_empty()).then_some(reasoning),
        (!content.is_empty()).then_some(content),
    )
}

/// A finished chat reply as the client gets it, whole or streamed: where
/// it holds calls in `parse`'s format, the text around them (none if
/// empty), the calls and `tool_calls` as the finish; else its text as it
/// is, no calls and `finish`.
fn split_reply(
    parse: Option<rocmforge_core::chat::ToolFormat>,
    text: String,
    finish: FinishReason,
) -> (Option<String>, Vec<ToolCall>, FinishReason) {
    match parse.map(|f| f.parse(&text)) {
        Some(p) if !p.calls.is_empty() => (
            (!p.content.is_empty()).then_some(p.content),
            p.calls,
            FinishReason::ToolCalls,
        ),
        _ => (Some(text), Vec::new(), finish),
    }
}
