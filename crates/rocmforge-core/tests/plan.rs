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

#[test]
fn fusable_runs_are_found_in_every_layer() {
    use rocmforge_core::graph::fusion::{next_matmul_reads, residual_add_after, rope_store_at};
    use rocmforge_core::graph::Op;
    let model = Model::load(&fixture("tiny-qwen2-Q8_0.gguf")).unwrap();
    let layers = model.config.n_layer;
    for n in [1, 7] {
        let g = build_graph(&model, n, false);
        let plan = ArenaPlan::new(&g);
        let adds: Vec<_> = (0..g.ops.len())
            .filter_map(|i| residual_add_after(&g, &plan, i).map(|r| (i, r)))
            .collect();
        // Both residual adds of every layer (after wo and after w_down).
        assert_eq!(adds.len(), 2 * layers, "n={n}");
        for &(i, r) in &adds {
            let Op::Add { a, b, out } = g.ops[i + 1] else {
                panic!("op after a fused matmul is not an add");
            };
            assert_eq!(out, r.out);
            assert!(a == r.residual || b == r.residual);
        }
        let ropes: Vec<_> = (0..g.ops.len())
            .filter_map(|i| rope_store_at(&g, i))
            .collect();
        assert_eq!(ropes.len(), layers);
        assert!(ropes.iter().enumerate().all(|(l, r)| r.layer == l));
        // RmsNorm -> QKV, RmsNorm -> gate/up, SwiGlu -> down, Attention -> wo
        // per layer, and the output norm -> output head.
        let producers = (0..g.ops.len())
            .filter(|&i| {
                g.ops[i]
                    .outputs()
                    .first()
                    .is_some_and(|&t| next_matmul_reads(&g, i, t))
            })
            .count();
        assert_eq!(producers, 4 * layers + 1, "n={n}");
    }
}

#[test]
fn a_matmul_output_read_twice_is_not_fused_with_its_add() {
    use rocmforge_core::graph::fusion::residual_add_after;
    use rocmforge_core::graph::Op;
    let model = Model::load(&fixture("tiny-qwen2-Q8_0.gguf")).unwrap();
    let mut g = build_graph(&model, 1, false);
    let plan = ArenaPlan::new(&g);
    let i = (0..g.ops.len())
        .find(|&i| residual_add_after(&g, &plan, i).is_some())
        .unwrap();
    let Op::MatMul { out, .. } = g.ops[i] else {
        unreachable!()
    };
    // A later reader of the matmul's output forbids the fusion.
    let extra = g.tensors.len();
    g.tensors.push(g.tensor(out));
    g.ops.push(Op::LastRow { x: out, out: extra });
    assert_eq!(residual_add_after(&g, &plan, i), None);
}
