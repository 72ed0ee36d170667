//! Decode at depth on every backend against the CPU backend: a prompt of
//! 700 tokens in a context of 1024, then greedy decoding, so decode
//! attention walks hundreds of positions.
//!
//! GPU backends split such attention over runs of positions
//! (`rocmforge_core::gpu::split`) to fill their compute units. Here the
//! count is set to 64 (`ROCMFORGE_GPU_COMPUTE_UNITS`), so even lavapipe on
//! two cores runs the split: 8 runs of 128 positions a (token, head) row on
//! tiny-llama, the last runs empty at first, and its combine, Q8-packed for
//! the integer mat-vec (Q4_0) and plain (Q6_K, which has none); tiny-gpt-oss
//! adds attention sinks folded in by the combine, and sliding-window layers
//! (8 positions: unsplit) between the split ones. This file holds one test,
//! so setting the variable races with nothing.

use rocmforge_conformance::*;
use rocmforge_core::quant::QuantType;

#[test]
fn decode_at_depth_agrees_with_the_cpu() {
    std::env::set_var("ROCMFORGE_GPU_COMPUTE_UNITS", "64");
    let backends: Vec<_> = backends_under_test()
        .into_iter()
        .filter(|&b| b != "cpu")
        .collect();
    if backends.is_empty() {
        eprintln!("decode at depth: no backend but the reference (cpu) here");
        return;
    }
    for (preset, ty) in [
        ("tiny-llama", QuantType::Q4_0),
        ("tiny-llama", QuantType::Q6K),
        ("tiny-gpt-oss", QuantType::Q8_0),
    ] {
        let model = generated_model(preset, ty);
        for &backend in &backends {
            let _device = device_lock();
            let label = format!("{preset} {ty}");
            compare_at_depth_with_cpu(&model, backend, &label, (700, 1024), VS_CPU);
        }
    }
}
