//! The timed runs, as llama-bench defines them: `ppN` evaluates one N-token
//! batch from an empty cache, `tgN` decodes N single tokens from an empty
//! cache; tokens are random ids, since throughput does not depend on them.

use std::sync::Arc;
use std::time::Instant;

use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::model::Model;
use rocmforge_core::session::{Session, SessionOptions};

use super::report::TestResult;

#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub repetitions: usize,
    /// llama-bench's `--n-cpu-moe`: the experts of the first N layers on
    /// the CPU (0: none).
    pub n_cpu_moe: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Test {
    Prompt(usize),
    Generate(usize),
}

impl Test {
    fn tokens(self) -> usize {
        match self {
            Test::Prompt(n) | Test::Generate(n) => n,
        }
    }

    fn result(self, samples: Vec<f64>) -> TestResult {
        let (name, n_prompt, n_gen) = match self {
            Test::Prompt(n) => (format!("pp{n}"), n, 0),
            Test::Generate(n) => (format!("tg{n}"), 0, n),
        };
        TestResult::from_samples(name, n_prompt, n_gen, samples)
    }
}

/// Runs the plan on the registry backend `name`; returns its device line and
/// one result per test, or the one-line reason it could not run.
pub fn measure(
    name: &str,
    model: Arc<Model>,
    plan: &Plan,
    opts: &BackendOptions,
) -> Result<(String, Vec<TestResult>), String> {
    let backend = registry::create(name, opts).map_err(|e| e.to_string())?;
    let backend = registry::with_cpu_experts(backend, &model, plan.n_cpu_moe, opts)
        .map_err(|e| e.to_string())?;
    let n_vocab = model.config.n_vocab;
    let session_opts = SessionOptions {
        n_ctx: (plan.n_prompt + plan.n_gen).max(1),
        n_batch: plan.n_prompt.max(1),
        all_logits: false,
    };
    let mut session =
        Session::new(model, backend, session_opts, &mut |_, _| {}).map_err(|e| e.to_string())?;
    let device = session.backend().info().device;

    let mut tests = Vec::new();
    if plan.n_prompt > 0 {
        tests.push(Test::Prompt(plan.n_prompt));
    }
    if plan.n_gen > 0 {
        tests.push(Test::Generate(plan.n_gen));
    }
    let mut tokens = TokenStream::new(n_vocab);
    let mut results = Vec::new();
    for test in tests {
        // Untimed: first-touch page faults and lazy set-up belong to no run.
        run_once(&mut session, test, &mut tokens)?;
        let mut samples = Vec::with_capacity(plan.repetitions);
        for _ in 0..plan.repetitions {
            let seconds = run_once(&mut session, test, &mut tokens)?;
            samples.push(test.tokens() as f64 / seconds.max(f64::MIN_POSITIVE));
        }
        results.push(test.result(samples));
    }
    Ok((device, results))
}

/// One run from an empty cache; returns its seconds. Token ids are drawn
/// before the clock starts so the timing is the model's alone.
fn run_once(session: &mut Session, test: Test, tokens: &mut TokenStream) -> Result<f64, String> {
    session.reset();
    let ids: Vec<u32> = (0..test.tokens()).map(|_| tokens.next_id()).collect();
    let start = Instant::now();
    match test {
        Test::Prompt(_) => {
            session.eval(&ids).map_err(|e| e.to_string())?;
        }
        Test::Generate(_) => {
            for id in &ids {
                session
                    .eval(std::slice::from_ref(id))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(start.elapsed().as_secs_f64())
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
