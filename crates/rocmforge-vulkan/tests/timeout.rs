//! A kernel that never finishes must end the step with a timeout error
//! naming it, within the configured bound, and leave the backend refusing
//! further work, without hanging the process.
//!
//! The spinning kernel runs in a child process (this test binary, re-run
//! with an environment variable and a filter for `spin_child`), so a
//! failure to time out cannot hang the test run itself: the parent kills
//! the child at a deadline.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rocmforge_core::backend::BackendError;
use rocmforge_vulkan::VulkanBackend;

const CHILD: &str = "ROCMFORGE_VULKAN_SPIN_CHILD";
const TIMEOUT: Duration = Duration::from_secs(1);
const DEADLINE: Duration = Duration::from_secs(60);

fn backend() -> Result<VulkanBackend, BackendError> {
    common::open(common::options())
}

/// The child: spins, prints the error as the CLI would (one line), exits 2.
#[test]
fn spin_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let mut b = match backend() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rocmforge: {e}");
            std::process::exit(3);
        }
    };
    eprintln!("child: device up, submitting the spin kernel");
    let err = b
        .run_spin_test(TIMEOUT)
        .expect_err("the spin kernel timed out");
    eprintln!("child: wait returned: {err}");
    assert!(matches!(err, BackendError::Timeout { .. }), "{err}");
    // Every later call is refused.
    let again = b
        .run_spin_test(TIMEOUT)
        .expect_err("unusable after a timeout");
    assert!(matches!(again, BackendError::Unusable(_)), "{again}");
    eprintln!("rocmforge: {err}");
    // Drop must not block on the hung queue.
    drop(b);
    eprintln!("child: backend dropped, exiting");
    // As the CLI does after a device hang: no exit handlers, which in a GPU
    // driver wait for the hung queue (NVIDIA's did, on an H100).
    // SAFETY: ends the process at once; stderr is unbuffered.
    unsafe { libc::_exit(2) }
}

#[test]
fn a_spinning_kernel_times_out_in_a_child_process() {
    // Only a machine without a Vulkan device skips (and not where one is
    // required); any other failure to open is the test's failure.
    if common::open_or_skip(common::options()).is_none() {
        return;
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
    assert!(elapsed >= TIMEOUT, "{elapsed:?}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("rocmforge:"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let line = lines[0];
    assert!(line.contains("did not finish"), "{line}");
    assert!(line.contains("op 0 of 1 (spin test kernel)"), "{line}");
}
