//! Decode steps against llama.cpp for every weight type of the experts, on
//! every backend: the model of issue 26 (`tiny-qwen3moe-ragged`: expert rows
//! of 64 and 96 values, 2 and 3 blocks of 32, fewer blocks than a subgroup
//! has lanes), whose Q8_0 experts once decoded wrongly on lavapipe.
//!
//! A whole row of logits per step and type would be 600 KB, so the
//! reference keeps each decode step in brief (`<stem>.decode`, written by
//! `benches/reference/refdump.cpp`): the row's standard deviation σ and its
//! 16 largest logits. Each step must put the same logits there, within the
//! families' bound in σ, and pick the reference's token where its margin is
//! clear. The K-quants fall back as llama-quantize does (64 and 96 are not
//! multiples of 256), so every type's stem names the experts the generator
//! actually wrote.

use rocmforge_conformance::*;
use rocmforge_core::quant::QuantType;
use rocmforge_core::session::SessionOptions;

const PRESET: &str = "tiny-qwen3moe-ragged";

/// The families' bound against llama.cpp (tests/families.rs), here on the
/// 16 largest logits of each step.
const MAX_SIGMA: f32 = 0.2;
const CLEAR_MARGIN: f32 = 0.05;

#[test]
fn every_expert_type_decodes_as_llama_cpp() {
    let backends = backends_under_test();
    let mut seen = Vec::new();
    for ty in QuantType::supported() {
        let GeneratedReference {
            stem,
            model,
            tokens: prompt,
            greedy,
        } = generated_reference(PRESET, ty);
        // Types that fell back to a list already checked compute the same
        // thing (their references are equal too, which this confirms).
        let types = weight_types_of(&model);
        if let Some((first, _)) = seen.iter().find(|(_, t)| *t == types) {
            let first_stem = format!("{PRESET}-{first}");
            assert_eq!(
                reference_text(&stem, "decode"),
                reference_text(&first_stem, "decode"),
                "{stem}: same weight types as {first_stem}, different reference"
            );
            eprintln!("{stem}: the same weight types as {first_stem}, checked there");
            continue;
        }
        seen.push((ty, types));
        let reference = reference_decode(&stem);
        assert_eq!(reference.len(), greedy.len(), "{stem}: steps");
        for &backend in &backends {
            let _device = device_lock();
            let opts = SessionOptions {
                kv_types: Default::default(),
                n_ctx: 256,
                n_batch: 64,
                all_logits: false,
                n_seq: 1,
            };
            let mut s = session(&model, backend, opts);
            let mut logits = s.eval(&prompt).unwrap().to_vec();
            let mut worst = 0f32;
            for (i, (&(token, margin), step)) in greedy.iter().zip(&reference).enumerate() {
                for &(id, want) in &step.top {
                    let err = (logits[id as usize] - want).abs() / step.sd;
                    worst = worst.max(err);
                    assert!(
                        err <= MAX_SIGMA,
                        "{backend} {stem}: decode step {i}, logit of token {id} is {} where \
                         llama.cpp has {want} ({err:.3}σ off)",
                        logits[id as usize]
                    );
                }
                if margin > CLEAR_MARGIN {
                    assert_eq!(
                        argmax(&logits),
                        token,
                        "{backend} {stem}: greedy token {i} (reference margin {margin})"
                    );
                }
                logits = s.eval(&[token]).unwrap().to_vec();
            }
            eprintln!(
                "{backend} {stem}: {} decode steps agree with llama.cpp, worst {worst:.4}σ",
                greedy.len()
            );
        }
    }
}
