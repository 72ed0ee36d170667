//! Every weight type the core supports, on every backend, against the CPU
//! backend: generated models in two shapes — tiny-llama (rows of 256 and
//! 768: whole K-quant blocks) and tiny-qwen2 (rows of 64 and 176: K-quants
//! fall back as llama-quantize does, ffn_down to F16, and no dimension is a
//! multiple of a typical workgroup tile).

use rocmforge_conformance::*;

fn check_preset(preset: &str) {
    let backends: Vec<_> = backends_under_test()
        .into_iter()
        .filter(|&b| b != "cpu")
        .collect();
    if backends.is_empty() {
        eprintln!("weight types on {preset}: no backend but the reference (cpu) here");
        return;
    }
    let mut seen = Vec::new();
    for ty in rocmforge_core::quant::QuantType::supported() {
        let model = generated_model(preset, ty);
        let types = weight_types_of(&model);
        if let Some((first, _)) = seen.iter().find(|(_, t)| *t == types) {
            eprintln!("{preset} {ty}: the same weights' types as {first}, checked there");
            continue;
        }
        seen.push((ty, types));
        for &backend in &backends {
            let _device = device_lock();
            compare_with_cpu(&model, backend, &format!("{preset} {ty}"), VS_CPU);
        }
    }
}

#[test]
fn every_weight_type_on_tiny_llama() {
    check_preset("tiny-llama");
}

/// The expert mat-vec of every type (mixture-of-experts layers).
#[test]
fn every_weight_type_on_tiny_mixtral() {
    check_preset("tiny-mixtral");
}

#[test]
fn every_weight_type_on_ragged_tiny_qwen2() {
    check_preset("tiny-qwen2");
}

/// Issue 26's shape: expert rows of 2 and 3 blocks of 32, fewer blocks than
/// lavapipe's 8 lanes, on 3 layers.
#[test]
fn every_weight_type_on_ragged_tiny_qwen3moe() {
    check_preset("tiny-qwen3moe-ragged");
}
