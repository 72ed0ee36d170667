//! The backend flags every model-running subcommand shares, and turning them
//! into a started backend (`--backend auto` probes; a named one is created
//! directly).

use std::path::PathBuf;

use rocmforge::auto::{self, AutoOptions};
use rocmforge::probe::cache;
use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::backend::{Backend, BackendError};
use rocmforge_core::session::SessionError;

use super::generate::{gpu_timeout, positive_secs};
use super::{note, CliError};

#[derive(clap::Args)]
pub struct BackendArgs {
    /// Compute backend: auto (rocm, then vulkan, then cpu; GPU backends are
    /// probed in a child process first), rocm, vulkan or cpu.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// With --backend auto: probe the GPU backends again instead of using
    /// the verdicts cached for this device, driver and build.
    #[arg(long)]
    pub reprobe: bool,
    /// With --backend auto: seconds a probe may take before its backend is
    /// declared hung and passed over.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub probe_timeout: f64,
    /// CPU threads (0 = one per core).
    #[arg(long, short = 't', default_value_t = 0, allow_negative_numbers = true)]
    pub threads: usize,
    /// GPU device index (default: the backend's choice, discrete GPUs first).
    #[arg(long)]
    pub device: Option<usize>,
    /// Seconds any wait for the GPU may take before the run stops with an
    /// error naming the work in flight.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub gpu_timeout: f64,
    /// Accepted for llama.cpp habits (`-ngl 99`): the GPU backends always
    /// hold every layer, whatever the value; --backend picks CPU or GPU.
    #[arg(
        long = "n-gpu-layers",
        visible_alias = "gpu-layers",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub n_gpu_layers: Option<i64>,
}

pub struct Chosen {
    pub backend: Box<dyn Backend>,
    pub failures: FailureLog,
}

/// Where a failure of the chosen backend is remembered.
pub struct FailureLog {
    /// Set when `auto` chose the backend: failures are recorded for the
    /// next run.
    auto_cache: Option<Option<PathBuf>>,
    name: &'static str,
    device: Option<usize>,
}

impl FailureLog {
    /// Records a failure that stops the backend for good, so that the next
    /// `auto` run passes it over without waiting.
    pub fn record_failure(&self, e: &(dyn std::error::Error + 'static)) {
        if let (Some(cache_dir), Some(reason)) = (&self.auto_cache, fatal_reason(e)) {
            auto::record_failure(cache_dir.as_deref(), self.name, self.device, &reason);
        }
    }
}

/// The backend options the flags ask for, checked.
pub fn backend_options(a: &BackendArgs) -> Result<BackendOptions, CliError> {
    if let Some(n) = a.n_gpu_layers {
        if n < -1 {
            return Err(format!(
                "-ngl/--n-gpu-layers takes a layer count (or -1 for all), got {n}"
            )
            .into());
        }
        if n == 0 && a.backend != "cpu" {
            note("warning: -ngl 0 does not move layers to the CPU: GPU backends hold every layer; use --backend cpu for the CPU");
        }
    }
    if let Some(w) = registry::threads_warning(a.threads) {
        note(&w);
    }
    Ok(BackendOptions {
        threads: a.threads,
        device: a.device,
        allow_software_devices: false,
        gpu_timeout: Some(gpu_timeout(a.gpu_timeout)?),
    })
}

pub fn create_backend(a: &BackendArgs) -> Result<Chosen, CliError> {
    let opts = backend_options(a)?;
    if a.backend != "auto" {
        let backend = registry::create(&a.backend, &opts)?;
        return Ok(Chosen {
            failures: FailureLog {
                auto_cache: None,
                name: backend.info().name,
                device: a.device,
            },
            backend,
        });
    }
    let cache_dir = cache::cache_dir();
    let choice = auto::choose(&AutoOptions {
        backend: opts,
        reprobe: a.reprobe,
        probe_timeout: positive_secs("--probe-timeout", a.probe_timeout)?,
        exe: std::env::current_exe()
            .map_err(|e| format!("cannot find this program's path to probe backends: {e}"))?,
        cache_dir: cache_dir.clone(),
    })?;
    if let Some(line) = choice.explanation() {
        note(&line);
    }
    Ok(Chosen {
        backend: choice.backend,
        failures: FailureLog {
            auto_cache: Some(cache_dir),
            name: choice.name,
            device: a.device,
        },
    })
}

/// The message of a backend failure that stops the backend for good.
fn fatal_reason(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    match e.downcast_ref::<SessionError>() {
        Some(SessionError::Backend(b)) if b.is_fatal() => Some(b.to_string()),
        _ => e
            .downcast_ref::<BackendError>()
            .filter(|b| b.is_fatal())
            .map(ToString::to_string),
    }
}

/// The progress bar shown while weights load.
pub fn load_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("loading {bar:30} {bytes}/{total_bytes} {msg}")
            .expect("valid template"),
    );
    bar
}
