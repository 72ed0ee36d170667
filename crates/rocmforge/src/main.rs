//! The `rocmforge` command line: generate text, tokenize, inspect GGUF files.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Print the token ids of a text.
    Tokenize(commands::tokenize::Args),
    /// Print a GGUF file's metadata and tensor table.
    Info(commands::info::Args),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with success; usage errors are
            // clap's own message and exit code 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Generate(a) => commands::generate::run(a),
        Command::Tokenize(a) => commands::tokenize::run(a),
        Command::Info(a) => commands::info::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
