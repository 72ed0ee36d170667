//! The backend allocates a constant number of device buffers per model
//! (weight regions, KV cache, arena, one host-visible buffer), whatever the
//! model's tensor count; splitting the weights across regions and uploading
//! through the staging buffer change nothing in the results.

mod common;

use std::path::PathBuf;

use rocmforge_core::gpu::GpuOptions;
use rocmforge_core::quant::QuantType;
use rocmforge_vulkan::VulkanOptions;

use common::options;

fn generated(preset: &str, ty: QuantType) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vulkan-models");
    rocmforge_genmodel::cached(rocmforge_genmodel::find(preset).unwrap(), ty, &dir).unwrap()
}

/// Logits of a short prompt and two decode steps, and the allocation count.
fn run(
    path: &std::path::Path,
    opts: VulkanOptions,
    gpu: GpuOptions,
) -> Option<(Vec<f32>, usize, u64)> {
    let backend = common::open_or_skip_with(opts, gpu)?;
    let r = rocmforge_testkit::short_run(Box::new(backend), path);
    Some((r.logits, r.allocations, r.weight_bytes))
}

#[test]
fn allocation_count_does_not_grow_with_the_model() {
    let Some((_, small, _)) = run(
        &generated("tiny-qwen3", QuantType::Q8_0),
        options(),
        GpuOptions::from_env(),
    ) else {
        return;
    };
    let (_, big, _) = run(
        &generated("tiny-llama", QuantType::Q8_0),
        options(),
        GpuOptions::from_env(),
    )
    .unwrap();
    // Weights, KV cache, arena, host-visible step inputs and logits.
    assert_eq!(small, 4);
    assert_eq!(big, 4);
}

#[test]
fn split_weight_regions_and_staged_upload_give_the_same_logits() {
    let path = generated("tiny-qwen3", QuantType::Q8_0);
    let Some((plain, n, bytes)) = run(&path, options(), GpuOptions::from_env()) else {
        return;
    };
    // A cap just above the embedding table (10.3 MB of 10.5): it fills one
    // region, the other tensors go to the next.
    let cap = 10_400_000;
    let (split, n_split, _) = run(
        &path,
        options(),
        GpuOptions {
            max_region: Some(cap),
            ..GpuOptions::from_env()
        },
    )
    .unwrap();
    let regions = n_split - 3;
    assert!(regions >= 2, "{regions} regions for {bytes} bytes");
    assert_eq!(split, plain);
    let (staged, n_staged, _) = run(
        &path,
        VulkanOptions {
            force_staging: true,
            ..options()
        },
        GpuOptions::from_env(),
    )
    .unwrap();
    assert_eq!(n_staged, n);
    assert_eq!(staged, plain);
}

/// A step over the submission budget runs as several submissions (one per
/// op with a zero budget; lavapipe is where steps are slowest) and gives
/// the logits of one submission: only fusions across a cut are undone.
#[test]
fn a_step_split_into_submissions_gives_the_same_logits() {
    let path = generated("tiny-qwen3", QuantType::Q8_0);
    let Some((whole, n, _)) = run(&path, options(), GpuOptions::from_env()) else {
        return;
    };
    let split = GpuOptions {
        submit_budget: std::time::Duration::ZERO,
        ..GpuOptions::from_env()
    };
    let (cut, n_cut, _) = run(&path, options(), split).unwrap();
    assert_eq!(n_cut, n, "no allocation per submission");
    let sd = {
        let m = whole.iter().sum::<f32>() / whole.len() as f32;
        (whole.iter().map(|x| (x - m).powi(2)).sum::<f32>() / whole.len() as f32).sqrt()
    };
    let worst = whole
        .iter()
        .zip(&cut)
        .map(|(a, b)| (a - b).abs() / sd)
        .fold(0f32, f32::max);
    assert!(cut.iter().all(|v| v.is_finite()));
    assert!(worst <= 0.01, "split submissions differ by {worst}σ");
}
