//! Starting the backend a run asked for, shared by `generate` and `chat`:
//! a named one, or `auto` (probe GPU backends in a child process, use the
//! first that works, remember failures for the next run).

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use rocmforge::auto::{self, AutoOptions};
use rocmforge::probe::cache;
use rocmforge::registry::{self, BackendOptions};
use rocmforge_core::backend::{Backend, BackendError};
use rocmforge_core::session::SessionError;

use super::generate::positive_secs;
use super::{note, CliError};

/// What the user asked for.
pub struct BackendRequest<'a> {
    /// `auto`, `rocm`, `vulkan` or `cpu`.
    pub name: &'a str,
    /// With `auto`: probe again instead of using cached verdicts.
    pub reprobe: bool,
    /// With `auto`: seconds a probe may take (`--probe-timeout`).
    pub probe_timeout: f64,
    pub options: BackendOptions,
}

pub struct Chosen {
    pub backend: Box<dyn Backend>,
    /// Set when `auto` chose it: failures are recorded for the next run.
    pub auto_cache: Option<Option<PathBuf>>,
}

pub fn create_backend(req: BackendRequest) -> Result<Chosen, CliError> {
    if req.name != "auto" {
        return Ok(Chosen {
            backend: registry::create(req.name, &req.options)?,
            auto_cache: None,
        });
    }
    let cache_dir = cache::cache_dir();
    let choice = auto::choose(&AutoOptions {
        backend: req.options,
        reprobe: req.reprobe,
        probe_timeout: positive_secs("--probe-timeout", req.probe_timeout)?,
        exe: std::env::current_exe()
            .map_err(|e| format!("cannot find this program's path to probe backends: {e}"))?,
        cache_dir: cache_dir.clone(),
    })?;
    if let Some(line) = choice.explanation() {
        note(&line);
    }
    Ok(Chosen {
        backend: choice.backend,
        auto_cache: Some(cache_dir),
    })
}

/// Records `result`'s failure for `auto`'s next run when `auto` chose the
/// backend (`auto_cache` is [`Chosen::auto_cache`]) and the failure stopped
/// it for good.
pub fn remember_failure<T>(
    auto_cache: &Option<Option<PathBuf>>,
    backend_name: &str,
    device: Option<usize>,
    result: &Result<T, CliError>,
) {
    if let (Err(e), Some(cache_dir)) = (result, auto_cache) {
        if let Some(reason) = fatal_reason(e.as_ref()) {
            auto::record_failure(cache_dir.as_deref(), backend_name, device, &reason);
        }
    }
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
pub fn load_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("loading {bar:30} {bytes}/{total_bytes} {msg}")
            .expect("valid template"),
    );
    bar
}
