//! Every weight type the core supports, on every backend, against the CPU
//! backend: generated models in two shapes — tiny-llama (rows of 256 and
//! 768: whole K-quant blocks) and tiny-qwen2 (rows of 64 and 176: K-quants
//! fall back as llama-quantize does, ffn_down to F16, and no dimension is a
//! multiple of a typical workgroup tile).

use std::sync::Arc;

use rocmforge_conformance::*;
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;

/// The weight types a software device (lavapipe) runs the long-prompt
/// and the ragged-shape tests on: one of every kind of weight reader
/// (float, 32-value blocks with and without a minimum, Q8_0's word loads,
/// K-quants, i-quants and their short rows, MXFP4's table), the set
/// `.ci/run` runs op_shapes on at every subgroup width, and BF16. All 25
/// on those tests took lavapipe ~20 of CI's minutes; every type's kernels
/// are still checked on it by op_shapes (whose shapes are ragged) and by
/// the 16-token comparisons on tiny-llama and tiny-mixtral, and every type
/// runs every test here on hardware.
const SOFTWARE_TYPES: &[QuantType] = &[
    QuantType::F32,
    QuantType::F16,
    QuantType::BF16,
    QuantType::Q4_0,
    QuantType::Q5_1,
    QuantType::Q8_0,
    QuantType::Q4K,
    QuantType::Q6K,
    QuantType::IQ1S,
    QuantType::IQ4XS,
    QuantType::MXFP4,
];

/// Runs `check(model, backend, label)` for every weight type of `preset`
/// on every backend but the reference, once per distinct set of weight
/// types (llama-quantize's fallbacks make some types the same model). With
/// `software_types`, a backend that runs here only on a software device
/// takes just those types (the others are printed as left out).
fn each_type(
    preset: &str,
    software_types: Option<&[QuantType]>,
    check: impl Fn(&Arc<Model>, &str, &str),
) {
    let backends: Vec<_> = backends_under_test()
        .into_iter()
        .filter(|&b| b != "cpu")
        .collect();
    if backends.is_empty() {
        eprintln!("weight types on {preset}: no backend but the reference (cpu) here");
        return;
    }
    let on_hardware = match software_types {
        Some(_) => backends_on_hardware("it takes this test on a subset of the types"),
        None => backends.clone(),
    };
    let mut seen = Vec::new();
    for ty in QuantType::supported() {
        let runs_on: Vec<_> = backends
            .iter()
            .copied()
            .filter(|b| {
                on_hardware.contains(b) || software_types.is_none_or(|set| set.contains(&ty))
            })
            .collect();
        if runs_on.is_empty() {
            eprintln!(
                "{preset} {ty}: left out on {backends:?} (a software device), see SOFTWARE_TYPES"
            );
            continue;
        }
        let model = generated_model(preset, ty);
        let types = weight_types_of(&model);
        if let Some((first, _)) = seen.iter().find(|(_, t)| *t == types) {
            eprintln!("{preset} {ty}: the same weights' types as {first}, checked there");
            continue;
        }
        seen.push((ty, types));
        for &backend in &runs_on {
            let _device = device_lock();
            check(&model, backend, &format!("{preset} {ty}"));
        }
    }
}

fn check_preset(preset: &str, software_types: Option<&[QuantType]>) {
    each_type(preset, software_types, |model, backend, label| {
        compare_with_cpu(model, backend, label, VS_CPU);
    });
}

#[test]
fn every_weight_type_on_tiny_llama() {
    check_preset("tiny-llama", None);
}

/// The expert mat-vec of every type (mixture-of-experts layers).
#[test]
fn every_weight_type_on_tiny_mixtral() {
    check_preset("tiny-mixtral", None);
}

#[test]
fn every_weight_type_on_ragged_tiny_qwen2() {
    check_preset("tiny-qwen2", Some(SOFTWARE_TYPES));
}

/// Issue 26's shape: expert rows of 2 and 3 blocks of 32, fewer blocks than
/// lavapipe's 8 lanes, on 3 layers.
#[test]
fn every_weight_type_on_ragged_tiny_qwen3moe() {
    check_preset("tiny-qwen3moe-ragged", Some(SOFTWARE_TYPES));
}

/// A 150-token prompt in one graph, for every type: the prefill matmul's
/// token tiles (32 tokens in the portable kernel, 64 or 128 on matrix
/// cores, the last one ragged), which the comparisons above (16 tokens a
/// graph) never reach. `ROCMFORGE_GPU_BIG_TILES=0` puts every one on
/// 128×128 tiles.
#[test]
fn every_weight_type_in_a_long_prompt() {
    each_type(
        "tiny-llama",
        Some(SOFTWARE_TYPES),
        |model, backend, label| {
            compare_at_depth_with_cpu(model, backend, label, (150, 256), VS_CPU);
        },
    );
}

/// The same for the experts' types: a 150-token prompt groups its 300
/// (token, choice) pairs by expert (`moe_group`, `matmul_id_*`), about 38
/// pairs for each of 8 experts, so two tiles of 32 each, on issue 26's
/// ragged expert rows.
#[test]
fn every_expert_type_in_a_long_prompt() {
    each_type(
        "tiny-qwen3moe-ragged",
        Some(SOFTWARE_TYPES),
        |model, backend, label| {
            compare_at_depth_with_cpu(model, backend, label, (150, 256), VS_CPU);
        },
    );
}
