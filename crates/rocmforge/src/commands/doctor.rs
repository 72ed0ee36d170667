//! `rocmforge doctor`: what the GPU stack looks like and which known issues
//! apply (see `rocmforge::doctor`). A report, so it exits 0 whatever it
//! finds; with `--probe`, the kernel sweep follows, and a failed case makes
//! the exit 1 (scripts can gate on it).

use std::path::PathBuf;

use rocmforge::doctor::{self, report, system, SysRoot};

use super::{write_stdout, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Read this directory as `/` (tests use fake sysfs/proc roots).
    #[arg(long, value_name = "DIR", hide = true)]
    sysroot: Option<PathBuf>,
    #[command(flatten)]
    probe: super::doctor_probe::ProbeArgs,
}

pub fn run(args: Args) -> Result<(), CliError> {
    if args.json && args.probe.probe {
        return Err("--probe prints a table; run it without --json".into());
    }
    let sweep = match args.probe.probe {
        true => Some(super::doctor_probe::options(&args.probe)?),
        false => None,
    };
    let root = SysRoot::open(args.sysroot.unwrap_or_else(|| PathBuf::from("/")))?;
    let env = system::process_environment();
    let built: Vec<String> = rocmforge_hip::code_objects::built_targets()
        .into_iter()
        .map(str::to_string)
        .collect();
    let diagnosis = doctor::diagnose(&root, &env, &built);
    let out = if args.json {
        report::json(&diagnosis)
    } else {
        report::text(&diagnosis)
    };
    write_stdout(&mut std::io::stdout().lock(), out.as_bytes())?;
    let Some(sweep) = sweep else {
        return Ok(());
    };
    write_stdout(
        &mut std::io::stdout().lock(),
        b"\nProbe sweep (each case a child process with a hard deadline)\n",
    )?;
    match super::doctor_probe::run(&sweep)? {
        true => Ok(()),
        false => Err("some probe cases failed (WRONG, error or HANG): see the table".into()),
    }
}
