//! What Ctrl-C does in `chat`, by the program's state:
//!
//! | state | Ctrl-C |
//! |---|---|
//! | loading the model, or stdin is no terminal | ends the program (exit 130) |
//! | generating a reply | stops the reply at the next token; a second one while it stops ends the program, as in `generate` (a prompt evaluation cannot be cut short) |
//! | waiting at the prompt | says how to leave and prompts again |

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::commands::{note, write_stdout};

/// Whether stdin is a terminal.
static INTERACTIVE: AtomicBool = AtomicBool::new(false);
/// Whether the conversation has started (the model is loaded).
static READY: AtomicBool = AtomicBool::new(false);
/// Whether a reply is being generated.
static GENERATING: AtomicBool = AtomicBool::new(false);
/// Set by Ctrl-C during a reply.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs the handler; call before the model loads.
pub fn install(interactive: bool) {
    INTERACTIVE.store(interactive, Ordering::SeqCst);
    let _ = ctrlc::set_handler(|| {
        if !INTERACTIVE.load(Ordering::SeqCst) || !READY.load(Ordering::SeqCst) {
            exit_now();
        }
        if !GENERATING.load(Ordering::SeqCst) {
            // The line typed so far stays the terminal's (lost); a fresh
            // prompt follows the hint.
            note("\n(Ctrl-C stops a reply; /exit or Ctrl-D leaves)");
            let _ = write_stdout(&mut std::io::stdout(), b"> ");
            return;
        }
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            exit_now();
        }
    });
}

fn exit_now() -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: _exit ends the process immediately; the handler thread
    // touches nothing afterwards.
    unsafe { libc::_exit(130) }
}

pub fn is_interactive() -> bool {
    INTERACTIVE.load(Ordering::SeqCst)
}

/// The model is loaded and the first prompt is coming.
pub fn conversation_started() {
    READY.store(true, Ordering::SeqCst);
}

/// A reply (its prompt evaluation included) starts: Ctrl-C now stops it.
pub fn reply_started() {
    INTERRUPTED.store(false, Ordering::SeqCst);
    GENERATING.store(true, Ordering::SeqCst);
}

pub fn reply_ended() {
    GENERATING.store(false, Ordering::SeqCst);
}

/// Whether Ctrl-C asked the reply to stop.
pub fn reply_interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
