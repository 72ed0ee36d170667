//! `cargo xtask <command>`: project automation that needs more than a shell
//! one-liner. Each subcommand lives in its own module.

mod bench;
mod bench_serve;
mod gen_model;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "rocmforge project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a random-weight GGUF model with the exact layout of a real one.
    GenModel(gen_model::GenModelArgs),
    /// Tokens/s of prompt processing and generation per backend (llama-bench style).
    Bench(bench::BenchArgs),
    /// Load on `rocmforge serve` (and llama-server): concurrent streaming
    /// clients' aggregate tokens/s, time to first token and latency.
    BenchServe(bench_serve::BenchServeArgs),
}

fn main() -> ExitCode {
    // llama-bench's `-ngl` and `-ub` are long flags with one dash.
    let args = rocmforge::llama_flags::long_forms(std::env::args_os());
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version: not an error.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{}", one_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let result = match &cli.command {
        Command::GenModel(args) => gen_model::run(args),
        Command::Bench(args) => return bench::main(args),
        Command::BenchServe(args) => return bench_serve::main(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// clap's message up to its first blank line (dropping the usage and "try
/// --help" trailer), joined into one line so scripts see a single error line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}
