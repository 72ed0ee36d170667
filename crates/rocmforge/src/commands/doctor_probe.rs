//! `rocmforge doctor --probe`: the kernel sweep of `rocmforge::probe::sweep`,
//! printed as a table row by row as cases finish.

use std::time::Duration;

use rocmforge::probe::shapes;
use rocmforge::probe::sweep::{self, SweepOptions};
use rocmforge_core::quant::QuantType;

use super::generate::positive_secs;
use super::{write_stdout, CliError};

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// Run every kernel of each GPU backend over a sweep of shapes, each
    /// case in a child process with a hard deadline, and print a table of
    /// ok / WRONG / error / HANG with times. Exits 1 if any case failed.
    #[arg(long)]
    pub probe: bool,
    /// Backends to sweep (default: the GPU backends, rocm and vulkan).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub probe_backends: Vec<String>,
    /// Weight types to sweep (default: every supported type).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub probe_types: Vec<String>,
    /// Shapes to sweep (default: all of tiny, llama-7b-layer,
    /// qwen2-0.5b-layer, qwen3-layer, odd).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub probe_shapes: Vec<String>,
    /// Seconds one case (one child process) may take before it is reported
    /// as a HANG.
    #[arg(long, value_name = "SECS", default_value_t = 180.0)]
    pub probe_timeout: f64,
    /// GPU device index for the swept backends.
    #[arg(long)]
    pub device: Option<usize>,
}

/// The sweep `a` asks for, checked before anything is printed.
pub fn options(a: &ProbeArgs) -> Result<SweepOptions, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this program's path to run probes: {e}"))?;
    let backends = if a.probe_backends.is_empty() {
        vec!["rocm".to_string(), "vulkan".to_string()]
    } else {
        a.probe_backends.clone()
    };
    for b in &backends {
        rocmforge::registry::find(b)
            .ok_or_else(|| format!("--probe-backends: unknown backend '{b}'"))?;
    }
    let mut opts = SweepOptions::everything(exe, backends, a.device);
    if !a.probe_types.is_empty() {
        opts.types = a
            .probe_types
            .iter()
            .map(|t| {
                QuantType::from_name(t)
                    .filter(|t| t.is_supported())
                    .ok_or_else(|| format!("--probe-types: {t} is not a supported weight type"))
            })
            .collect::<Result<_, _>>()?;
    }
    if !a.probe_shapes.is_empty() {
        let known: Vec<&str> = shapes::SHAPES.iter().map(|s| s.name).collect();
        opts.shapes = a
            .probe_shapes
            .iter()
            .map(|s| {
                shapes::find(s).ok_or_else(|| {
                    format!(
                        "--probe-shapes: unknown shape '{s}' (known: {})",
                        known.join(", ")
                    )
                })
            })
            .collect::<Result<_, _>>()?;
    }
    opts.case_timeout = positive_secs("--probe-timeout", a.probe_timeout)?;
    // The backend's own watchdog fires first where it can, naming the op.
    opts.gpu_timeout = (opts.case_timeout / 2).min(Duration::from_secs(60));
    Ok(opts)
}

/// Runs the sweep; true when every case that ran passed.
pub fn run(opts: &SweepOptions) -> Result<bool, CliError> {
    let mut out = std::io::stdout().lock();
    write_stdout(&mut out, format!("{}\n", sweep::HEADER).as_bytes())?;
    let (mut ok, mut failed, mut written) = (0usize, 0usize, Ok(()));
    sweep::sweep(opts, &mut |row| {
        if row.status.is_failure() {
            failed += 1;
        } else if row.status == sweep::Status::Ok {
            ok += 1;
        }
        if written.is_ok() {
            written = write_stdout(&mut out, format!("{}\n", sweep::table_line(row)).as_bytes());
        }
    })?;
    written?;
    write_stdout(
        &mut out,
        format!("\n{ok} ok, {failed} failed (WRONG, error or HANG)\n").as_bytes(),
    )?;
    Ok(failed == 0)
}
