//! What the GPU crates' own tests share, written once for every
//! [`GpuDevice`]:
//!
//! - whether `ROCMFORGE_REQUIRE_BACKENDS` requires a backend, which turns
//!   "no such device here, skipping" into a failure (CI names the backends
//!   that must run, so a test cannot pass by skipping);
//! - the never-hang test: a kernel that spins until the host sets a flag
//!   must end its step with a one-line timeout error within the bound, stop
//!   the backend, and let the process exit. It runs in a child process (the
//!   test binary again, with one test selected), so a wait that never ends
//!   cannot hang the test run: the parent kills the child at a deadline;
//! - a short session (prompt and decode steps) and what it allocated.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocmforge_core::backend::{Backend, BackendError};
use rocmforge_core::gpu::{GpuBackend, GpuDevice};
use rocmforge_core::model::Model;
use rocmforge_core::session::{Session, SessionOptions};

/// Whether `ROCMFORGE_REQUIRE_BACKENDS` (comma-separated) names one of
/// `names` (a backend and its aliases).
pub fn required(names: &[&str]) -> bool {
    std::env::var("ROCMFORGE_REQUIRE_BACKENDS")
        .unwrap_or_default()
        .split(',')
        .any(|s| names.iter().any(|n| s.trim().eq_ignore_ascii_case(n)))
}

/// `opened`, or `None` after printing why where the backend is not
/// available here and not required. Any other error, or no device where one
/// is required, fails the test.
pub fn open_or_skip<B>(opened: Result<B, BackendError>, names: &[&str]) -> Option<B> {
    match opened {
        Ok(b) => Some(b),
        Err(e @ BackendError::Unavailable { .. }) if !required(names) => {
            eprintln!(
                "skipping: {e} (ROCMFORGE_REQUIRE_BACKENDS={} fails instead)",
                names[0]
            );
            None
        }
        Err(e) => panic!("{} backend: {e}", names[0]),
    }
}

/// The never-hang test's bounds.
pub struct Spin {
    /// The test binary's environment variable that makes `spin_child` run.
    pub child_var: &'static str,
    /// The bound on the wait.
    pub timeout: Duration,
    /// From the launch to the error: the bound plus polling slack.
    pub wait_at_most: Duration,
    /// The whole child, start-up (a cold PTX JIT) included.
    pub deadline: Duration,
}

impl Spin {
    /// The child (a test named `spin_child` that calls this): spins, prints
    /// the error as the CLI would (one line), exits 2 without exit
    /// handlers. Returns at once outside the child.
    pub fn child<D: GpuDevice>(&self, open: impl FnOnce() -> Result<GpuBackend<D>, BackendError>) {
        if std::env::var_os(self.child_var).is_none() {
            return;
        }
        let mut b = open().unwrap_or_else(|e| {
            eprintln!("rocmforge: {e}");
            std::process::exit(3)
        });
        eprintln!("child: {}; launching the spin kernel", b.device().summary());
        let start = Instant::now();
        let err = b
            .run_spin_test(self.timeout)
            .expect_err("the spin kernel timed out");
        let waited = start.elapsed();
        eprintln!("child: wait returned after {waited:.2?}: {err}");
        assert!(matches!(err, BackendError::Timeout { .. }), "{err}");
        assert!(
            waited >= self.timeout && waited <= self.wait_at_most,
            "waited {waited:?}"
        );
        // Every later call is refused.
        let again = b
            .run_spin_test(self.timeout)
            .expect_err("unusable after a timeout");
        assert!(matches!(again, BackendError::Unusable { .. }), "{again}");
        eprintln!("rocmforge: {err}");
        // Drop must not block on the stopped backend's queue.
        let dropping = Instant::now();
        drop(b);
        eprintln!(
            "child: backend dropped in {:.2?}, exiting",
            dropping.elapsed()
        );
        // As the CLI does after a device hang: no exit handlers, which in a
        // GPU driver may wait for the hung queue (NVIDIA's did, on an H100).
        // SAFETY: ends the process at once; stderr is unbuffered.
        unsafe { libc::_exit(2) }
    }

    /// The parent: runs `spin_child` in a child process, kills it at the
    /// deadline, and checks it exited 2 with one `rocmforge:` line holding
    /// every one of `needles`.
    pub fn parent(&self, needles: &[&str]) {
        let start = Instant::now();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "spin_child",
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(self.child_var, "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = String::new();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > self.deadline {
                child.kill().unwrap();
                let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
                panic!(
                    "the child did not exit within {:?}; it said:\n{stderr}",
                    self.deadline
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let elapsed = start.elapsed();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        eprintln!("child exited with {status} after {elapsed:.2?}:\n{stderr}");
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(elapsed >= self.timeout, "{elapsed:?}");
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("rocmforge:"))
            .collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        for needle in [
            "did not finish",
            "the backend is stopped",
            "op 0 of 1 (spin test kernel)",
        ]
        .iter()
        .chain(needles)
        {
            assert!(lines[0].contains(needle), "no '{needle}' in: {}", lines[0]);
        }
    }
}

/// What [`short_run`] saw.
pub struct Run {
    /// The prompt's last logits, then each decode step's.
    pub logits: Vec<f32>,
    pub allocations: usize,
    pub weight_bytes: u64,
    /// The model's weight tensors.
    pub tensors: usize,
}

/// A session of `backend` over the model at `path`: an 11-token prompt,
/// then two decode steps, and what the backend allocated for them.
pub fn short_run(backend: Box<dyn Backend>, path: &Path) -> Run {
    let model = Arc::new(Model::load(path).unwrap());
    let tensors = model.weights.table.len();
    let opts = SessionOptions {
        kv_types: Default::default(),
        n_ctx: 32,
        n_batch: 8,
        all_logits: false,
        n_seq: 1,
    };
    let mut s = Session::new(model, backend, opts, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("session: {e}"));
    let prompt: Vec<u32> = (1..=11).collect();
    let mut logits = s.eval(&prompt).unwrap().to_vec();
    for t in [17, 23] {
        logits.extend_from_slice(s.eval(&[t]).unwrap());
    }
    assert!(logits.iter().all(|v| v.is_finite()), "non-finite logits");
    let stats = s.backend().allocations();
    Run {
        logits,
        allocations: stats.device_allocations,
        weight_bytes: stats.weight_bytes,
        tensors,
    }
}
