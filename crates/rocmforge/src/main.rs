//! The `rocmforge` command line: generate text, chat, tokenize, inspect GGUF
//! files.

// A closed stdout or stderr pipe makes these macros panic; output goes
// through `commands::write_stdout` and `commands::note` instead.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rocmforge_core::backend::BackendError;
use rocmforge_core::session::SessionError;

#[derive(Parser)]
#[command(
    name = "rocmforge",
    version,
    about = "Run GGUF language models on AMD GPUs (and the CPU)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt.
    Generate(commands::generate::Args),
    /// Chat with a model in its own chat template (interactive, or one
    /// message per line from a pipe).
    Chat(commands::chat::Args),
    /// Perplexity of a text file, by llama-perplexity's method.
    Perplexity(commands::perplexity::Args),
    /// Serve the model over HTTP with OpenAI's API (chat and text
    /// completions, streamed or whole).
    Serve(commands::serve::Args),
    /// Print the token ids of a text.
    Tokenize(commands::tokenize::Args),
    /// Print a GGUF file's metadata and tensor table.
    Info(commands::info::Args),
    /// Diagnose the GPU stack: GPUs, drivers, firmware, settings, known issues.
    Doctor(commands::doctor::Args),
    /// The child side of a backend probe (run by `--backend auto` and
    /// `doctor --probe`).
    #[command(hide = true)]
    ProbeCase(commands::probe_case::Args),
}

fn main() -> ExitCode {
    // llama.cpp's `-ngl` is a long flag with one dash; clap needs `--`.
    let args = rocmforge::llama_flags::long_forms(std::env::args_os());
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // Help and version go to stdout with success.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // Usage errors are clap's message in one line, exit code 2.
            commands::note(&one_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Generate(a) => match commands::generate::run(a) {
            // 128 + SIGINT, as shells report a program stopped by Ctrl-C.
            Ok(commands::generate::Finished::Interrupted) => return ExitCode::from(130),
            Ok(commands::generate::Finished::Done) => Ok(()),
            Err(e) => Err(e),
        },
        Command::Chat(a) => commands::chat::run(a),
        Command::ProbeCase(a) => commands::probe_case::run(a),
        Command::Perplexity(a) => commands::perplexity::run(a),
        Command::Serve(a) => commands::serve::run(a),
        Command::Tokenize(a) => commands::tokenize::run(a),
        Command::Info(a) => commands::info::run(a),
        Command::Doctor(a) => commands::doctor::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            commands::note(&format!("error: {e}"));
            if device_stopped(e.as_ref()) {
                exit_skipping_driver_teardown(1);
            }
            ExitCode::FAILURE
        }
    }
}

/// clap's message up to its first blank line (dropping the usage and "try
/// --help" trailer), joined into one line: every failure is one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `e` says a GPU stopped answering or was lost.
fn device_stopped(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        let fatal = e
            .downcast_ref::<BackendError>()
            .map(BackendError::is_fatal)
            .or_else(|| {
                e.downcast_ref::<SessionError>()
                    .map(|s| matches!(s, SessionError::Backend(b) if b.is_fatal()))
            })
            .unwrap_or(false);
        if fatal {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Ends the process after a device hang without running exit handlers:
/// a GPU driver's handlers wait for the hung queue to drain (seen with
/// NVIDIA's Vulkan driver, which then blocks forever), and the error is
/// already printed. The kernel still reclaims the device context.
fn exit_skipping_driver_teardown(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process at once; nothing after it runs, and
    // everything that must reach the user was flushed above.
    unsafe { libc::_exit(code) }
}
