//! `--list-devices`: every backend of this build, with the device it would
//! run on here or the reason it cannot run.
//!
//! GPU backends are asked through the same child-process probe `--backend
//! auto` uses (start, load a tiny model, one prefill and decode checked
//! against the CPU, under a deadline): a GPU stack that hangs while starting
//! must not hang the listing, and a device that starts but computes wrong
//! results is worth naming as unusable too. The CPU backend cannot hang and
//! is created in this process.

use rocmforge::auto::{self, AutoOptions};
use rocmforge::probe;
use rocmforge::registry::{self, unavailable_reason, BackendOptions, RegistryError};

use super::backend_choice::{backend_options, BackendArgs};
use super::generate::positive_secs;
use super::{write_stdout, CliError};

/// One backend's line: `name  device` or `name  unavailable: why`.
fn line(name: &str, verdict: Result<String, String>) -> String {
    match verdict {
        Ok(device) => format!("{name:<8} {device}\n"),
        Err(why) => format!("{name:<8} unavailable: {why}\n"),
    }
}

fn cpu_device(opts: &BackendOptions) -> Result<String, String> {
    // The CPU is one device: a --device meant for the GPUs does not apply.
    let opts = BackendOptions {
        device: None,
        ..*opts
    };
    match registry::create("cpu", &opts) {
        Ok(b) => Ok(b.info().device),
        Err(RegistryError::Unavailable { source, .. }) => Err(unavailable_reason(&source)),
        Err(e) => Err(e.to_string()),
    }
}

fn gpu_device(name: &str, auto_opts: &AutoOptions) -> Result<String, String> {
    let spec = auto::probe_spec(name, auto_opts);
    let report = probe::run_case(&auto_opts.exe, &spec, auto_opts.probe_timeout)
        .map_err(|e| format!("could not start the probe process: {e}"))?;
    match (report.problem(), report.device) {
        (None, Some(device)) => Ok(device),
        (None, None) => Err("the probe ended without naming a device".into()),
        (Some(problem), Some(device)) => Err(format!("{device}: {problem}")),
        (Some(problem), None) => Err(problem),
    }
}

pub fn list(a: &BackendArgs) -> Result<(), CliError> {
    let opts = backend_options(a)?;
    let auto_opts = AutoOptions {
        backend: opts,
        reprobe: true,
        probe_timeout: positive_secs("--probe-timeout", a.probe_timeout)?,
        exe: std::env::current_exe()
            .map_err(|e| format!("cannot find this program's path to probe backends: {e}"))?,
        cache_dir: None,
    };
    let mut out = std::io::stdout().lock();
    write_stdout(&mut out, b"Available devices:\n")?;
    for entry in registry::backends() {
        let verdict = match entry.name {
            "cpu" => cpu_device(&opts),
            gpu => gpu_device(gpu, &auto_opts),
        };
        write_stdout(
            &mut out,
            format!("  {}", line(entry.name, verdict)).as_bytes(),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_device_or_the_reason() {
        assert_eq!(
            line("cpu", Ok("EPYC (2 threads)".into())),
            "cpu      EPYC (2 threads)\n"
        );
        assert_eq!(
            line("rocm", Err("no HIP runtime".into())),
            "rocm     unavailable: no HIP runtime\n"
        );
    }
}
