//! Counters for `/metrics`, in Prometheus' text exposition format. Written
//! by hand: a handful of counters does not need a metrics crate.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Metrics {
    pub chat_requests: AtomicU64,
    pub completion_requests: AtomicU64,
    /// Requests answered with an error status.
    pub failed_requests: AtomicU64,
    /// Requests whose client left before the reply ended, waiting or
    /// mid-way.
    pub cancelled_requests: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Jobs waiting for the worker (not the one it is running).
    pub queued: AtomicU64,
    /// Jobs the worker is running: 0 or 1 while there is one slot.
    pub running: AtomicU64,
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }

    pub fn render(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut s = String::new();
        let mut family = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} {kind}");
            for (labels, v) in samples {
                let _ = writeln!(s, "{name}{labels} {v}");
            }
        };
        family(
            "rocmforge_requests_total",
            "counter",
            "Generation requests received, by endpoint.",
            &[
                (r#"{endpoint="chat_completions"}"#, get(&self.chat_requests)),
                (
                    r#"{endpoint="completions"}"#,
                    get(&self.completion_requests),
                ),
            ],
        );
        family(
            "rocmforge_requests_failed_total",
            "counter",
            "Generation requests answered with an error.",
            &[("", get(&self.failed_requests))],
        );
        family(
            "rocmforge_requests_cancelled_total",
            "counter",
            "Generation requests whose client left before the reply ended.",
            &[("", get(&self.cancelled_requests))],
        );
        family(
            "rocmforge_prompt_tokens_total",
            "counter",
            "Prompt tokens evaluated.",
            &[("", get(&self.prompt_tokens))],
        );
        family(
            "rocmforge_generated_tokens_total",
            "counter",
            "Tokens generated.",
            &[("", get(&self.generated_tokens))],
        );
        family(
            "rocmforge_queue_length",
            "gauge",
            "Requests waiting for the model.",
            &[("", get(&self.queued))],
        );
        family(
            "rocmforge_requests_running",
            "gauge",
            "Requests the model is answering now.",
            &[("", get(&self.running))],
        );
        s
    }
}
