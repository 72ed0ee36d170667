//! `rocmforge serve` end to end: the binary on a free port with the CPU
//! backend and the tiny Qwen3 fixture (random weights: replies are
//! gibberish, so the tests compare replies with each other, greedy, rather
//! than with words).
//!
//! - Chat and text completions, whole and streamed (SSE), logprobs, stop
//!   strings, `/v1/models`, `/health`, `/metrics`.
//! - Every bad request gets OpenAI's error shape and status, and the server
//!   answers `/health` afterwards.
//! - A client that disconnects mid-stream stops its generation.
//! - The official `openai` Python client streams a chat completion. Without
//!   python3 or the package the test is skipped, unless `CI` is set or
//!   `ROCMFORGE_REQUIRE_OPENAI=1` (.ci/run installs it), where it fails.
//! - 32 concurrent streaming clients on 8 slots: none lost, none mixed,
//!   each reply byte for byte its prompt's reply served alone; throughput
//!   and latency percentiles are printed.
//! - Slots: a shared system prompt read once, concurrent requests batched.
//! - Structured output and tool calls (the official `openai` client's
//!   round trip too).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{command, fixture};
use serde_json::{json, Value};

const MODEL_ID: &str = "tiny-qwen3-Q8_0";

/// A running server, killed when dropped.
struct Server {
    child: Child,
    base: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// The server on a context of 2048 tokens (512 for each of the default
    /// 4 slots), unless `extra` gives `-c`.
    fn start(extra: &[&str]) -> Server {
        let model = fixture("tiny-qwen3-Q8_0.gguf");
        let mut child = command("serve")
            .arg("serve")
            .arg("-m")
            .arg(&model)
            .args(["--backend", "cpu", "--port", "0"])
            .args(if extra.contains(&"-c") {
                &[][..]
            } else {
                &["-c", "2048"][..]
            })
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut base = None;
        for line in lines.by_ref() {
            let line = line.unwrap();
            stderr.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(addr) = line.strip_prefix("listening on ") {
                base = Some(addr.trim().to_owned());
                break;
            }
        }
        let Some(base) = base else {
            let status = child.wait().unwrap();
            panic!(
                "server exited ({status}) before listening: {}",
                stderr.lock().unwrap()
            );
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Server {
            child,
            base,
            stderr,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Fails the test if the server process has exited.
    fn assert_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("server exited ({status}): {}", self.stderr.lock().unwrap());
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(120))
        .build()
}

/// Status and body of a request; error statuses are answers, not failures.
fn send(req: ureq::Request, body: Option<&str>) -> (u16, String) {
    let result = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(b),
        None => req.call(),
    };
    match result {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("request failed: {e}"),
    }
}

fn post(s: &Server, path: &str, body: &str) -> (u16, String) {
    send(agent().post(&s.url(path)), Some(body))
}

fn get(s: &Server, path: &str) -> (u16, String) {
    send(agent().get(&s.url(path)), None)
}

fn post_json(s: &Server, path: &str, body: &Value) -> Value {
    let (status, text) = post(s, path, &body.to_string());
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The `data:` payloads of an SSE response, `[DONE]` included.
fn stream(s: &Server, path: &str, body: &Value) -> Vec<String> {
    let r = agent()
        .post(&s.url(path))
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.content_type(), "text/event-stream");
    sse_data(r.into_reader())
}

fn sse_data(body: impl Read) -> Vec<String> {
    BufReader::new(body)
        .lines()
        .map(Result::unwrap)
        .filter_map(|l| l.strip_prefix("data: ").map(str::to_owned))
        .collect()
}

/// The JSON chunks of a stream, checking that it ends with `[DONE]`.
fn chunks(data: &[String]) -> Vec<Value> {
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn chat_body(content: &str, extra: Value) -> Value {
    let mut body = json!({
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 12,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

fn assert_usage(usage: &Value, completion_max: u64) -> (u64, u64) {
    let p = usage["prompt_tokens"].as_u64().unwrap();
    let c = usage["completion_tokens"].as_u64().unwrap();
    assert!(p > 0 && c > 0 && c <= completion_max, "{usage}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), p + c, "{usage}");
    (p, c)
}

/// The usage of a request sent again: the same tokens, and all of the
/// prompt but its last token found in a slot's cache (the first request
/// found none).
fn assert_same_usage_from_the_cache(again: &Value, first: &Value) {
    assert_eq!(
        first["prompt_tokens_details"]["cached_tokens"], 0,
        "{first}"
    );
    let prompt = first["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        again["prompt_tokens_details"]["cached_tokens"],
        prompt - 1,
        "{again}"
    );
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(again[k], first[k], "{k}: {again} {first}");
    }
}

/// The text of a streamed chat, chunk shapes checked on the way.
fn chat_stream_text(data: &[String]) -> (String, Value, Value) {
    let chunks = chunks(data);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut text = String::new();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        assert_eq!(c["model"], MODEL_ID);
        assert_eq!(c["id"], chunks[0]["id"], "one id per stream");
        text.push_str(c["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
    }
    let last = chunks.last().unwrap();
    (
        text,
        last["choices"][0]["finish_reason"].clone(),
        last["usage"].clone(),
    )
}

#[test]
fn chat_whole_and_streamed_agree() {
    let s = Server::start(&[]);
    let body = chat_body("Tell me a story.", json!({}));
    let whole = post_json(&s, "/v1/chat/completions", &body);
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["model"], MODEL_ID);
    let choice = &whole["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let text = choice["message"]["content"].as_str().unwrap();
    let (_, completion) = assert_usage(&whole["usage"], 12);
    let finish = choice["finish_reason"].as_str().unwrap();
    assert!(finish == "stop" || finish == "length", "{finish}");
    if finish == "length" {
        assert_eq!(completion, 12);
    }
    assert!(choice["logprobs"].is_null());

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (stream_text, stream_finish, stream_usage) =
        chat_stream_text(&stream(&s, "/v1/chat/completions", &streamed));
    assert_eq!(stream_text, text, "greedy: the stream repeats the reply");
    assert_eq!(stream_finish, choice["finish_reason"]);
    assert_same_usage_from_the_cache(&stream_usage, &whole["usage"]);

    // A request without `model` is served by the one model.
    let mut anonymous = body.clone();
    anonymous.as_object_mut().unwrap().remove("model");
    let again = post_json(&s, "/v1/chat/completions", &anonymous);
    assert_eq!(again["choices"][0]["message"]["content"], text);
}

#[test]
fn chat_logprobs_are_the_log_softmax_ranking() {
    let s = Server::start(&[]);
    let body = chat_body(
        "Count to ten.",
        json!({"logprobs": true, "top_logprobs": 3, "max_tokens": 6}),
    );
    let whole = post_json(&s, "/v1/chat/completions", &body);
    let content = whole["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    let (_, completion) = assert_usage(&whole["usage"], 6);
    // An end-of-generation token is counted but not part of the reply.
    assert!(
        content.len() as u64 == completion || content.len() as u64 + 1 == completion,
        "{} logprobs for {completion} tokens",
        content.len()
    );
    let mut text = String::new();
    for entry in content {
        let lp = entry["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0, "{entry}");
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{entry}");
        let tops: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(tops.windows(2).all(|w| w[0] >= w[1]), "{tops:?}");
        assert!(tops.iter().map(|l| l.exp()).sum::<f64>() <= 1.0 + 1e-4);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(top[0]["token"], entry["token"], "{entry}");
        assert!((tops[0] - lp).abs() < 1e-6, "{entry}");
        let bytes: Vec<u8> = entry["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    assert_eq!(text, whole["choices"][0]["message"]["content"]);

    // Streamed: one logprob entry per token chunk, the same values.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let chunks = chunks(&stream(&s, "/v1/chat/completions", &streamed));
    let streamed_lps: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(&streamed_lps, content);
}

#[test]
fn completions_whole_streamed_and_stopped() {
    let s = Server::start(&[]);
    let body = json!({"prompt": "Once upon a time", "temperature": 0, "max_tokens": 16});
    let whole = post_json(&s, "/v1/completions", &body);
    assert_eq!(whole["object"], "text_completion");
    let text = whole["choices"][0]["text"].as_str().unwrap().to_owned();
    assert_usage(&whole["usage"], 16);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let chunks = chunks(&stream(&s, "/v1/completions", &streamed));
    let mut stream_text = String::new();
    for c in &chunks {
        assert_eq!(c["object"], "text_completion", "{c}");
        stream_text.push_str(c["choices"][0]["text"].as_str().unwrap());
    }
    assert_eq!(stream_text, text);
    let last = chunks.last().unwrap();
    assert_same_usage_from_the_cache(&last["usage"], &whole["usage"]);
    assert_eq!(
        last["choices"][0]["finish_reason"],
        whole["choices"][0]["finish_reason"]
    );

    // A stop string from the middle of the greedy reply ends it there.
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 6, "reply too short to cut: {text:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let before = &text[..text.find(&stop).unwrap()];
    for stop_field in [json!(stop), json!(["never-appears", stop])] {
        let mut stopped = body.clone();
        stopped["stop"] = stop_field;
        let r = post_json(&s, "/v1/completions", &stopped);
        assert_eq!(r["choices"][0]["text"], before, "stop {stop:?}");
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
    }

    // Legacy logprobs: parallel lists.
    let mut with_lp = body.clone();
    with_lp["logprobs"] = json!(2);
    let r = post_json(&s, "/v1/completions", &with_lp);
    let lp = &r["choices"][0]["logprobs"];
    let n = lp["tokens"].as_array().unwrap().len();
    assert!(n > 0);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), n);
    assert_eq!(lp["text_offset"][0], 0);
    assert!(lp["top_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m.as_object().unwrap().len() <= 2));
}

#[test]
fn models_health_and_metrics() {
    let s = Server::start(&[]);
    let (status, body) = get(&s, "/health");
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    let (status, body) = get(&s, "/v1/models");
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], MODEL_ID);

    let r = post_json(&s, "/v1/chat/completions", &chat_body("Hi", json!({})));
    let (prompt, completion) = assert_usage(&r["usage"], 12);
    let (status, metrics) = get(&s, "/metrics");
    assert_eq!(status, 200);
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
    };
    assert_eq!(
        value(r#"rocmforge_requests_total{endpoint="chat_completions"}"#),
        1
    );
    assert_eq!(
        value(r#"rocmforge_requests_total{endpoint="completions"}"#),
        0
    );
    assert_eq!(value("rocmforge_prompt_tokens_total"), prompt);
    assert_eq!(value("rocmforge_generated_tokens_total"), completion);
    assert_eq!(value("rocmforge_queue_length"), 0);
    assert!(metrics.contains("# TYPE rocmforge_queue_length gauge"));
}

/// Asserts OpenAI's error shape and returns the error object.
fn assert_error(status: u16, body: &str, want_status: u16) -> Value {
    assert_eq!(status, want_status, "{body}");
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let err = v["error"].as_object().unwrap_or_else(|| panic!("{body}"));
    assert!(!err["message"].as_str().unwrap().is_empty(), "{body}");
    assert!(err["type"].is_string(), "{body}");
    assert!(
        err.contains_key("param") && err.contains_key("code"),
        "{body}"
    );
    v["error"].clone()
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_stays_up() {
    let mut s = Server::start(&[]);
    let chat = "/v1/chat/completions";
    let cases: Vec<(&str, String, u16, Option<&str>)> = vec![
        ("malformed JSON", r#"{"messages": [ "#.into(), 400, None),
        ("not JSON at all", "hello".into(), 400, None),
        (
            "wrong type",
            chat_body("x", json!({"temperature": "hot"})).to_string(),
            400,
            None,
        ),
        ("missing messages", r#"{"model": "x"}"#.into(), 400, None),
        (
            "empty messages",
            json!({"messages": []}).to_string(),
            400,
            Some("messages"),
        ),
        (
            "unknown model",
            chat_body("x", json!({"model": "gpt-4"})).to_string(),
            404,
            Some("model"),
        ),
        (
            "n = 2",
            chat_body("x", json!({"n": 2})).to_string(),
            400,
            Some("n"),
        ),
        (
            "negative temperature",
            chat_body("x", json!({"temperature": -1})).to_string(),
            400,
            Some("temperature"),
        ),
        (
            "top_p 0",
            chat_body("x", json!({"top_p": 0})).to_string(),
            400,
            Some("top_p"),
        ),
        (
            "too many top_logprobs",
            chat_body("x", json!({"logprobs": true, "top_logprobs": 50})).to_string(),
            400,
            Some("top_logprobs"),
        ),
        (
            "context overflow by max_tokens",
            chat_body("x", json!({"max_tokens": 100000})).to_string(),
            400,
            Some("messages"),
        ),
        (
            "context overflow by the prompt",
            chat_body(&"word ".repeat(2000), json!({"max_tokens": 1})).to_string(),
            400,
            Some("messages"),
        ),
        // The prompt plus a max_tokens near 2^64 must not wrap around.
        (
            "max_tokens of 2^64 - 1",
            chat_body("x", json!({"max_tokens": u64::MAX})).to_string(),
            400,
            Some("messages"),
        ),
        (
            "max_tokens of 2^64 - 5",
            chat_body("x", json!({"max_tokens": u64::MAX - 4})).to_string(),
            400,
            Some("messages"),
        ),
        (
            "max_tokens 0",
            chat_body("x", json!({"max_tokens": 0})).to_string(),
            400,
            Some("max_tokens"),
        ),
    ];
    for (what, body, status, param) in &cases {
        let (got, text) = post(&s, chat, body);
        let err = assert_error(got, &text, *status);
        if let Some(p) = param {
            assert_eq!(err["param"], *p, "{what}: {text}");
        }
        s.assert_alive();
    }
    let (got, text) = post(
        &s,
        chat,
        &chat_body("x", json!({"model": "gpt-4"})).to_string(),
    );
    assert_eq!(assert_error(got, &text, 404)["code"], "model_not_found");
    let (got, text) = post(
        &s,
        chat,
        &chat_body("x", json!({"max_tokens": 100000})).to_string(),
    );
    assert_eq!(
        assert_error(got, &text, 400)["code"],
        "context_length_exceeded"
    );
    // Streamed requests are refused with a status too, not inside a stream.
    let (got, text) = post(
        &s,
        chat,
        &chat_body("x", json!({"max_tokens": 100000, "stream": true})).to_string(),
    );
    assert_error(got, &text, 400);
    let wrapped = json!({"prompt": "hi", "max_tokens": u64::MAX}).to_string();
    let (got, text) = post(&s, "/v1/completions", &wrapped);
    assert_eq!(
        assert_error(got, &text, 400)["code"],
        "context_length_exceeded"
    );
    let (got, text) = post(&s, "/v1/completions", r#"{"prompt": ["a", "b"]}"#);
    assert_error(got, &text, 400);
    let (got, text) = post(&s, "/v1/completions", r#"{"prompt": 5}"#);
    assert_error(got, &text, 400);

    // A body over the limit: 413, whatever it holds.
    let huge = format!(
        r#"{{"messages": [{{"role": "user", "content": "{}"}}]}}"#,
        "a".repeat(2 << 20)
    );
    let (got, text) = post(&s, chat, &huge);
    assert_eq!(assert_error(got, &text, 413)["code"], "request_too_large");

    let (got, text) = get(&s, "/v1/nothing-here");
    assert_error(got, &text, 404);
    let (got, text) = get(&s, chat);
    assert_error(got, &text, 405);

    s.assert_alive();
    assert_eq!(get(&s, "/health").0, 200);
    // And it still generates.
    post_json(&s, chat, &chat_body("still there?", json!({})));
    // Every refused generation request counted once; the routing errors
    // (404, 405) never reached a generation endpoint.
    assert_eq!(
        metric(&s, "rocmforge_requests_failed_total"),
        cases.len() as u64 + 7
    );
}

/// A slot's share of the context (`-c` split over the 4 slots, as
/// llama-server splits it) bounds the prompt and the reply together:
/// without max_tokens a reply stops when both fill it, not a token past it.
#[test]
fn the_context_bounds_prompt_and_reply_together() {
    let s = Server::start(&["-c", "256"]);
    let reply = post_json(
        &s,
        "/v1/completions",
        &json!({"prompt": "The", "temperature": 0}),
    );
    let total = reply["usage"]["total_tokens"].as_u64().unwrap();
    assert!(total <= 64, "{reply}");
    if reply["choices"][0]["finish_reason"] == "length" {
        assert_eq!(total, 64, "{reply}");
    }
    // And a max_tokens of exactly the room left is accepted.
    let prompt = reply["usage"]["prompt_tokens"].as_u64().unwrap();
    let body = json!({"prompt": "The", "temperature": 0, "max_tokens": 64 - prompt});
    let exact = post_json(&s, "/v1/completions", &body);
    assert_eq!(
        exact["usage"]["total_tokens"],
        reply["usage"]["total_tokens"]
    );
}

#[test]
fn api_key_guards_the_api() {
    let s = Server::start(&["--api-key", "sesame"]);
    let body = chat_body("hi", json!({"max_tokens": 2})).to_string();
    let url = s.url("/v1/chat/completions");
    let (status, text) = send(agent().post(&url), Some(&body));
    assert_eq!(
        assert_error(status, &text, 401)["type"],
        "authentication_error"
    );
    let (status, text) = send(
        agent().post(&url).set("Authorization", "Bearer open"),
        Some(&body),
    );
    assert_error(status, &text, 401);
    let (status, text) = send(agent().get(&s.url("/v1/models")), None);
    assert_error(status, &text, 401);
    let (status, text) = send(
        agent().post(&url).set("Authorization", "Bearer sesame"),
        Some(&body),
    );
    assert_eq!(status, 200, "{text}");
    // The scheme's name in any case (RFC 7235).
    let (status, text) = send(
        agent().post(&url).set("Authorization", "bearer sesame"),
        Some(&body),
    );
    assert_eq!(status, 200, "{text}");
    // Without the key a wrong method is 401 too; with it, 405.
    let (status, text) = send(agent().get(&url), None);
    assert_error(status, &text, 401);
    let (status, text) = send(
        agent().get(&url).set("Authorization", "Bearer sesame"),
        None,
    );
    assert_error(status, &text, 405);
    // Health checks and scrapes need no key.
    assert_eq!(get(&s, "/health").0, 200);
    assert_eq!(get(&s, "/metrics").0, 200);
    assert!(!s.stderr.lock().unwrap().contains("warning"));
}

/// A chat that shares a long system prompt with an earlier one reads only
/// what follows it (`usage.prompt_tokens_details.cached_tokens`), and
/// answers as it does from an empty cache (`cache_prompt: false`), to the
/// byte.
#[test]
fn a_shared_system_prompt_is_read_once() {
    // 2048 tokens a slot.
    let s = Server::start(&["-c", "8192"]);
    let system: String = (0..120)
        .map(|i| format!("Rule {i}: answer briefly and well. "))
        .collect();
    let body = |question: &str, cache: bool| {
        json!({
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ],
            "temperature": 0,
            "max_tokens": 8,
            "cache_prompt": cache,
        })
    };
    let first = post_json(&s, "/v1/chat/completions", &body("What is rust?", true));
    let prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt >= 1000,
        "a system prompt of {prompt} tokens is too short"
    );
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let second = post_json(&s, "/v1/chat/completions", &body("And zinc?", true));
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    let second_prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    // All but the question's few tokens and the turn markers after them.
    assert!(
        cached + 24 >= second_prompt && cached < second_prompt,
        "{cached} of {second_prompt} prompt tokens from the cache"
    );
    assert!(metric(&s, "rocmforge_prompt_tokens_cached_total") >= cached);
    let uncached = post_json(&s, "/v1/chat/completions", &body("And zinc?", false));
    assert_eq!(
        uncached["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{uncached}"
    );
    assert_eq!(
        uncached["choices"][0]["message"]["content"], second["choices"][0]["message"]["content"],
        "a reply from the cache differs from the reply without it"
    );
}

/// Requests at once are batched: the slots fill, and the steps hold more
/// than one token on average.
#[test]
fn concurrent_requests_share_steps() {
    let s = Server::start(&["-np", "4"]);
    assert_eq!(metric(&s, "rocmforge_slots"), 4);
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let base = s.base.clone();
            std::thread::spawn(move || {
                timed_stream(&base, &format!("Question {i} about the weather."), 48).1
            })
        })
        .collect();
    let generated: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(generated > 4, "{generated}");
    let steps = metric(&s, "rocmforge_batch_steps_total");
    let tokens = metric(&s, "rocmforge_batch_tokens_total");
    assert!(
        steps > 0 && tokens > 2 * steps,
        "{tokens} tokens in {steps} steps"
    );
    assert_eq!(metric(&s, "rocmforge_slots_busy"), 0);
    assert_eq!(metric(&s, "rocmforge_requests_running"), 0);
}

/// `response_format` json_schema: 100 replies sampled at temperature 1
/// (eight clients at once) are JSON that the schema accepts, whole and
/// streamed; json_object replies are objects; llama-server's GBNF
/// `grammar` is followed; a schema or grammar that cannot be compiled is
/// a 400 in OpenAI's shape, naming the field.
#[test]
fn structured_output_follows_its_schema_or_grammar() {
    let s = Server::start(&["-np", "8", "-c", "4096"]);
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "pet": {"enum": ["cat", "dog", "none"]},
        },
        "required": ["name", "age", "pet"],
        "additionalProperties": false,
    });
    let format = json!({"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}});
    let valid = |text: &str| {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let o = v
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {text}"));
        assert_eq!(o.len(), 3, "{text}");
        assert!(
            o["name"].as_str().is_some_and(|n| n.chars().count() <= 10),
            "{text}"
        );
        assert!(o["age"].as_u64().is_some_and(|a| a <= 130), "{text}");
        assert!(
            ["cat", "dog", "none"].contains(&o["pet"].as_str().unwrap()),
            "{text}"
        );
    };
    let replies: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|c| {
                let (s, format) = (&s, &format);
                scope.spawn(move || {
                    (0..13)
                        .map(|r| {
                            let body = chat_body(
                                &format!("Describe person {c}-{r}."),
                                json!({"temperature": 1.0, "seed": c * 100 + r, "max_tokens": 200, "response_format": format}),
                            );
                            let v = post_json(s, "/v1/chat/completions", &body);
                            assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
                            v["choices"][0]["message"]["content"].as_str().unwrap().to_string()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(replies.len() >= 100);
    for r in &replies {
        valid(r);
    }
    // Greedy, whole and streamed.
    let body = chat_body(
        "Who?",
        json!({"max_tokens": 200, "response_format": format}),
    );
    let whole = post_json(&s, "/v1/chat/completions", &body);
    let text = whole["choices"][0]["message"]["content"].as_str().unwrap();
    valid(text);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (stream_text, _, _) = chat_stream_text(&stream(&s, "/v1/chat/completions", &streamed));
    assert_eq!(stream_text, text);
    // Any JSON object.
    let object = post_json(
        &s,
        "/v1/chat/completions",
        &chat_body(
            "Anything.",
            json!({"max_tokens": 60, "response_format": {"type": "json_object"}}),
        ),
    );
    let text = object["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with('{'), "{text}");
    if object["choices"][0]["finish_reason"] == "stop" {
        assert!(
            serde_json::from_str::<Value>(text).unwrap().is_object(),
            "{text}"
        );
    }
    // llama-server's GBNF grammar, on a completion.
    let answer = post_json(
        &s,
        "/v1/completions",
        &json!({"prompt": "Is it?", "max_tokens": 10, "grammar": "root ::= (\"yes\" | \"no\") \".\""}),
    );
    let text = answer["choices"][0]["text"].as_str().unwrap();
    assert!(text == "yes." || text == "no.", "{text:?}");
    // What cannot be compiled.
    for (body, param) in [
        (
            chat_body(
                "x",
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "no-such-type"}}}}),
            ),
            "response_format",
        ),
        (
            chat_body("x", json!({"response_format": {"type": "yaml"}})),
            "response_format",
        ),
        (
            chat_body("x", json!({"response_format": {"type": "json_schema"}})),
            "response_format",
        ),
        (
            chat_body("x", json!({"grammar": "root ::= [a-z"})),
            "grammar",
        ),
    ] {
        let (code, text) = post(&s, "/v1/chat/completions", &body.to_string());
        let e = assert_error(code, &text, 400);
        assert_eq!(e["param"], param, "{text}");
        assert_eq!(e["type"], "invalid_request_error", "{text}");
    }
    // And a bad schema on a stream is refused before the stream starts.
    let mut bad = chat_body(
        "x",
        json!({"response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "no-such-type"}}}}),
    );
    bad["stream"] = json!(true);
    let (code, text) = post(&s, "/v1/chat/completions", &bad.to_string());
    assert_error(code, &text, 400);
}

/// Runs one of testdata/server's `openai` client scripts against `s`; its
/// JSON line, or `None` where the client cannot run and may be skipped.
fn openai_script(s: &Server, script: &str) -> Option<Value> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/server")
        .join(script);
    let out = match std::process::Command::new("python3")
        .arg(&script)
        .args([&s.base, MODEL_ID])
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(!openai_required(), "python3 cannot run: {e}");
            eprintln!("skipped: python3 cannot run: {e}");
            return None;
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        assert!(
            !openai_required(),
            "the openai package is not installed (CI or ROCMFORGE_REQUIRE_OPENAI=1): {err}"
        );
        eprintln!("skipped: the openai Python package is not installed");
        return None;
    }
    assert!(out.status.success(), "openai client failed: {err}");
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// The tools of the round trips (with descriptions: gpt-oss's template
/// needs them).
fn weather_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "description": "The time in a zone.", "parameters": {
            "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"], "additionalProperties": false}}},
    ])
}

fn ask_weather(choice: Value) -> Value {
    chat_body(
        "Weather in Oslo?",
        json!({"tools": weather_tools(), "tool_choice": choice, "max_tokens": 80}),
    )
}

/// A server on one of the test templates.
fn start_with_template(file: &str) -> Server {
    let template = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/chat-templates")
        .join(file);
    Server::start(&["--chat-template-file", template.to_str().unwrap()])
}

/// `tools` with `tool_choice` required and named give a call of the tool,
/// whose arguments follow its schema, whole and streamed; the call and its
/// result sent back render into the next turn, which answers.
fn calls_round_trip(s: &Server) {
    let (tools, ask) = (weather_tools(), ask_weather);
    let r = post_json(s, "/v1/chat/completions", &ask(json!("required")));
    let choice = &r["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{r}");
    assert!(choice["message"]["content"].is_null(), "{r}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    let name = call["function"]["name"].as_str().unwrap();
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    match name {
        "get_weather" => assert!(
            args["city"].as_str().unwrap().chars().count() <= 20,
            "{args}"
        ),
        "get_time" => assert!(args["zone"] == "UTC" || args["zone"] == "CET", "{args}"),
        other => panic!("called {other}"),
    }
    // Named: that function.
    let named = post_json(
        s,
        "/v1/chat/completions",
        &ask(json!({"type": "function", "function": {"name": "get_time"}})),
    );
    assert_eq!(
        named["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "get_time"
    );
    // Streamed: the call comes as a delta, and the stream ends with tool_calls.
    let mut streamed = ask(json!("required"));
    streamed["stream"] = json!(true);
    let chunks = chunks(&stream(s, "/v1/chat/completions", &streamed));
    let delta = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned())
        .expect("a tool_calls delta");
    assert_eq!(
        delta[0]["function"], call["function"],
        "greedy: the same call"
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    // The call and its result in the conversation: the next turn answers.
    let body = json!({
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "{\"celsius\": 21}"},
        ],
        "tools": tools, "temperature": 0, "max_tokens": 8,
    });
    let answer = post_json(s, "/v1/chat/completions", &body);
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    // The tool's result is in the prompt the template rendered.
    assert!(
        answer["usage"]["prompt_tokens"].as_u64().unwrap()
            > r["usage"]["prompt_tokens"].as_u64().unwrap(),
        "{answer}"
    );
}

/// Qwen3's template (Hermes calls): the round trip; what cannot be
/// honoured is a 400; the official client's round trip; a template that
/// writes no calls cannot be made to.
#[test]
fn tool_calls_round_trip() {
    let s = start_with_template("qwen3.jinja");
    calls_round_trip(&s);
    let ask = ask_weather;
    // What cannot be honoured.
    for (body, param) in [
        (
            ask(json!({"type": "function", "function": {"name": "nope"}})),
            "tool_choice",
        ),
        (ask(json!("sometimes")), "tool_choice"),
        (
            chat_body("x", json!({"tools": [{"type": "retrieval"}]})),
            "tools",
        ),
        (
            chat_body("x", json!({"tool_choice": "required"})),
            "tool_choice",
        ),
    ] {
        let (code, text) = post(&s, "/v1/chat/completions", &body.to_string());
        assert_eq!(assert_error(code, &text, 400)["param"], param, "{text}");
    }
    // The official client, the whole round trip.
    if let Some(got) = openai_script(&s, "openai_tools.py") {
        assert_eq!(got["finish_reason"], "tool_calls", "{got}");
        assert_eq!(got["name"], "get_weather", "{got}");
        assert!(got["arguments"]["city"].is_string(), "{got}");
        assert!(got["content"].is_null(), "{got}");
        assert_eq!(got["answer_calls"], 0, "{got}");
        assert!(
            got["answer_finish"] == "stop" || got["answer_finish"] == "length",
            "{got}"
        );
        assert!(got["answer"].is_string(), "{got}");
        assert_eq!(got["stream_finish"], "tool_calls", "{got}");
        assert_eq!(
            got["stream_calls"][0]["arguments"], got["first_arguments"],
            "{got}"
        );
    }
    // A template that writes no calls cannot be made to.
    drop(s);
    let plain = Server::start(&[]);
    let (code, text) = post(
        &plain,
        "/v1/chat/completions",
        &ask(json!("required")).to_string(),
    );
    assert!(
        assert_error(code, &text, 400)["message"]
            .as_str()
            .unwrap()
            .contains("writes no tool calls"),
        "{text}"
    );
}

/// gpt-oss's template (harmony calls: a message to `functions.NAME` whose
/// body is the arguments) on the Qwen3 fixture, whose vocabulary spells
/// the harmony markers out of text pieces: the same round trip, the call
/// read back out of the reply and rendered into the next turn.
#[test]
fn harmony_tool_calls_round_trip() {
    let s = start_with_template("gpt-oss.jinja");
    calls_round_trip(&s);
}

/// A reply's reasoning is `reasoning_content` and the rest `content`,
/// whole and streamed alike (no marker in either), in gpt-oss's harmony
/// channels, in Qwen3's `<think>` block, and after a generation prompt
/// that opens the block itself (DeepSeek-R1's way: the reply only closes
/// it); `--reasoning-format none` returns the text as written. The replies
/// are made so by a grammar (the fixture's weights are random).
#[test]
fn reasoning_is_split_from_content() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/chat-templates");
    let opening = common::scratch_dir("think-opened").join("opened.jinja");
    std::fs::write(
        &opening,
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         {% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}",
    )
    .unwrap();
    let cases = [
        (
            dir.join("gpt-oss.jinja"),
            "<|channel|>analysis<|message|>",
            "<|end|><|start|>assistant<|channel|>final<|message|>",
        ),
        (dir.join("qwen3.jinja"), "<think>", "</think>"),
        (opening, "", "</think>"),
    ];
    for (template, open, close) in cases {
        let file = template.file_name().unwrap().to_str().unwrap().to_owned();
        let opened = if open.is_empty() {
            String::new()
        } else {
            format!("{open:?}")
        };
        let grammar = format!("root ::= {opened} [a-z]{{1,6}} {close:?} [a-z]{{1,6}}");
        let body = chat_body("Hi", json!({"grammar": grammar, "max_tokens": 60}));
        let s = Server::start(&["--chat-template-file", template.to_str().unwrap()]);
        let r = post_json(&s, "/v1/chat/completions", &body);
        let message = &r["choices"][0]["message"];
        let reasoning = message["reasoning_content"].as_str().expect("reasoning");
        let content = message["content"].as_str().expect("content");
        for part in [reasoning, content] {
            assert!(
                !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase()),
                "{file}: {r}"
            );
        }
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let chunks = chunks(&stream(&s, "/v1/chat/completions", &streamed));
        let joined = |field: &str| -> String {
            chunks
                .iter()
                .filter_map(|c| c["choices"][0]["delta"][field].as_str())
                .collect()
        };
        assert_eq!(
            joined("reasoning_content"),
            reasoning,
            "{file}: greedy, the same split"
        );
        assert_eq!(joined("content"), content, "{file}");
        drop(s);
        let raw = Server::start(&[
            "--chat-template-file",
            template.to_str().unwrap(),
            "--reasoning-format",
            "none",
        ]);
        let r = post_json(&raw, "/v1/chat/completions", &body);
        let message = &r["choices"][0]["message"];
        assert!(message["reasoning_content"].is_null(), "{file}: {r}");
        assert_eq!(
            message["content"],
            format!("{open}{reasoning}{close}{content}"),
            "{file}: the reply as written"
        );
    }
}

/// Every interface and no key: the server says so once.
#[test]
fn an_open_server_warns() {
    let mut s = Server::start(&["--host", "0.0.0.0"]);
    s.assert_alive();
    let log = s.stderr.lock().unwrap().clone();
    assert_eq!(log.matches("without --api-key").count(), 1, "{log}");
}

fn metric(s: &Server, name: &str) -> u64 {
    let (_, m) = get(s, "/metrics");
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap()
}

#[test]
fn disconnecting_client_stops_its_generation() {
    // 2048 tokens a slot.
    let s = Server::start(&["-c", "8192"]);
    // No max_tokens: the reply runs until the model stops or the context
    // is full. Undisturbed, greedy, it is this long:
    let body = json!({"prompt": "The", "temperature": 0});
    let full = post_json(&s, "/v1/completions", &body);
    let full = full["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(full >= 500, "a reply of {full} tokens is too short to cut");
    assert_eq!(metric(&s, "rocmforge_generated_tokens_total"), full);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = agent()
        .post(&s.url("/v1/completions"))
        .send_string(&streamed.to_string())
        .unwrap();
    let mut lines = BufReader::new(r.into_reader()).lines();
    let mut data = 0;
    while data < 3 {
        let line = lines.next().unwrap().unwrap();
        data += line.starts_with("data: ") as usize;
    }
    drop(lines);
    // The worker notices at its next send; then nothing more is generated.
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&s, "rocmforge_requests_running") != 0 {
        assert!(Instant::now() < deadline, "generation did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    let cut = metric(&s, "rocmforge_generated_tokens_total") - full;
    assert!(
        cut < full / 2,
        "{cut} of {full} tokens generated after the client left"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(metric(&s, "rocmforge_generated_tokens_total"), full + cut);
    assert_eq!(metric(&s, "rocmforge_requests_cancelled_total"), 1);
    // The model is free for the next client.
    post_json(
        &s,
        "/v1/completions",
        &json!({"prompt": "The", "max_tokens": 3}),
    );
}

/// Whether a missing tool fails the test: in CI, or when asked.
fn openai_required() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty())
        || std::env::var("ROCMFORGE_REQUIRE_OPENAI").as_deref() == Ok("1")
}

#[test]
fn official_openai_client_streams_a_chat() {
    let s = Server::start(&[]);
    let Some(got) = openai_script(&s, "openai_stream.py") else {
        return;
    };
    let whole = post_json(
        &s,
        "/v1/chat/completions",
        &json!({"model": MODEL_ID, "messages": [{"role": "user", "content": "Say hello."}],
                "max_tokens": 12, "temperature": 0}),
    );
    assert_eq!(
        got["text"], whole["choices"][0]["message"]["content"],
        "{got}"
    );
    assert_eq!(got["roles"], json!(["assistant"]));
    assert_eq!(got["finish_reason"], whole["choices"][0]["finish_reason"]);
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(got["usage"][k], whole["usage"][k], "{got}");
    }
    assert!(got["chunks"].as_u64().unwrap() >= 3, "{got}");
    eprintln!("openai {} streamed {}", got["version"], got["chunks"]);
}

/// One streamed chat: its text and how long the whole reply took.
fn timed_stream(base: &str, content: &str, max_tokens: u64) -> (String, u64, Duration) {
    let t = Instant::now();
    let r = agent()
        .post(&format!("{base}/v1/chat/completions"))
        .send_string(
            &chat_body(content, json!({"max_tokens": max_tokens, "stream": true})).to_string(),
        )
        .unwrap();
    let data = sse_data(r.into_reader());
    let (text, _, usage) = chat_stream_text(&data);
    let (_, completion) = assert_usage(&usage, max_tokens);
    (text, completion, t.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[test]
fn thirty_two_concurrent_streams_lose_and_mix_nothing() {
    const CLIENTS: usize = 32;
    const MAX_TOKENS: u64 = 24;
    // Eight slots batched into each step, 24 clients queued behind them.
    let s = Server::start(&["-np", "8"]);
    let prompts: Vec<String> = (0..4)
        .map(|i| format!("Prompt number {i}: write about topic {}.", i * 7))
        .collect();
    // Each prompt's reply alone, one request at a time.
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| timed_stream(&s.base, p, MAX_TOKENS).0)
        .collect();
    assert!(
        alone.windows(2).any(|w| w[0] != w[1]),
        "the prompts must give different replies for mixing to show"
    );

    for same_prompt in [true, false] {
        let start = Instant::now();
        let handles: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let base = s.base.clone();
                let which = if same_prompt { 0 } else { i % prompts.len() };
                let prompt = prompts[which].clone();
                std::thread::spawn(move || (which, timed_stream(&base, &prompt, MAX_TOKENS)))
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let wall = start.elapsed();
        assert_eq!(results.len(), CLIENTS);
        let mut latencies = Vec::new();
        let mut tokens = 0;
        for (which, (text, completion, latency)) in &results {
            assert_eq!(
                text, &alone[*which],
                "client of prompt {which} got another reply"
            );
            tokens += completion;
            latencies.push(*latency);
        }
        latencies.sort();
        eprintln!(
            "load ({}): {CLIENTS} clients, {tokens} tokens in {:.2} s = {:.1} tokens/s, {:.2} requests/s; latency p50 {:.2} s, p99 {:.2} s",
            if same_prompt { "same prompt" } else { "4 prompts" },
            wall.as_secs_f64(),
            tokens as f64 / wall.as_secs_f64(),
            CLIENTS as f64 / wall.as_secs_f64(),
            percentile(&latencies, 0.5).as_secs_f64(),
            percentile(&latencies, 0.99).as_secs_f64(),
        );
    }
    assert_eq!(metric(&s, "rocmforge_queue_length"), 0);
}

/// Turn markers a client writes in a message are tokenized as text (each
/// several tokens), unless `--special-in-content` asks for llama-server's
/// behaviour (one control token each).
#[test]
fn message_content_cannot_forge_turns() {
    let prompt_tokens = |s: &Server, content: &str| {
        let reply = post_json(
            s,
            "/v1/chat/completions",
            &chat_body(content, json!({"max_tokens": 1})),
        );
        reply["usage"]["prompt_tokens"].as_u64().unwrap()
    };
    let markers = "<|im_start|>".repeat(64);
    let s = Server::start(&[]);
    let (plain, with_markers) = (prompt_tokens(&s, "x"), prompt_tokens(&s, &markers));
    assert!(
        with_markers >= plain + 3 * 64,
        "{with_markers} prompt tokens with 64 markers, {plain} without"
    );
    drop(s);
    let s = Server::start(&["--special-in-content"]);
    let (plain, with_markers) = (prompt_tokens(&s, "x"), prompt_tokens(&s, &markers));
    assert_eq!(with_markers, plain + 63);
}

/// A raw connection to the server (for requests a client library will not
/// send: slow, partial or lying about their length), with a read timeout
/// so a test never hangs on it.
fn raw(s: &Server) -> std::net::TcpStream {
    let addr = s.base.trim_start_matches("http://");
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// The status line's code and the rest of what the server sent before it
/// closed the connection or went quiet; None when it closed without an
/// answer.
fn response(stream: &mut std::net::TcpStream) -> Option<(u16, String)> {
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => break,
        }
        if text.contains("\r\n\r\n") && text.contains("\"error\"") && text.ends_with('}') {
            break;
        }
    }
    let code = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    Some((code, text))
}

fn post_head(path: &str, length: u64) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// Slow and oversized requests are cut off or refused at once: headers not
/// finished in time close the connection, a body not finished in time gets
/// 408, a declared length past the limit 413 before any body, and a normal
/// client is answered throughout.
#[test]
fn slow_and_oversized_requests_are_cut_off() {
    use std::io::Write;
    let mut s = Server::start(&["--header-timeout", "1", "--body-timeout", "1"]);
    // Headers a byte at a time, never finished.
    let mut slowloris = raw(&s);
    let started = Instant::now();
    slowloris
        .write_all(b"POST /v1/completions HTTP/1.1\r\nho")
        .unwrap();
    let mut buf = [0u8; 64];
    let closed = loop {
        std::thread::sleep(Duration::from_millis(300));
        if slowloris.write_all(b"s").is_err() {
            break true;
        }
        slowloris
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        if slowloris.read(&mut buf).is_ok() {
            break true; // an answer or the end of the stream
        }
        if started.elapsed() > Duration::from_secs(10) {
            break false;
        }
    };
    assert!(
        closed,
        "a connection sending headers for 10 s was kept open"
    );
    // A body that stops half way.
    let mut slow_body = raw(&s);
    let body = r#"{"prompt": "hi", "max_tokens": 1}"#;
    let head = post_head("/v1/completions", body.len() as u64);
    slow_body.write_all(head.as_bytes()).unwrap();
    slow_body.write_all(&body.as_bytes()[..5]).unwrap();
    let (code, text) = response(&mut slow_body).unwrap();
    assert_eq!(code, 408, "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    // A declared terabyte: refused before any of it is sent.
    let mut liar = raw(&s);
    liar.write_all(post_head("/v1/completions", 1_000_000_000_000).as_bytes())
        .unwrap();
    let (code, text) = response(&mut liar).unwrap();
    assert_eq!(code, 413, "{text}");
    s.assert_alive();
    post_json(
        &s,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2}),
    );
}

/// Connections, bytes being received and queued requests are capped: past
/// each cap the server answers 503 with Retry-After at once.
#[test]
fn connections_bodies_and_the_queue_are_capped() {
    use std::io::Write;
    let mut s = Server::start(&[
        "--max-connections",
        "3",
        "--max-buffered-mib",
        "1",
        "--body-timeout",
        "2",
    ]);
    // Bodies: two declaring 1 MiB each and sending 0.75 MiB of it. The 1 MiB
    // of bodies being received holds one: whichever the server reads
    // second is refused at once (503), the other runs out of time (408).
    let part = vec![b' '; 3 << 18];
    let mut bodies = [raw(&s), raw(&s)];
    for b in &mut bodies {
        b.write_all(post_head("/v1/completions", 1 << 20).as_bytes())
            .unwrap();
        let _ = b.write_all(&part);
    }
    let mut answers: Vec<(u16, String)> = bodies.iter_mut().map(|b| response(b).unwrap()).collect();
    answers.sort();
    assert_eq!(
        answers.iter().map(|a| a.0).collect::<Vec<_>>(),
        [408, 503],
        "{answers:?}"
    );
    assert!(
        answers[1].1.to_ascii_lowercase().contains("retry-after: 1"),
        "{answers:?}"
    );
    drop(bodies);
    // Connections: three idle ones fill the cap; a fourth is answered 503
    // and closed.
    let idle = [raw(&s), raw(&s), raw(&s)];
    std::thread::sleep(Duration::from_millis(300));
    let mut fourth = raw(&s);
    let (code, text) = response(&mut fourth).unwrap();
    assert_eq!(code, 503, "{text}");
    drop((idle, fourth));
    s.assert_alive();
    drop(s);
    // The queue (a server of its own: each metric read above would take a
    // connection of the three): one request running, one waiting; a third
    // is refused.
    let mut s = Server::start(&["-c", "2048", "-np", "1", "--max-queue", "1"]);
    let long = json!({"prompt": "The", "temperature": 0, "max_tokens": 1500});
    let base = s.base.clone();
    let running = std::thread::spawn({
        let (base, body) = (base.clone(), long.to_string());
        move || send(agent().post(&format!("{base}/v1/completions")), Some(&body))
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&s, "rocmforge_requests_running") != 1 {
        assert!(Instant::now() < deadline, "the long request did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let waiting = std::thread::spawn({
        let body = json!({"prompt": "The", "max_tokens": 1}).to_string();
        move || send(agent().post(&format!("{base}/v1/completions")), Some(&body))
    });
    while metric(&s, "rocmforge_queue_length") != 1 {
        assert!(
            Instant::now() < deadline,
            "the second request was not queued"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, text) = post(&s, "/v1/completions", r#"{"prompt": "x", "max_tokens": 1}"#);
    assert_eq!(assert_error(code, &text, 503)["code"], "server_busy");
    assert_eq!(running.join().unwrap().0, 200);
    assert_eq!(waiting.join().unwrap().0, 200);
    s.assert_alive();
}

/// A client that gives up while its request waits is counted as
/// cancelled once the model reaches it, and nothing is generated for it.
#[test]
fn a_request_left_while_queued_counts_as_cancelled() {
    // One slot: the long request holds it while the second waits.
    let s = Server::start(&["-c", "2048", "-np", "1"]);
    let base = s.base.clone();
    let body = json!({"prompt": "The", "temperature": 0, "max_tokens": 800}).to_string();
    let running = std::thread::spawn(move || {
        send(agent().post(&format!("{base}/v1/completions")), Some(&body))
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&s, "rocmforge_requests_running") != 1 {
        assert!(Instant::now() < deadline, "the long request did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let impatient = ureq::AgentBuilder::new()
        .timeout(Duration::from_millis(300))
        .build();
    let r = impatient
        .post(&s.url("/v1/completions"))
        .send_string(r#"{"prompt": "x", "max_tokens": 5}"#);
    assert!(r.is_err(), "answered while the model was busy");
    let (status, text) = running.join().unwrap();
    assert_eq!(status, 200, "{text}");
    let generated: Value = serde_json::from_str(&text).unwrap();
    let generated = generated["usage"]["completion_tokens"].as_u64().unwrap();
    while metric(&s, "rocmforge_queue_length") != 0 {
        assert!(Instant::now() < deadline, "the queue did not drain");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(metric(&s, "rocmforge_requests_cancelled_total"), 1);
    assert_eq!(metric(&s, "rocmforge_generated_tokens_total"), generated);
}

/// The server's resident memory, from /proc (Linux).
fn rss_mib(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap()
        / 1024
}

/// 40 clients trickling 15 MiB bodies, 250 large requests at once and 6
/// slow-header connections, all together, at the default limits: the
/// server's memory stays under 300 MiB, `/health` answers within a second
/// throughout, and the excess is refused with 413, 408 or 503.
#[test]
fn hostile_load_stays_bounded() {
    use std::io::Write;
    let mut s = Server::start(&[]);
    let idle = rss_mib(&s);
    let base = s.base.clone();
    let addr = base.trim_start_matches("http://").to_owned();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let codes = Arc::new(Mutex::new(Vec::<u16>::new()));
    let mut threads = Vec::new();
    // Slow bodies: 15 MiB declared, 256 KiB every 100 ms.
    for _ in 0..40 {
        let (addr, stop, codes) = (addr.clone(), stop.clone(), codes.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let head = post_head("/v1/chat/completions", 15 << 20);
            if c.write_all(head.as_bytes()).is_err() {
                return;
            }
            let chunk = vec![b' '; 256 << 10];
            for _ in 0..60 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) || c.write_all(&chunk).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if let Some((code, _)) = response(&mut c) {
                codes.lock().unwrap().push(code);
            }
        }));
    }
    // Slow headers.
    let slowloris: Vec<_> = (0..6)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.write_all(b"POST /v1/completions HTTP/1.1\r\nhost")
                .unwrap();
            c
        })
        .collect();
    // Large requests, all at once: a chat of ~1000 KB each.
    let big = chat_body(&"word ".repeat(200_000), json!({"max_tokens": 1})).to_string();
    for _ in 0..250 {
        let (base, big, codes) = (base.clone(), big.clone(), codes.clone());
        threads.push(std::thread::spawn(move || {
            let a = ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(30))
                .build();
            let url = format!("{base}/v1/chat/completions");
            let code = match a.post(&url).send_string(&big) {
                Ok(r) => r.status(),
                Err(ureq::Error::Status(code, _)) => code,
                Err(_) => 0, // cut off: the test ended first
            };
            codes.lock().unwrap().push(code);
        }));
    }
    let (mut peak, mut slowest) = (0, Duration::ZERO);
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        peak = peak.max(rss_mib(&s));
        let t = Instant::now();
        assert_eq!(get(&s, "/health").0, 200);
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    peak = peak.max(rss_mib(&s));
    s.assert_alive();
    drop(s); // ends the requests still waiting
    drop(slowloris);
    for t in threads {
        t.join().unwrap();
    }
    let codes = codes.lock().unwrap();
    let refused = codes
        .iter()
        .filter(|&&c| [408, 413, 503].contains(&c))
        .count();
    println!(
        "RSS {idle} MiB idle, {peak} MiB at most; slowest /health {slowest:?}; {refused} of {} answers refused",
        codes.len()
    );
    assert!(peak < 300, "peak RSS {peak} MiB");
    assert!(slowest < Duration::from_secs(1), "/health took {slowest:?}");
    assert!(refused >= 100, "{codes:?}");
}

/// Mixed traffic for `ROCMFORGE_SOAK_SECS` seconds (60 unless set; the
/// 30-minute run is in docs/server.md): 8 clients sending whole and
/// streamed requests of 4 distinct greedy prompts, streams left early,
/// oversized and malformed bodies. Every finished reply must equal its
/// prompt's reply served alone, every bad request get its error, and the
/// server's memory stay under 300 MiB.
#[test]
fn soak_mixed_traffic() {
    let secs: u64 = std::env::var("ROCMFORGE_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let mut s = Server::start(&[]);
    let prompts = ["Once upon a time", "The capital of", "1, 2, 3,", "Hello"];
    let body = |p: &str, stream: bool| {
        json!({"prompt": p, "temperature": 0, "max_tokens": 24, "stream": stream}).to_string()
    };
    // Each prompt's reply served alone.
    let solo: Vec<String> = prompts
        .iter()
        .map(|p| {
            let r = post_json(
                &s,
                "/v1/completions",
                &serde_json::from_str(&body(p, false)).unwrap(),
            );
            r["choices"][0]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    let start_rss = rss_mib(&s);
    let until = Instant::now() + Duration::from_secs(secs);
    let tally = Arc::new(Mutex::new(std::collections::BTreeMap::<&str, u64>::new()));
    let count = |t: &Mutex<std::collections::BTreeMap<&'static str, u64>>, k: &'static str| {
        *t.lock().unwrap().entry(k).or_default() += 1;
    };
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let (base, solo, tally) = (s.base.clone(), solo.clone(), tally.clone());
            std::thread::spawn(move || {
                let url = format!("{base}/v1/completions");
                let mut i = c;
                while Instant::now() < until {
                    i += 7;
                    let k = i % prompts.len();
                    match i % 6 {
                        0 | 1 => {
                            let (code, text) =
                                send(agent().post(&url), Some(&body(prompts[k], false)));
                            assert_eq!(code, 200, "{text}");
                            let v: Value = serde_json::from_str(&text).unwrap();
                            assert_eq!(v["choices"][0]["text"], solo[k].as_str(), "mixed reply");
                            count(&tally, "whole");
                        }
                        2 | 3 => {
                            let r = agent()
                                .post(&url)
                                .send_string(&body(prompts[k], true))
                                .unwrap();
                            let mut text = String::new();
                            for line in BufReader::new(r.into_reader()).lines() {
                                let line = line.unwrap();
                                let Some(data) = line.strip_prefix("data: ") else {
                                    continue;
                                };
                                if data == "[DONE]" {
                                    break;
                                }
                                let v: Value = serde_json::from_str(data).unwrap();
                                text.push_str(v["choices"][0]["text"].as_str().unwrap_or(""));
                            }
                            assert_eq!(text, solo[k], "mixed stream");
                            count(&tally, "streamed");
                        }
                        4 => {
                            // Left after the first event.
                            let r = agent()
                                .post(&url)
                                .send_string(&body(prompts[k], true))
                                .unwrap();
                            let mut lines = BufReader::new(r.into_reader()).lines();
                            while let Some(Ok(l)) = lines.next() {
                                if l.starts_with("data: ") {
                                    break;
                                }
                            }
                            count(&tally, "left");
                        }
                        _ => {
                            let (bad, want) = if i % 12 == 5 {
                                ("{\"prompt\": ".to_string(), 400)
                            } else {
                                (format!("{{\"prompt\": \"{}\"}}", "a".repeat(2 << 20)), 413)
                            };
                            let (code, text) = send(agent().post(&url), Some(&bad));
                            assert_eq!(code, want, "{text}");
                            count(
                                &tally,
                                if want == 400 {
                                    "malformed"
                                } else {
                                    "oversized"
                                },
                            );
                        }
                    }
                }
            })
        })
        .collect();
    let mut peak = start_rss;
    while Instant::now() < until {
        peak = peak.max(rss_mib(&s));
        s.assert_alive();
        std::thread::sleep(Duration::from_millis(500));
    }
    for c in clients {
        c.join().unwrap();
    }
    let end_rss = rss_mib(&s);
    let served = metric(&s, "rocmforge_requests_total{endpoint=\"completions\"}");
    println!(
        "soak {secs} s: RSS {start_rss} MiB at start, {end_rss} at the end, {peak} at most; {served} requests; {:?}",
        tally.lock().unwrap()
    );
    assert!(
        peak.max(end_rss) < 300,
        "RSS reached {} MiB",
        peak.max(end_rss)
    );
    s.assert_alive();
}
