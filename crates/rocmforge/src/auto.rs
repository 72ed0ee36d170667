//! `--backend auto`: the first of rocm, vulkan and cpu that works here.
//!
//! "Works" is decided by a probe in a child process ([`crate::probe`]): the
//! backend must start, run one prefill and one decode of a tiny generated
//! model, and agree with the CPU, all before a hard deadline. A GPU stack
//! that hangs (the failure AMD users meet most) therefore costs one probe
//! timeout once, not a hung terminal on every run: the verdict is cached per
//! device, driver and build, and `--reprobe` asks again. A backend that
//! fails later, in the real run, is recorded as failed too
//! ([`record_failure`]), so the next run falls back without waiting.

use std::path::PathBuf;
use std::time::Duration;

use rocmforge_core::backend::Backend;
use rocmforge_core::quant::QuantType;

use crate::probe::cache::{self, CachedVerdict, VerdictCache};
use crate::probe::{self, shapes, CaseSpec};
use crate::registry::{self, BackendOptions, RegistryError};

/// The order `auto` tries: the AMD-native backend, the portable GPU one,
/// then the CPU, which always starts.
pub const ORDER: [&str; 3] = ["rocm", "vulkan", "cpu"];

pub struct AutoOptions {
    pub backend: BackendOptions,
    /// Ignore cached verdicts and probe again.
    pub reprobe: bool,
    /// The hard deadline of each probe.
    pub probe_timeout: Duration,
    /// The `rocmforge` binary the probes run.
    pub exe: PathBuf,
    /// Where verdicts are kept; None keeps none.
    pub cache_dir: Option<PathBuf>,
}

/// A backend passed over, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    pub name: &'static str,
    pub reason: String,
    /// The reason is a cached verdict, not this run's probe.
    pub cached: bool,
}

pub struct AutoChoice {
    pub name: &'static str,
    pub backend: Box<dyn Backend>,
    pub skipped: Vec<Skipped>,
}

impl AutoChoice {
    /// One line on what was chosen and why the earlier ones were not, or
    /// None when the first choice won.
    pub fn explanation(&self) -> Option<String> {
        if self.skipped.is_empty() {
            return None;
        }
        let reasons: Vec<String> = self
            .skipped
            .iter()
            .map(|s| format!("{} {}", s.name, s.reason))
            .collect();
        let cached = if self.skipped.iter().any(|s| s.cached) {
            " (cached; --reprobe to probe again)"
        } else {
            ""
        };
        Some(format!(
            "backend auto: using {}; {}{cached}",
            self.name,
            reasons.join("; ")
        ))
    }
}

/// The probe `auto` runs for `name`.
pub fn probe_spec(name: &str, opts: &AutoOptions) -> CaseSpec {
    CaseSpec {
        backend: name.to_string(),
        device: opts.backend.device,
        ty: QuantType::Q4K,
        shape: shapes::auto_shape(),
        prompts: vec![8],
        // The backend's own watchdog fires first where it can, naming the
        // op in flight; the hard deadline catches what it cannot.
        gpu_timeout: opts
            .backend
            .gpu_timeout
            .unwrap_or(opts.probe_timeout)
            .min(opts.probe_timeout / 2),
    }
}

/// Picks the backend. Probes run only for GPU backends without a cached
/// verdict; the CPU backend is the end of the line and is not probed.
pub fn choose(opts: &AutoOptions) -> Result<AutoChoice, RegistryError> {
    let mut verdicts = VerdictCache::open(opts.cache_dir.as_deref());
    let mut skipped = Vec::new();
    for name in &ORDER[..2] {
        let key = cache::key(name, opts.backend.device);
        let (verdict, cached) = match verdicts.get(&key) {
            Some(v) if !opts.reprobe => (v.clone(), true),
            _ => {
                let v = probe_once(name, opts);
                verdicts.put(key, v.clone());
                (v, false)
            }
        };
        if !verdict.ok {
            skipped.push(Skipped {
                name,
                reason: verdict
                    .reason
                    .map_or_else(|| "failed its probe".into(), |r| format!("failed: {r}")),
                cached,
            });
            continue;
        }
        match registry::create(name, &opts.backend) {
            Ok(backend) => {
                return Ok(AutoChoice {
                    name,
                    backend,
                    skipped,
                })
            }
            Err(e) => skipped.push(Skipped {
                name,
                reason: format!("passed its probe but failed to start now: {e}"),
                cached: false,
            }),
        }
    }
    // The CPU has one device; a --device meant for a GPU does not apply.
    let cpu_opts = BackendOptions {
        device: None,
        ..opts.backend
    };
    Ok(AutoChoice {
        name: "cpu",
        backend: registry::create("cpu", &cpu_opts)?,
        skipped,
    })
}

fn probe_once(name: &str, opts: &AutoOptions) -> CachedVerdict {
    let spec = probe_spec(name, opts);
    match probe::run_case(&opts.exe, &spec, opts.probe_timeout) {
        Ok(report) => match report.problem() {
            None => CachedVerdict::new(true, report.device, None),
            Some(p) => CachedVerdict::new(false, report.device, Some(p)),
        },
        Err(e) => CachedVerdict::new(
            false,
            None,
            Some(format!("could not start the probe process: {e}")),
        ),
    }
}

/// Records that `name` failed in a real run (a timeout, a lost device), so
/// the next `auto` run passes it over without probing.
pub fn record_failure(
    cache_dir: Option<&std::path::Path>,
    name: &str,
    device: Option<usize>,
    reason: &str,
) {
    let mut verdicts = VerdictCache::open(cache_dir);
    verdicts.put(
        cache::key(name, device),
        CachedVerdict::new(
            false,
            None,
            Some(format!("failed in an earlier run: {reason}")),
        ),
    );
}
