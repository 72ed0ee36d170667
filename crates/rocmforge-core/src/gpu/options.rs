//! [`GpuOptions`]: the switches every GPU backend shares, read from the
//! environment once, one name per switch.

use std::time::Duration;

/// Default bound on every wait for the device.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default estimated GPU time of one submission (see
/// [`GpuOptions::submit_budget`]).
pub const DEFAULT_SUBMIT_BUDGET: Duration = Duration::from_secs(1);

/// Which recorded launches [`super::GpuBackend`] lists when it records a
/// graph (`ROCMFORGE_GPU_LOG_LAUNCHES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLaunches {
    Off,
    /// One line per graph: how many launches in how many parts.
    Count,
    /// That, then every launch's label.
    All,
}

/// The shared switches. [`GpuOptions::from_env`] reads:
///
/// | variable | field |
/// |---|---|
/// | `ROCMFORGE_GPU_TIMEOUT` (seconds) | `timeout` |
/// | `ROCMFORGE_GPU_MAX_REGION` (bytes) | `max_region` |
/// | `ROCMFORGE_GPU_FUSE=0` | `fuse` |
/// | `ROCMFORGE_GPU_MATVEC_INT=0` | `int_matvec` |
/// | `ROCMFORGE_GPU_GROUPED_EXPERTS=0` | `grouped_experts` |
/// | `ROCMFORGE_GPU_LOG_LAUNCHES` (`1`, `all`) | `log_launches` |
/// | `ROCMFORGE_GPU_SKIP_LAUNCHES` (text) | `skip_launches` |
/// | `ROCMFORGE_GPU_SUBMIT_MS` (milliseconds) | `submit_budget` |
/// | `ROCMFORGE_GPU_COMPUTE_UNITS` (count) | `compute_units` |
/// | `ROCMFORGE_GPU_BIG_TILES` (count) | `big_tiles` |
/// | `ROCMFORGE_GPU_SPLIT_MIN` (positions) | `split_min` |
/// | `ROCMFORGE_GPU_INT_TEAMS` (count) | `int_teams` |
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuOptions {
    /// Bound on every wait for the device.
    pub timeout: Duration,
    /// Cap on one weight region, below the device's own (tests splitting).
    pub max_region: Option<u64>,
    /// Fuse where core's fusion rules allow (off, for measurement: no op
    /// folds into the one before it; matmuls that read one input, such as
    /// Q/K/V or gate/up, still share a launch).
    pub fuse: bool,
    /// Integer decode mat-vecs over Q8-packed activations (off: the f32
    /// mat-vec, for measurement).
    pub int_matvec: bool,
    /// Prefill expert matmuls grouped by expert where the device groups
    /// (off: the expert mat-vec per pair, for measurement).
    pub grouped_experts: bool,
    pub log_launches: LogLaunches,
    /// Measurement only: leave out every launch whose label contains this
    /// text (`Attention`, `MatMul`), so a benchmark shows what the rest
    /// costs. Results are wrong then.
    pub skip_launches: Option<String>,
    /// The estimated GPU time one submission may take: a step estimated
    /// longer is split into several ([`super::cost`]). The APU watchdog
    /// (about 2 s) ends longer jobs with a lost device.
    pub submit_budget: Duration,
    /// The compute units decode attention is split to fill, in place of
    /// the device's count ([`super::split`]); 0 never splits. For tests
    /// of the split on small devices, and measurement.
    pub compute_units: Option<u32>,
    /// 128x128 matrix-core tiles for matmuls of at least this many of them
    /// where the device has matrix-core kernels (`None`: the lowering's
    /// rule, [`super::MatrixTiles::Auto`]; 0 puts every one there, for
    /// tests; measurement).
    pub big_tiles: Option<usize>,
    /// The fewest positions a split decode attention run takes, in place
    /// of [`super::split::SPLIT_MIN_POSITIONS`] (measurement; at least 1).
    pub split_min: Option<u32>,
    /// Teams every dense integer mat-vec workgroup splits into at least
    /// (measurement; a power of two, on devices that split into teams).
    pub int_teams: Option<u32>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            timeout: DEFAULT_TIMEOUT,
            max_region: None,
            fuse: true,
            int_matvec: true,
            grouped_experts: true,
            log_launches: LogLaunches::Off,
            skip_launches: None,
            submit_budget: DEFAULT_SUBMIT_BUDGET,
            compute_units: None,
            big_tiles: None,
            split_min: None,
            int_teams: None,
        }
    }
}

impl GpuOptions {
    /// Defaults, then the environment (see the table above).
    pub fn from_env() -> GpuOptions {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// As [`GpuOptions::from_env`], reading variables through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> GpuOptions {
        let var = |k: &str| var(k).filter(|v| !v.is_empty());
        let off = |k: &str| var(k).is_some_and(|v| v == "0");
        let d = GpuOptions::default();
        GpuOptions {
            timeout: var("ROCMFORGE_GPU_TIMEOUT")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map_or(d.timeout, Duration::from_secs_f64),
            max_region: var("ROCMFORGE_GPU_MAX_REGION").and_then(|v| v.parse().ok()),
            fuse: !off("ROCMFORGE_GPU_FUSE"),
            int_matvec: !off("ROCMFORGE_GPU_MATVEC_INT"),
            grouped_experts: !off("ROCMFORGE_GPU_GROUPED_EXPERTS"),
            log_launches: match var("ROCMFORGE_GPU_LOG_LAUNCHES").as_deref() {
                None | Some("0") => LogLaunches::Off,
                Some("all") => LogLaunches::All,
                Some(_) => LogLaunches::Count,
            },
            skip_launches: var("ROCMFORGE_GPU_SKIP_LAUNCHES"),
            submit_budget: var("ROCMFORGE_GPU_SUBMIT_MS")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map_or(d.submit_budget, |ms| Duration::from_secs_f64(ms / 1e3)),
            compute_units: var("ROCMFORGE_GPU_COMPUTE_UNITS").and_then(|v| v.parse().ok()),
            big_tiles: var("ROCMFORGE_GPU_BIG_TILES").and_then(|v| v.parse().ok()),
            split_min: var("ROCMFORGE_GPU_SPLIT_MIN")
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0),
            int_teams: var("ROCMFORGE_GPU_INT_TEAMS")
                .and_then(|v| v.parse::<u32>().ok())
                .filter(|n| n.is_power_of_two()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_switch_has_one_name() {
        let vars = [
            ("ROCMFORGE_GPU_TIMEOUT", "2.5"),
            ("ROCMFORGE_GPU_MAX_REGION", "4096"),
            ("ROCMFORGE_GPU_FUSE", "0"),
            ("ROCMFORGE_GPU_MATVEC_INT", "0"),
            ("ROCMFORGE_GPU_GROUPED_EXPERTS", "0"),
            ("ROCMFORGE_GPU_LOG_LAUNCHES", "all"),
            ("ROCMFORGE_GPU_SKIP_LAUNCHES", "MatMul"),
            ("ROCMFORGE_GPU_SUBMIT_MS", "250"),
            ("ROCMFORGE_GPU_COMPUTE_UNITS", "0"),
            ("ROCMFORGE_GPU_BIG_TILES", "0"),
            ("ROCMFORGE_GPU_SPLIT_MIN", "16"),
            ("ROCMFORGE_GPU_INT_TEAMS", "4"),
        ];
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        let o = GpuOptions::from_vars(get);
        assert_eq!(
            o,
            GpuOptions {
                timeout: Duration::from_millis(2500),
                max_region: Some(4096),
                fuse: false,
                int_matvec: false,
                grouped_experts: false,
                log_launches: LogLaunches::All,
                skip_launches: Some("MatMul".into()),
                submit_budget: Duration::from_millis(250),
                compute_units: Some(0),
                big_tiles: Some(0),
                split_min: Some(16),
                int_teams: Some(4),
            }
        );
        assert_eq!(GpuOptions::from_vars(|_| None), GpuOptions::default());
        // Nonsense falls back to the default rather than to zero.
        let bad = GpuOptions::from_vars(|k| (k == "ROCMFORGE_GPU_TIMEOUT").then(|| "-1".into()));
        assert_eq!(bad.timeout, DEFAULT_TIMEOUT);
        // Teams are a power of two, runs at least a position.
        let odd = |k: &str| match k {
            "ROCMFORGE_GPU_INT_TEAMS" => Some("3".into()),
            "ROCMFORGE_GPU_SPLIT_MIN" => Some("0".into()),
            _ => None,
        };
        let odd = GpuOptions::from_vars(odd);
        assert_eq!((odd.int_teams, odd.split_min), (None, None));
    }
}
