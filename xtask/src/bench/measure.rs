//! The timed runs, as llama-bench defines them: `ppN` evaluates one N-token
//! batch from an empty cache, `tgN` decodes N single tokens from an empty
//! cache; with a depth D (`pp512 @ d4096`), D untimed prompt tokens are
//! evaluated first, so the timed tokens attend to a cache of D positions.
//! Tokens are random ids, since throughput does not depend on them.

use std::sync::Arc;
use std::time::Instant;

use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::backend::Backend;
use rocmforge_core::model::Model;
use rocmforge_core::plan::KvTypes;
use rocmforge_core::session::{Session, SessionOptions};

use super::llama_schema::now_rfc3339;
use super::report::{test_name, TestResult};

#[derive(Clone, Debug)]
pub struct Plan {
    /// The ppN tests, in order; llama-bench's `-p 128,512`.
    pub n_prompts: Vec<usize>,
    /// The tgN tests, after the pp ones; `-n`.
    pub n_gens: Vec<usize>,
    /// Tokens in the cache before each test (llama-bench's `-d`): every pp
    /// and tg test runs at each depth, in this order; 0 is an empty cache.
    pub n_depths: Vec<usize>,
    pub repetitions: usize,
    /// Most prompt tokens per evaluation call (llama-bench's `-b`).
    pub n_batch: usize,
    /// Most tokens per computed step (llama-bench's `-ub`): the session's
    /// step size.
    pub n_ubatch: usize,
    /// llama-bench's `--n-cpu-moe`: the experts of the first N layers on
    /// the CPU (0: none).
    pub n_cpu_moe: usize,
    /// llama-bench's `-ctk` / `-ctv`.
    pub kv_types: KvTypes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One prompt of `n_tokens`, passed in `-b` pieces.
    Prompt,
    /// `n_tokens` single-token decode steps.
    Generate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Test {
    pub kind: Kind,
    pub n_tokens: usize,
    /// Untimed prompt tokens evaluated before the timed ones.
    pub n_depth: usize,
}

impl Test {
    pub fn prompt(n_tokens: usize, n_depth: usize) -> Test {
        Test {
            kind: Kind::Prompt,
            n_tokens,
            n_depth,
        }
    }

    pub fn generate(n_tokens: usize, n_depth: usize) -> Test {
        Test {
            kind: Kind::Generate,
            n_tokens,
            n_depth,
        }
    }

    /// Cache positions the test fills: its depth and its own tokens.
    pub fn positions(self) -> usize {
        self.n_depth.saturating_add(self.n_tokens)
    }

    fn prompt_gen(self) -> (usize, usize) {
        match self.kind {
            Kind::Prompt => (self.n_tokens, 0),
            Kind::Generate => (0, self.n_tokens),
        }
    }

    /// `pp512`, `tg128 @ d4096`: llama-bench's row name.
    pub fn name(self) -> String {
        let (n_prompt, n_gen) = self.prompt_gen();
        test_name(n_prompt, n_gen, self.n_depth)
    }

    fn result(self, n_threads: usize, samples_ns: Vec<u64>) -> TestResult {
        let (n_prompt, n_gen) = self.prompt_gen();
        // Rates count the timed tokens only, as llama-bench's do.
        TestResult {
            n_depth: self.n_depth,
            ..TestResult::from_ns(self.name(), n_prompt, n_gen, n_threads, samples_ns)
        }
    }
}

impl Plan {
    /// The tests in llama-bench's order: for each depth, every pp, then
    /// every tg; a size of 0 is no test.
    pub fn tests(&self) -> Vec<Test> {
        let mut tests = Vec::new();
        for &d in &self.n_depths {
            let pp = self.n_prompts.iter().map(|&n| Test::prompt(n, d));
            let tg = self.n_gens.iter().map(|&n| Test::generate(n, d));
            tests.extend(pp.chain(tg).filter(|t| t.n_tokens > 0));
        }
        tests
    }

    /// One session serves every test: its context holds the deepest depth,
    /// the longest prompt and the longest generation, and its steps are
    /// `-ub` tokens, as llama.cpp's micro-batches are (a remainder is cut
    /// into the session's power-of-two steps). A step is no longer than
    /// the longest prompt, so a prompt shorter than `-ub` is one step, as
    /// in llama.cpp; the depth is cut into steps of that size too (its
    /// filling is untimed), except in a tg-only plan, where the depth
    /// alone sets the step size so it is not filled one token at a time.
    pub(super) fn session_options(&self) -> SessionOptions {
        let max = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
        let (max_prompt, max_gen, max_depth) =
            (max(&self.n_prompts), max(&self.n_gens), max(&self.n_depths));
        SessionOptions {
            kv_types: self.kv_types,
            n_ctx: max_depth
                .saturating_add(max_prompt)
                .saturating_add(max_gen)
                .max(1),
            n_batch: self
                .n_ubatch
                .min(if max_prompt > 0 {
                    max_prompt
                } else {
                    max_depth
                })
                .max(1),
            all_logits: false,
            n_seq: 1,
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

    /// The kernel launches a decode step replays, on a backend that
    /// launches any.
    pub fn launches(&self) -> Option<usize> {
        self.session.step_launches(1)
    }

    /// Positions in the cache now.
    #[cfg(test)]
    pub fn n_past(&self) -> usize {
        self.session.n_past()
    }

    /// One untimed warm-up (first-touch page faults and lazy set-up belong
    /// to no run; it fills the depth too, so the cache positions the timed
    /// runs read are touched), then the timed repetitions.
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

    /// One run from an empty cache: the depth untimed, then the test
    /// timed; returns the timed nanoseconds. Token ids are drawn before the
    /// clock starts so the timing is the model's alone.
    ///
    /// The depth is evaluated again before every repetition (llama-bench
    /// clears its cache and refills the depth each repetition; newer
    /// builds restore a saved copy of the state instead). We cannot rewind:
    /// [`Session`] offers only `reset` (back to position 0), no truncation
    /// to a position, so filling once and rewinding to the depth is not
    /// available. Refilling costs untimed time only, and every repetition
    /// starts from the same state a real prompt of that length leaves.
    fn run_once(&mut self, test: Test) -> Result<u64, String> {
        let session = &mut self.session;
        session.reset();
        if test.n_depth > 0 {
            let depth: Vec<u32> = (0..test.n_depth).map(|_| self.tokens.next_id()).collect();
            for piece in depth.chunks(self.n_batch) {
                session.eval(piece).map_err(|e| depth_error(test, &e))?;
            }
        }
        let ids: Vec<u32> = (0..test.n_tokens).map(|_| self.tokens.next_id()).collect();
        let start = Instant::now();
        match test.kind {
            Kind::Prompt => {
                for piece in ids.chunks(self.n_batch) {
                    session.eval(piece).map_err(|e| e.to_string())?;
                }
            }
            Kind::Generate => {
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

/// A failure while filling the depth, saying so (the test's own tokens
/// have not started).
fn depth_error(test: Test, e: &impl std::fmt::Display) -> String {
    format!(
        "{}: filling the depth of {} tokens: {e}",
        test.name(),
        test.n_depth
    )
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
