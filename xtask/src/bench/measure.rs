//! The timed runs, as llama-bench defines them: `ppN` evaluates one N-token
//! batch from an empty cache, `tgN` decodes N single tokens from an empty
//! cache; tokens are random ids, since throughput does not depend on them.

use std::sync::Arc;
use std::time::Instant;

use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::backend::Backend;
use rocmforge_core::model::Model;
use rocmforge_core::session::{Session, SessionOptions};

use super::llama_schema::now_rfc3339;
use super::report::TestResult;

#[derive(Clone, Debug)]
pub struct Plan {
    /// The ppN tests, in order; llama-bench's `-p 128,512`.
    pub n_prompts: Vec<usize>,
    /// The tgN tests, after the pp ones; `-n`.
    pub n_gens: Vec<usize>,
    pub repetitions: usize,
    /// Most prompt tokens per evaluation call (llama-bench's `-b`).
    pub n_batch: usize,
    /// Most tokens per computed step (llama-bench's `-ub`): the session's
    /// step size.
    pub n_ubatch: usize,
    /// llama-bench's `--n-cpu-moe`: the experts of the first N layers on
    /// the CPU (0: none).
    pub n_cpu_moe: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    Prompt(usize),
    Generate(usize),
}

impl Test {
    fn tokens(self) -> usize {
        match self {
            Test::Prompt(n) | Test::Generate(n) => n,
        }
    }

    fn result(self, n_threads: usize, samples_ns: Vec<u64>) -> TestResult {
        let (name, n_prompt, n_gen) = match self {
            Test::Prompt(n) => (format!("pp{n}"), n, 0),
            Test::Generate(n) => (format!("tg{n}"), 0, n),
        };
        TestResult::from_ns(name, n_prompt, n_gen, n_threads, samples_ns)
    }
}

impl Plan {
    /// The tests in llama-bench's order: every pp, then every tg; a size of
    /// 0 is no test.
    pub fn tests(&self) -> Vec<Test> {
        let pp = self.n_prompts.iter().map(|&n| Test::Prompt(n));
        let tg = self.n_gens.iter().map(|&n| Test::Generate(n));
        pp.chain(tg).filter(|t| t.tokens() > 0).collect()
    }

    /// One session serves every test: its context holds the longest prompt
    /// and the longest generation, and its steps are `-ub` tokens, as
    /// llama.cpp's micro-batches are (a remainder is cut into the session's
    /// power-of-two steps).
    fn session_options(&self) -> SessionOptions {
        let max_prompt = self.n_prompts.iter().copied().max().unwrap_or(0);
        let max_gen = self.n_gens.iter().copied().max().unwrap_or(0);
        SessionOptions {
            n_ctx: (max_prompt + max_gen).max(1),
            n_batch: self.n_ubatch.min(max_prompt).max(1),
            all_logits: false,
        }
    }
}

/// A loaded session, ready to time tests.
pub struct Runner {
    session: Session,
    tokens: TokenStream,
    repetitions: usize,
    n_batch: usize,
    n_threads: usize,
}

impl Runner {
    /// Loads `model` on `backend`; the error is the one-line reason.
    pub fn start(
        backend: Box<dyn Backend>,
        model: Arc<Model>,
        plan: &Plan,
        n_threads: usize,
    ) -> Result<Runner, String> {
        let n_vocab = model.config.n_vocab;
        let host = BackendOptions {
            threads: n_threads,
            ..BackendOptions::default()
        };
        let backend = registry::with_cpu_experts(backend, &model, plan.n_cpu_moe, &host)
            .map_err(|e| e.to_string())?;
        let session = Session::new(model, backend, plan.session_options(), &mut |_, _| {})
            .map_err(|e| e.to_string())?;
        Ok(Runner {
            session,
            tokens: TokenStream::new(n_vocab),
            repetitions: plan.repetitions,
            n_batch: plan.n_batch.max(1),
            n_threads,
        })
    }

    pub fn device(&self) -> String {
        self.session.backend().info().device
    }

    /// One untimed warm-up (first-touch page faults and lazy set-up belong
    /// to no run), then the timed repetitions.
    pub fn run(&mut self, test: Test) -> Result<TestResult, String> {
        let started = now_rfc3339();
        self.run_once(test)?;
        let mut samples_ns = Vec::with_capacity(self.repetitions);
        for _ in 0..self.repetitions {
            samples_ns.push(self.run_once(test)?);
        }
        Ok(TestResult {
            started,
            ..test.result(self.n_threads, samples_ns)
        })
    }

    /// One run from an empty cache; returns its nanoseconds. Token ids are
    /// drawn before the clock starts so the timing is the model's alone.
    fn run_once(&mut self, test: Test) -> Result<u64, String> {
        let session = &mut self.session;
        session.reset();
        let ids: Vec<u32> = (0..test.tokens()).map(|_| self.tokens.next_id()).collect();
        let start = Instant::now();
        match test {
            Test::Prompt(_) => {
                for piece in ids.chunks(self.n_batch) {
                    session.eval(piece).map_err(|e| e.to_string())?;
                }
            }
            Test::Generate(_) => {
                for id in &ids {
                    session
                        .eval(std::slice::from_ref(id))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        // At least 1 ns, so that a rate is always finite.
        Ok(u64::try_from(start.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1))
    }
}

/// Random token ids (xorshift64*): no dependency needed, and a fixed seed
/// makes two runs evaluate the same tokens.
pub struct TokenStream {
    state: u64,
    n_vocab: u64,
}

impl TokenStream {
    pub fn new(n_vocab: usize) -> TokenStream {
        TokenStream {
            state: 0x9e37_79b9_7f4a_7c15,
            n_vocab: n_vocab.max(1) as u64,
        }
    }

    pub fn next_id(&mut self) -> u32 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let r = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        // Vocabularies fit in u32 (GGUF token ids are u32), so this cannot truncate.
        ((r >> 32) % self.n_vocab) as u32
    }
}
