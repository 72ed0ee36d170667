//! A kernel that never finishes must end the wait with a timeout error
//! naming it and the likely causes, within the bound, and leave the backend
//! refusing further work, without hanging the process.
//!
//! The spinning kernel runs in a child process (this test binary, re-run
//! with an environment variable and a filter for `spin_child`), so a
//! failure to time out cannot hang the test run itself: the parent kills
//! the child at a deadline.
//!
//! Without a HIP or CUDA runtime the test prints why and passes, unless
//! `ROCMFORGE_REQUIRE_BACKENDS` names `rocm`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::{GpuDevice, GpuOptions};
use rocmforge_hip::HipOptions;

const CHILD: &str = "ROCMFORGE_HIP_SPIN_CHILD";
const TIMEOUT: Duration = Duration::from_secs(1);
/// The whole child, start-up (a cold PTX JIT in CUDA mode) included.
const DEADLINE: Duration = Duration::from_secs(120);
/// From the launch to the error: the bound plus polling slack.
const WAIT_AT_MOST: Duration = Duration::from_secs(3);

fn required() -> bool {
    std::env::var("ROCMFORGE_REQUIRE_BACKENDS")
        .unwrap_or_default()
        .split(',')
        .any(|s| matches!(s.trim().to_ascii_lowercase().as_str(), "rocm" | "hip"))
}

/// The child: spins, prints the error as the CLI would (one line), exits 2.
#[test]
fn spin_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let mut b = match rocmforge_hip::open(HipOptions::from_env(), GpuOptions::from_env()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rocmforge: {e}");
            std::process::exit(3);
        }
    };
    eprintln!("child: {}; launching the spin kernel", b.device().summary());
    let start = Instant::now();
    let err = b
        .run_spin_test(TIMEOUT)
        .expect_err("the spin kernel timed out");
    let waited = start.elapsed();
    eprintln!("child: wait returned after {waited:.2?}: {err}");
    assert!(matches!(err, BackendError::Timeout { .. }), "{err}");
    assert!(
        waited >= TIMEOUT && waited <= WAIT_AT_MOST,
        "waited {waited:?}"
    );
    // Every later call is refused.
    let again = b
        .run_spin_test(TIMEOUT)
        .expect_err("unusable after a timeout");
    assert!(matches!(again, BackendError::Unusable(_)), "{again}");
    eprintln!("rocmforge: {err}");
    // Drop must not block on the stopped backend's stream.
    let dropping = Instant::now();
    drop(b);
    eprintln!(
        "child: backend dropped in {:.2?}, exiting",
        dropping.elapsed()
    );
    // As the CLI does after a device hang: no exit handlers, which in a GPU
    // driver may wait for the hung queue.
    // SAFETY: ends the process at once; stderr is unbuffered.
    unsafe { libc::_exit(2) }
}

#[test]
fn a_spinning_kernel_times_out_in_a_child_process() {
    match rocmforge_hip::open(HipOptions::from_env(), GpuOptions::from_env()) {
        Ok(b) => drop(b),
        Err(e @ BackendError::Unavailable(_)) if !required() => {
            eprintln!("skipping: {e} (ROCMFORGE_REQUIRE_BACKENDS=rocm fails instead)");
            return;
        }
        Err(e) => panic!("rocm backend: {e}"),
    }
    let start = Instant::now();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "spin_child",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            child.kill().unwrap();
            let mut stderr = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
            panic!("the child did not exit within {DEADLINE:?}; it said:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = start.elapsed();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    eprintln!("child exited with {status} after {elapsed:.2?}:\n{stderr}");
    assert_eq!(status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("rocmforge:"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let line = lines[0];
    for needle in [
        "did not finish",
        "spin test kernel",
        "amdgpu.cwsr_enable=0",
        "HSA_ENABLE_SDMA=0",
        "the backend is stopped",
    ] {
        assert!(line.contains(needle), "no '{needle}' in: {line}");
    }
}
