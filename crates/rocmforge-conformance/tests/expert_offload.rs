//! `--n-cpu-moe`: every backend with the experts of some layers on the CPU
//! backend ([`ExpertOffload`]) gives the logits and greedy tokens it gives
//! alone, and leaves those experts out of its device memory.

use std::sync::Arc;

use rocmforge_conformance::*;
use rocmforge_core::backend::Backend;
use rocmforge_core::expert_offload::{expert_weights, ExpertOffload};
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;
use rocmforge_core::session::Session;

/// Mixture-of-experts families: plain routed experts, experts with biases
/// in MXFP4 (gpt-oss), a shared expert beside them (qwen2moe), K-quants.
const MODELS: &[(&str, QuantType)] = &[
    ("tiny-qwen3moe", QuantType::Q8_0),
    ("tiny-gpt-oss", QuantType::MXFP4),
    ("tiny-qwen2moe", QuantType::Q8_0),
    ("tiny-mixtral", QuantType::Q4K),
];

fn offload(backend: &str, model: &Model, n: usize) -> Box<dyn Backend> {
    Box::new(
        ExpertOffload::new(create(backend), create("cpu"), model, n)
            .unwrap_or_else(|e| panic!("{backend} --n-cpu-moe {n}: {e}")),
    )
}

fn session_on(model: &Arc<Model>, backend: Box<dyn Backend>) -> Session {
    Session::new(
        Arc::clone(model),
        backend,
        compare_options(true),
        &mut |_, _| {},
    )
    .unwrap_or_else(|e| panic!("session: {e}"))
}

/// The CPU backend split with itself runs the same kernels on the same
/// values, so any difference is the split's: imports or exports missed,
/// stale or misplaced. It must be bit for bit the unsplit run.
#[test]
fn the_cpu_split_with_itself_is_exact() {
    for &(preset, ty) in MODELS {
        let model = generated_model(preset, ty);
        let n_vocab = model.config.n_vocab;
        for n in [1, model.config.n_layer] {
            let mut split = session_on(&model, offload("cpu", &model, n));
            let mut whole = session_on(&model, create("cpu"));
            for (i, &len) in PROMPT_LENGTHS.iter().enumerate() {
                split.reset();
                whole.reset();
                let prompt = random_tokens(len, n_vocab, 7 + i as u64);
                let a = split.eval(&prompt).unwrap().to_vec();
                let b = whole.eval(&prompt).unwrap().to_vec();
                assert!(
                    a == b,
                    "{preset} {ty} --n-cpu-moe {n}: prompt of {len} differs"
                );
            }
            for step in 0..4u32 {
                let a = split.eval(&[step + 1]).unwrap().to_vec();
                let b = whole.eval(&[step + 1]).unwrap().to_vec();
                assert!(
                    a == b,
                    "{preset} {ty} --n-cpu-moe {n}: decode step {step} differs"
                );
            }
        }
    }
}

/// Each GPU backend with the experts of the first layer, and of every
/// layer, on the CPU agrees with the CPU backend as closely as it does
/// alone, and its device holds that many fewer weight bytes.
#[test]
fn gpu_backends_with_experts_on_the_cpu_match_the_cpu_backend() {
    for backend in backends_under_test() {
        if backend == "cpu" {
            continue;
        }
        let _device = device_lock();
        for &(preset, ty) in MODELS {
            let model = generated_model(preset, ty);
            let whole_bytes = session_on(&model, create(backend))
                .backend()
                .allocations()
                .weight_bytes;
            for n in [1, model.config.n_layer] {
                let what = format!("{preset} {ty} --n-cpu-moe {n}");
                compare_made_with_cpu(
                    &model,
                    backend,
                    &|| offload(backend, &model, n),
                    &what,
                    VS_CPU,
                );
                let kept: u64 = expert_weights(&model, n)
                    .iter()
                    .map(|&w| model.weights.table[w].n_bytes)
                    .sum();
                let split_bytes = session_on(&model, offload(backend, &model, n))
                    .backend()
                    .allocations()
                    .weight_bytes;
                // Region alignment may round each side up a little.
                assert!(
                    split_bytes + kept <= whole_bytes + 4096,
                    "{what}: device weights {split_bytes} + kept out {kept} > {whole_bytes}"
                );
            }
        }
    }
}

/// A model without experts in the layers named is refused in one line.
#[test]
fn a_model_without_experts_there_is_refused() {
    let model =
        Arc::new(Model::load(&fixture_path("tiny-llama-Q4_K_M.gguf")).expect("fixture loads"));
    let err = ExpertOffload::new(create("cpu"), create("cpu"), &model, 2)
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("--n-cpu-moe 2") && !msg.contains('\n'),
        "{msg}"
    );
}
