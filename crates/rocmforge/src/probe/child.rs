//! Running a command in a child process with a hard deadline.
//!
//! A hung driver call cannot be cancelled from inside the process that made
//! it: the thread is stuck in the kernel or in a spin inside the runtime, and
//! no in-process watchdog gets it back. A child process can be killed, so
//! every probe of a GPU backend runs in one. A child stuck in an
//! uninterruptible driver wait may not die even from SIGKILL; then it is
//! left behind, reported as hung, and the caller goes on.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a bounded child run ended.
#[derive(Debug)]
pub enum ChildOutcome {
    Exited {
        status: ExitStatus,
        stdout: String,
        stderr: String,
        elapsed: Duration,
    },
    /// Still running at the deadline; killed (or, if even SIGKILL did not
    /// take within a grace period, abandoned: `reaped` is false).
    TimedOut {
        stdout: String,
        stderr: String,
        elapsed: Duration,
        reaped: bool,
    },
}

/// How long a killed child gets to disappear before it is abandoned.
const KILL_GRACE: Duration = Duration::from_secs(3);
/// Polling interval for the child's exit.
const POLL: Duration = Duration::from_millis(20);

/// Runs `cmd` with piped output and waits at most `timeout`.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> std::io::Result<ChildOutcome> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group, so a kill reaches anything it started too.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    // Out of the terminal's process group, Ctrl-C no longer reaches the
    // child; instead it dies with its parent however the parent ends, so a
    // probe never outlives the run that started it.
    #[cfg(target_os = "linux")]
    // SAFETY: the closure runs in the forked child before exec and calls
    // only prctl(2), which is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = start + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(ChildOutcome::Exited {
                status,
                stdout: stdout.take(true),
                stderr: stderr.take(true),
                elapsed: start.elapsed(),
            });
        }
        if Instant::now() >= deadline {
            let elapsed = start.elapsed();
            let reaped = kill(&mut child);
            // A hung child's pipes stay open while it lives: wait for
            // their end only when it is gone.
            let (stdout, stderr) = (stdout.take(reaped), stderr.take(reaped));
            return Ok(ChildOutcome::TimedOut {
                stdout,
                stderr,
                elapsed,
                reaped,
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Kills the child's process group and waits for it a short while.
fn kill(child: &mut Child) -> bool {
    #[cfg(unix)]
    {
        let pid = child.id() as libc::pid_t;
        // SAFETY: kill(2) with a negative pid signals the process group the
        // child leads (made by process_group(0)); no memory is involved.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let until = Instant::now() + KILL_GRACE;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(POLL);
    }
    false
}

/// A pipe read to its end on a thread of its own, into a buffer readable
/// at any time: a hung child's output so far is still worth having.
struct Collected {
    bytes: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Collected {
    /// Everything read so far, after waiting for the end of the pipe when
    /// `wait` (the writer is gone, so that end comes).
    fn take(mut self, wait: bool) -> String {
        if wait {
            if let Some(r) = self.reader.take() {
                let _ = r.join();
            }
        }
        let bytes = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Collected {
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let reader = pipe.map(|mut pipe| {
        let bytes = Arc::clone(&bytes);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                bytes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend_from_slice(&buf[..n]);
            }
        })
    });
    Collected { bytes, reader }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_status_come_back() {
        let out = run_bounded(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(20),
        )
        .unwrap();
        let ChildOutcome::Exited {
            status,
            stdout,
            stderr,
            ..
        } = out
        else {
            panic!("{out:?}")
        };
        assert_eq!(status.code(), Some(3));
        assert_eq!(stdout, "out\n");
        assert_eq!(stderr, "err\n");
    }

    #[test]
    fn a_child_past_its_deadline_is_killed() {
        let start = Instant::now();
        // The grandchild (sleep) holds the pipes too: the group kill must
        // reach it, or reading stderr back would wait for it.
        let out = run_bounded(
            Command::new("sh").args(["-c", "echo started >&2; sleep 100; echo never"]),
            Duration::from_millis(500),
        )
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(10));
        let ChildOutcome::TimedOut { stderr, reaped, .. } = out else {
            panic!("{out:?}")
        };
        assert!(reaped);
        assert_eq!(stderr, "started\n");
    }
}
