//! Where a replayed part's GPU time goes, kernel by kernel
//! (`ROCMFORGE_VULKAN_PROFILE=1`, as llama.cpp's `GGML_VK_PERF_LOGGER`).
//!
//! A profiled part writes a timestamp before its first dispatch and one
//! after each dispatch's barrier, so dispatch `i` is charged the time from
//! the end of dispatch `i - 1` to its own end: its run, its barrier and any
//! gap before it, which is what it costs the replay. Each submit adds the
//! intervals up; freeing the part prints one table (per kernel: launches,
//! µs a replay) to stderr. Off, nothing is recorded and nothing is read.

use std::collections::HashMap;

use ash::vk;
use rocmforge_core::backend::BackendError;

use crate::error::Check;

/// Timestamps one part records at most (dispatches + 1); later dispatches
/// go unmeasured.
pub const MAX_STAMPS: u32 = 16384;

/// Whether `ROCMFORGE_VULKAN_PROFILE` asks for the profile.
pub fn wanted() -> bool {
    std::env::var("ROCMFORGE_VULKAN_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Whether the profile keeps launches of one kernel apart by their grid
/// (`ROCMFORGE_VULKAN_PROFILE=groups`): a model's output head and its
/// attention projections run one mat-vec kernel on grids of very different
/// sizes, and this tells their times apart.
pub fn by_grid() -> bool {
    std::env::var("ROCMFORGE_VULKAN_PROFILE").is_ok_and(|v| v == "groups")
}

/// The name a dispatch of `kernel` over `groups` workgroups is profiled
/// under.
pub fn entry_name(kernel: &str, groups: u32, by_grid: bool) -> String {
    if by_grid {
        format!("{kernel} ({groups} groups)")
    } else {
        kernel.to_owned()
    }
}

/// What a profiled part recorded: its query pool, and the kernel of each
/// dispatch that has a timestamp after it.
pub struct PartStamps {
    pub pool: vk::QueryPool,
    pub kernels: Vec<String>,
}

/// The ticks each dispatch of a part took, summed over its submits.
#[derive(Default)]
pub struct Totals {
    ticks: Vec<u64>,
    submits: u64,
}

/// A query pool of [`MAX_STAMPS`] timestamps.
pub fn create_pool(device: &ash::Device) -> Result<vk::QueryPool, BackendError> {
    let ci = vk::QueryPoolCreateInfo::default()
        .query_type(vk::QueryType::TIMESTAMP)
        .query_count(MAX_STAMPS);
    // SAFETY: valid device and create info.
    unsafe { device.create_query_pool(&ci, None) }
        .check("vkCreateQueryPool")
        .map_err(Into::into)
}

/// Adds the intervals of the submit that just completed to `totals`.
///
/// # Safety
/// The part's last submit has completed (its fence was waited for).
pub unsafe fn collect(
    device: &ash::Device,
    stamps: &PartStamps,
    totals: &mut Totals,
) -> Result<(), BackendError> {
    let n = stamps.kernels.len() + 1;
    let mut raw = vec![0u64; n];
    // SAFETY: queries 0..n were reset and written by the completed submit
    // (the recorder wrote one per kernel plus the first), so their results
    // are available; `raw` holds n 64-bit results.
    unsafe {
        device.get_query_pool_results(stamps.pool, 0, &mut raw, vk::QueryResultFlags::TYPE_64)
    }
    .check("vkGetQueryPoolResults")?;
    totals.ticks.resize(n - 1, 0);
    for (t, w) in totals.ticks.iter_mut().zip(raw.windows(2)) {
        *t += w[1].saturating_sub(w[0]);
    }
    totals.submits += 1;
    Ok(())
}

/// The table of a part's profile, kernels by time, or `None` if it was
/// never submitted.
pub fn table(stamps: &PartStamps, totals: &Totals, tick_ns: f64) -> Option<String> {
    if totals.submits == 0 {
        return None;
    }
    let per_replay = |ticks: u64| ticks as f64 * tick_ns / 1000.0 / totals.submits as f64;
    let mut by_kernel: HashMap<&str, (usize, u64)> = HashMap::new();
    for (k, &t) in stamps.kernels.iter().zip(&totals.ticks) {
        let e = by_kernel.entry(k).or_default();
        e.0 += 1;
        e.1 += t;
    }
    let mut rows: Vec<_> = by_kernel.into_iter().collect();
    rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
    let total: u64 = totals.ticks.iter().sum();
    let mut out = format!(
        "vulkan profile: {} dispatches, {} replays, {:.1} us a replay\n",
        stamps.kernels.len(),
        totals.submits,
        per_replay(total)
    );
    out.push_str(
        "| kernel | launches | us a replay | us each | share |\n|---|---:|---:|---:|---:|\n",
    );
    for (k, (count, ticks)) in rows {
        let us = per_replay(ticks);
        out.push_str(&format!(
            "| {k} | {count} | {us:.1} | {:.2} | {:.1}% |\n",
            us / count as f64,
            100.0 * ticks as f64 / total.max(1) as f64
        ));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_charges_each_kernel_its_intervals() {
        let stamps = PartStamps {
            pool: vk::QueryPool::null(),
            kernels: vec!["a".into(), "b".into(), "a".into()],
        };
        let totals = Totals {
            // Two submits: a took 10 + 30 ticks, b 20 per submit twice.
            ticks: vec![20, 40, 60],
            submits: 2,
        };
        let t = table(&stamps, &totals, 1000.0).unwrap();
        assert!(
            t.contains("3 dispatches, 2 replays, 60.0 us a replay"),
            "{t}"
        );
        assert!(t.contains("| a | 2 | 40.0 | 20.00 | 66.7% |"), "{t}");
        assert!(t.contains("| b | 1 | 20.0 | 20.00 | 33.3% |"), "{t}");
        assert!(table(&stamps, &Totals::default(), 1.0).is_none());
    }

    #[test]
    fn launches_of_one_kernel_are_told_apart_by_grid_when_asked() {
        assert_eq!(entry_name("matvec", 7, false), "matvec");
        assert_eq!(entry_name("matvec", 7, true), "matvec (7 groups)");
    }
}
