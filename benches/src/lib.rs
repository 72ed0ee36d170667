//! rocmforge-benches: Criterion benchmarks of the compute kernels, one group
//! per op and backend, with throughput in bytes/s or FLOP/s so the figures
//! can be set against the machine's roofline (memory bandwidth for decode,
//! peak arithmetic for prefill).
//!
//! The bench targets live in `benches/`; this library holds what they share:
//! the Criterion settings and deterministic inputs. Only the CPU backend
//! exists so far, and its kernels are measured on **one thread**, as the
//! executor runs them on each of its threads; multiply by the thread count
//! only where the op is not memory-bound.
//!
//! `cargo bench -p rocmforge-benches` runs everything (a few minutes) and
//! writes HTML reports under `target/criterion`; `cargo bench -p
//! rocmforge-benches -- matvec/Q4_0` runs one group's matching benchmarks.
//! See `docs/kernel-benches.md` for the groups and their units.

pub mod inputs;

use std::time::Duration;

use criterion::Criterion;

/// Settings for every group: few, short samples, so that the whole suite
/// stays within minutes on a two-core machine shared with other work.
/// Command-line options (`--quick`, `--sample-size`, ...) still override them.
///
/// Fewer bootstrap resamples than Criterion's 100 000: the HTML report plots
/// a density estimate of each resampled statistic, and at the default that
/// took ~5 s per benchmark here, more than the measurement. Ten thousand
/// still give stable intervals for ten samples.
pub fn criterion() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .nresamples(10_000)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args()
}
