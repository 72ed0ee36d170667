//! The arena planner on real model graphs: no two live tensors overlap, and
//! reuse brings the arena far below the naive sum.

use std::path::PathBuf;

use rocmforge_core::graph::build_graph;
use rocmforge_core::model::Model;
use rocmforge_core::plan::ArenaPlan;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference")
        .join(name)
}

#[test]
fn plans_are_valid_and_reuse_memory() {
    for name in [
        "tiny-llama-Q4_K_M.gguf",
        "tiny-qwen2-Q8_0.gguf",
        "tiny-qwen3-Q8_0.gguf",
    ] {
        let model = Model::load(&fixture(name)).unwrap();
        for (n, all) in [(1, false), (7, true), (64, false), (512, true)] {
            let g = build_graph(&model, n, all);
            let plan = ArenaPlan::new(&g);
            plan.verify(&g)
                .unwrap_or_else(|e| panic!("{name} n={n}: {e}"));
            eprintln!(
                "{name} n={n}: arena {} naive {}",
                plan.arena_bytes, plan.naive_bytes
            );
            // The logits dwarf a tiny model's activations; without them, reuse
            // must at least halve the memory (it is ~n_layer times less).
            let logits = g.tensor(g.logits).bytes();
            assert!(
                (plan.arena_bytes - logits) * 2 < plan.naive_bytes - logits,
                "{name} n={n}: arena {} vs naive {}",
                plan.arena_bytes,
                plan.naive_bytes
            );
            let rows = if all { n } else { 1 };
            assert_eq!(g.tensor(g.logits).rows, rows);
            assert_eq!(g.tensor(g.logits).cols, model.config.n_vocab);
        }
    }
}

#[test]
fn arena_does_not_grow_with_depth() {
    let model = Model::load(&fixture("tiny-qwen2-Q8_0.gguf")).unwrap();
    let full = build_graph(&model, 16, true);
    let plan = ArenaPlan::new(&full);
    // The peak must be bounded by a layer's worth of live tensors plus the
    // residual stream and logits, whatever n_layer is.
    let widest: usize = full.tensors.iter().map(|t| t.bytes()).max().unwrap();
    let per_layer = full.tensors.len() / model.config.n_layer;
    assert!(
        plan.arena_bytes <= widest * per_layer,
        "{} > {}",
        plan.arena_bytes,
        widest * per_layer
    );
}
