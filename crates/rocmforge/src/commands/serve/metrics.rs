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
    /// Jobs the worker is running, one a busy slot.
    pub running: AtomicU64,
    /// Prompt tokens a slot's cache already held (not evaluated again).
    pub cached_prompt_tokens: AtomicU64,
    /// Slots (`-np`), and those answering a request now.
    pub slots: AtomicU64,
    pub slots_busy: AtomicU64,
    /// Batched steps evaluated, the tokens they held, and the last one's.
    pub steps: AtomicU64,
    pub step_tokens: AtomicU64,
    pub last_step_tokens: AtomicU64,
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }

    pub fn set(gauge: &AtomicU64, v: u64) {
        gauge.store(v, Ordering::Relaxed);
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
        family(
            "rocmforge_prompt_tokens_cached_total",
            "counter",
            "Prompt tokens found in a slot's cache and not evaluated again.",
            &[("", get(&self.cached_prompt_tokens))],
        );
        family(
            "rocmforge_slots",
            "gauge",
            "Slots: sequences the model runs at once (-np).",
            &[("", get(&self.slots))],
        );
        family(
            "rocmforge_slots_busy",
            "gauge",
            "Slots answering a request now.",
            &[("", get(&self.slots_busy))],
        );
        family(
            "rocmforge_batch_steps_total",
            "counter",
            "Batched steps evaluated (each holds the generating slots' next tokens and prompt chunks).",
            &[("", get(&self.steps))],
        );
        family(
            "rocmforge_batch_tokens_total",
            "counter",
            "Tokens the batched steps held; over rocmforge_batch_steps_total, the mean batch size.",
            &[("", get(&self.step_tokens))],
        );
        family(
            "rocmforge_batch_tokens_last",
            "gauge",
            "Tokens the last batched step held.",
            &[("", get(&self.last_step_tokens))],
        );
        s
    }
}
