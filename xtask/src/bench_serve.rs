//! `cargo xtask bench-serve`: load on `rocmforge serve` (and, with
//! `--vs-llama-server`, on llama-server with the same file and slots),
//! measured from the clients' side.
//!
//! For each client count the server starts on a free loopback port; that
//! many client threads each send `--requests` streaming completions one
//! after another (greedy, `-n` tokens each, a prompt of their own), and
//! the run prints the aggregate generated tokens/s, time to first token
//! (request sent to first text chunk) and whole-request latency, p50 and
//! p99. Then the prompt cache: two requests sharing a system prompt of
//! `--shared-prefix` words, and the second's time to first token against
//! the first's. Every loop is bounded (requests, tokens, read timeouts), so
//! the run stops by itself; servers are killed when it ends.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rocmforge_core::quant::QuantType;
use rocmforge_genmodel::presets::{self, Preset};
use serde_json::{json, Value};

use crate::bench::model_source;

#[derive(Debug, clap::Args)]
pub struct BenchServeArgs {
    /// GGUF model to serve (instead of a generated preset).
    #[arg(short, long, value_name = "PATH", conflicts_with_all = ["preset", "ty"])]
    model: Option<PathBuf>,
    /// Preset of the generated model, cached under target/models/.
    #[arg(long, value_name = "NAME", value_parser = presets::parse_preset,
          default_value = "qwen2-0.5b")]
    preset: &'static Preset,
    /// Weight type of the generated model.
    #[arg(long = "type", value_name = "TYPE", default_value = "Q4_0",
          value_parser = crate::bench::parse_weight_type)]
    ty: QuantType,
    /// `rocmforge serve`'s backend.
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// Threads of a CPU backend (and of llama-server).
    #[arg(short = 't', long, default_value_t = 2)]
    threads: usize,
    /// Slots of both servers (`--parallel`).
    #[arg(long = "parallel", default_value_t = 8)]
    parallel: usize,
    /// Total context of both servers, split over the slots.
    #[arg(short = 'c', long, default_value_t = 8192)]
    ctx_size: usize,
    /// Concurrent clients, comma separated: one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    clients: Vec<usize>,
    /// Requests each client sends, one after another.
    #[arg(short = 'r', long, default_value_t = 2)]
    requests: usize,
    /// Tokens each request generates at most.
    #[arg(short = 'n', long = "n-gen", default_value_t = 64)]
    n_gen: usize,
    /// Words of each request's own prompt.
    #[arg(long, default_value_t = 24)]
    prompt_words: usize,
    /// Words of the system prompt the prompt-cache run shares (0 skips it).
    #[arg(long, default_value_t = 600)]
    shared_prefix: usize,
    /// llama.cpp's llama-server, run with the same model, slots, context
    /// and threads.
    #[arg(long, value_name = "PATH")]
    vs_llama_server: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
enum ServeBenchError {
    #[error("{0}")]
    Bench(#[from] crate::bench::BenchError),
    #[error("cannot start {}: {source}", path.display())]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} did not start listening within {secs} s{log}")]
    NoListen {
        what: String,
        secs: u64,
        log: String,
    },
    #[error("{0}")]
    Request(String),
    #[error(
        "nothing to run: --clients needs counts of at least 1 and --requests and -n at least 1"
    )]
    Nothing,
}

pub fn main(a: &BenchServeArgs) -> ExitCode {
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(a: &BenchServeArgs) -> Result<(), ServeBenchError> {
    if a.clients.contains(&0) || a.clients.is_empty() || a.requests == 0 || a.n_gen == 0 {
        return Err(ServeBenchError::Nothing);
    }
    let model = match &a.model {
        Some(p) => p.clone(),
        None => model_source::generated_model(a.preset, a.ty)?,
    };
    let mut servers = vec![Kind::Ours(rocmforge_binary()?)];
    if let Some(p) = &a.vs_llama_server {
        servers.push(Kind::Llama(p.clone()));
    }
    println!(
        "| server | slots | clients | requests | prompt tokens | generated | wall | aggregate | TTFT p50 | TTFT p99 | latency p50 | latency p99 |"
    );
    println!(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut cache_lines = Vec::new();
    for kind in &servers {
        // A fresh server per client count (the prompts repeat across
        // counts, and a warm cache would answer them); the prompt cache's
        // line reuses the last.
        let mut last = None;
        for &clients in &a.clients {
            let server = Server::start(kind, &model, a)?;
            let r = load(&server.base, clients, a)?;
            println!(
                "| {} | {} | {clients} | {} | {:.0} | {} | {:.2} s | {:.1} tokens/s | {:.3} s | {:.3} s | {:.2} s | {:.2} s |",
                kind.name(),
                a.parallel,
                r.ttft.len(),
                r.mean_prompt,
                r.generated,
                r.wall.as_secs_f64(),
                r.generated as f64 / r.wall.as_secs_f64(),
                pct(&r.ttft, 0.5),
                pct(&r.ttft, 0.99),
                pct(&r.latency, 0.5),
                pct(&r.latency, 0.99),
            );
            last = Some(server);
        }
        if let (true, Some(server)) = (a.shared_prefix > 0, &last) {
            // Its chat prompts share no prefix with the load's completions.
            cache_lines.push(prompt_cache(kind, &server.base, a)?);
        }
    }
    for line in cache_lines {
        println!("{line}");
    }
    Ok(())
}

/// Which server a run starts.
#[derive(Debug, Clone)]
enum Kind {
    /// `rocmforge serve`, from this binary.
    Ours(PathBuf),
    Llama(PathBuf),
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Ours(_) => "rocmforge",
            Kind::Llama(_) => "llama-server",
        }
    }
}

/// A server on a free loopback port, killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(kind: &Kind, model: &Path, a: &BenchServeArgs) -> Result<Server, ServeBenchError> {
        let port = free_port()?;
        let (path, mut cmd) = match kind {
            Kind::Ours(path) => {
                let mut c = Command::new(path);
                c.arg("serve")
                    .args(["--backend", &a.backend])
                    .args(["--batch-size", "512"]);
                (path.clone(), c)
            }
            Kind::Llama(path) => {
                let mut c = Command::new(path);
                // Both servers read prompts in steps of 512 tokens.
                c.args(["-ub", "512", "-b", "512"]);
                (path.clone(), c)
            }
        };
        cmd.arg("-m")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", &a.ctx_size.to_string()])
            .args(["--parallel", &a.parallel.to_string()])
            .args(["-t", &a.threads.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| ServeBenchError::Spawn {
            path: path.clone(),
            source,
        })?;
        // Keep the server's log: it is the error when it never listens.
        let (tx, rx) = mpsc::channel::<String>();
        let stderr = child.stderr.take().expect("piped above");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let base = format!("http://127.0.0.1:{port}");
        let mut server = Server { child, base };
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut log = Vec::new();
        loop {
            while let Ok(l) = rx.try_recv() {
                log.push(l);
            }
            let healthy = ureq::get(&format!("{}/health", server.base))
                .timeout(Duration::from_secs(2))
                .call()
                .is_ok_and(|r| r.status() == 200);
            if healthy {
                // One short request first, so the first measured one pays
                // no one-time cost (a step size's first recording, lazy
                // set-up); it shares no prefix with the measured prompts.
                stream(&server.base, "warm up", None, 2)?;
                return Ok(server);
            }
            let exited = matches!(server.child.try_wait(), Ok(Some(_)));
            if Instant::now() > deadline || exited {
                let tail: Vec<String> = log.iter().rev().take(5).rev().cloned().collect();
                return Err(ServeBenchError::NoListen {
                    what: path.display().to_string(),
                    secs: 300,
                    log: if tail.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", tail.join(" / "))
                    },
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, ServeBenchError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| ServeBenchError::Request(format!("no free port: {e}")))
}

/// The `rocmforge` binary beside this one. Under cargo (`cargo xtask`,
/// which builds release) it is built first, a no-op when it is up to date,
/// so a changed server is never measured stale; a binary run on its own
/// (carried to another machine) takes the one beside it.
fn rocmforge_binary() -> Result<PathBuf, ServeBenchError> {
    let exe = std::env::current_exe()
        .map_err(|e| ServeBenchError::Request(format!("cannot find this program: {e}")))?;
    let path = exe.with_file_name(format!("rocmforge{}", std::env::consts::EXE_SUFFIX));
    if let Some(cargo) = std::env::var_os("CARGO") {
        let ok = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "--release",
                "-p",
                "rocmforge",
                "--bin",
                "rocmforge",
            ])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(ServeBenchError::Request(
                "`cargo build --release -p rocmforge` failed".into(),
            ));
        }
    }
    if !path.is_file() {
        return Err(ServeBenchError::Request(format!(
            "{} is missing (build it with `cargo build --release -p rocmforge`)",
            path.display()
        )));
    }
    Ok(path)
}

/// What one load run measured.
struct LoadResult {
    generated: u64,
    mean_prompt: f64,
    wall: Duration,
    ttft: Vec<Duration>,
    latency: Vec<Duration>,
}

/// One streamed completion's figures.
struct Timed {
    ttft: Duration,
    latency: Duration,
    prompt_tokens: u64,
    generated: u64,
}

const WORDS: &[&str] = &[
    "river", "stone", "light", "quiet", "market", "winter", "garden", "signal", "copper", "window",
    "harbor", "engine", "forest", "letter", "silver", "orange", "planet", "bridge", "candle",
    "valley",
];

/// A prompt of `n` words of its own for request `r` of client `c`.
fn prompt(c: usize, r: usize, n: usize) -> String {
    let mut s = format!("Client {c}, request {r}:");
    for i in 0..n {
        s.push(' ');
        s.push_str(WORDS[(c * 7 + r * 13 + i * 3) % WORDS.len()]);
    }
    s
}

fn load(base: &str, clients: usize, a: &BenchServeArgs) -> Result<LoadResult, ServeBenchError> {
    let start = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let base = base.to_string();
            let (requests, n, words) = (a.requests, a.n_gen, a.prompt_words);
            std::thread::spawn(move || {
                (0..requests)
                    .map(|r| stream(&base, &prompt(c, r, words), None, n))
                    .collect::<Result<Vec<_>, _>>()
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        let done = h
            .join()
            .map_err(|_| ServeBenchError::Request("a client thread panicked".into()))??;
        all.extend(done);
    }
    let wall = start.elapsed();
    let mut ttft: Vec<Duration> = all.iter().map(|t| t.ttft).collect();
    let mut latency: Vec<Duration> = all.iter().map(|t| t.latency).collect();
    ttft.sort();
    latency.sort();
    Ok(LoadResult {
        generated: all.iter().map(|t| t.generated).sum(),
        mean_prompt: all.iter().map(|t| t.prompt_tokens as f64).sum::<f64>() / all.len() as f64,
        wall,
        ttft,
        latency,
    })
}

/// The prompt cache: two chats with the same long system prompt, the
/// second's time to first token against the first's.
fn prompt_cache(kind: &Kind, base: &str, a: &BenchServeArgs) -> Result<String, ServeBenchError> {
    let system: String = (0..a.shared_prefix)
        .map(|i| WORDS[(i * 11) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ");
    let first = stream(base, "What is first?", Some(&system), 8)?;
    let second = stream(base, "And what is second?", Some(&system), 8)?;
    Ok(format!(
        "prompt cache ({}): a system prompt shared by two chats, {} prompt tokens: time to first token {:.3} s, then {:.3} s ({:.2}x)",
        kind.name(),
        first.prompt_tokens,
        first.ttft.as_secs_f64(),
        second.ttft.as_secs_f64(),
        second.ttft.as_secs_f64() / first.ttft.as_secs_f64()
    ))
}

/// One streamed request: a completion of `text`, or a chat of `text` after
/// `system`; greedy, `n` tokens at most.
fn stream(
    base: &str,
    text: &str,
    system: Option<&str>,
    n: usize,
) -> Result<Timed, ServeBenchError> {
    let (path, body) = match system {
        None => (
            "/v1/completions",
            json!({"prompt": text, "max_tokens": n, "temperature": 0, "stream": true,
                   "stream_options": {"include_usage": true}}),
        ),
        Some(s) => (
            "/v1/chat/completions",
            json!({"messages": [{"role": "system", "content": s}, {"role": "user", "content": text}],
                   "max_tokens": n, "temperature": 0, "stream": true,
                   "stream_options": {"include_usage": true}}),
        ),
    };
    let t = Instant::now();
    let r = ureq::post(&format!("{base}{path}"))
        .timeout(Duration::from_secs(600))
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
        .map_err(|e| ServeBenchError::Request(format!("{path}: {e}")))?;
    let mut ttft = None;
    let mut usage = Value::Null;
    let mut chunks = 0u64;
    for line in BufReader::new(r.into_reader()).lines() {
        let line = line.map_err(|e| ServeBenchError::Request(format!("{path}: {e}")))?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| ServeBenchError::Request(format!("{path}: a chunk is not JSON: {e}")))?;
        let choice = &v["choices"][0];
        let text = choice["text"]
            .as_str()
            .or_else(|| choice["delta"]["content"].as_str())
            .unwrap_or("");
        if !text.is_empty() {
            chunks += 1;
            ttft.get_or_insert(t.elapsed());
        }
        if v["usage"].is_object() {
            usage = v["usage"].clone();
        }
    }
    let latency = t.elapsed();
    Ok(Timed {
        ttft: ttft.unwrap_or(latency),
        latency,
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
        generated: usage["completion_tokens"].as_u64().unwrap_or(chunks),
    })
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64()
}
