//! [`GpuBackend`]'s own tests, on the mock device: placement, the host
//! layout of a step, exchange, the latch after a stall, the switches.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::backend::matrix_tiles;
use super::mock::{addresses, dense_llama, qwen3_moe, TinyModel};
use super::mock_device::{MockDevice, Seen};
use super::{GpuBackend, GpuOptions, MatrixTiles};
use crate::backend::{Backend, BackendError, GraphId, StepInputs};
use crate::expert_offload::expert_weights;
use crate::gguf::{GgufFile, GgufWriter};
use crate::graph::split::{split_graph, Exchange, GraphPart, Side};
use crate::graph::Graph;
use crate::model::WEIGHT_ALIGN;
use crate::plan::{split_regions, ArenaPlan};
use crate::quant::QuantType;

/// The tiny model with file bytes behind every weight (a file with one
/// tensor as large as the largest weight; every weight reads its start).
fn with_bytes(mut t: TinyModel) -> TinyModel {
    let largest = t
        .model
        .weights
        .table
        .iter()
        .map(|w| w.n_bytes)
        .max()
        .unwrap();
    let n = (largest / 4 + 64) as usize;
    let data: Vec<u8> = (0..n * 4).map(|i| (i * 7 % 251) as u8).collect();
    let mut w = GgufWriter::new();
    w.add_tensor("bytes", &[n as u64], QuantType::F32, data)
        .unwrap();
    t.model.file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
    t
}

fn backend(opts: GpuOptions, max_region: u64) -> (GpuBackend<MockDevice>, Rc<Seen>) {
    let (device, seen) = MockDevice::new(max_region);
    (GpuBackend::new(device, opts), seen)
}

/// A backend with `t` loaded and reserved for graphs of up to 8 tokens.
fn loaded(t: &TinyModel, opts: GpuOptions) -> (GpuBackend<MockDevice>, Rc<Seen>) {
    let (mut b, seen) = backend(opts, u64::MAX);
    b.load(&t.model, &t.kv, &mut |_, _| {}).unwrap();
    let largest = t.graph(8);
    b.reserve(&largest, ArenaPlan::new(&largest).arena_bytes)
        .unwrap();
    (b, seen)
}

#[test]
fn weights_go_where_the_lowering_reads_them() {
    let t = with_bytes(dense_llama(QuantType::Q8_0));
    let (mut b, seen) = loaded(&t, GpuOptions::default());
    let sizes: Vec<u64> = t.model.weights.table.iter().map(|w| w.n_bytes).collect();
    let split = split_regions(&sizes, WEIGHT_ALIGN, u64::MAX).unwrap();
    let region = seen.find("weights");
    for (id, a) in split.assignments.iter().enumerate() {
        let bytes = t.model.weight_bytes(id);
        assert_eq!(region.read(a.offset, bytes.len()), bytes, "weight {id}");
    }
    let g = t.graph(1);
    b.prepare(&g, &ArenaPlan::new(&g)).unwrap();
    let launches = seen.recorded.borrow()[0].clone();
    assert!(launches[0].kernel.starts_with("embed_"), "{launches:?}");
    let table = addresses(&launches[0])[0];
    assert_eq!(
        table,
        ("table", region.address + split.assignments[0].offset)
    );
    // Weights, KV cache, host memory, arena: nothing per graph.
    assert_eq!(b.allocations().device_allocations, 4);
    b.prepare(&t.graph(8), &ArenaPlan::new(&t.graph(8)))
        .unwrap();
    assert_eq!(b.allocations().device_allocations, 4);
}

#[test]
fn a_region_cap_splits_the_weights() {
    let t = with_bytes(dense_llama(QuantType::Q8_0));
    let cap = t
        .model
        .weights
        .table
        .iter()
        .map(|w| w.n_bytes)
        .max()
        .unwrap()
        + 4096;
    let opts = GpuOptions {
        max_region: Some(cap),
        ..GpuOptions::default()
    };
    let (mut b, seen) = backend(opts, u64::MAX);
    b.load(&t.model, &t.kv, &mut |_, _| {}).unwrap();
    let regions = seen
        .allocations
        .borrow()
        .iter()
        .filter(|m| m.what == "weights")
        .count();
    assert!(regions >= 2, "{regions}");
    assert_eq!(b.allocations().device_allocations, regions + 1);
}

#[test]
fn a_step_moves_its_inputs_in_and_its_logits_out() {
    let t = with_bytes(dense_llama(QuantType::Q4_0));
    let (mut b, seen) = loaded(&t, GpuOptions::default());
    let g = t.graph(3);
    let plan = ArenaPlan::new(&g);
    let id = b.prepare(&g, &plan).unwrap();
    let arena = seen.find("activation arena and scratch");
    let inputs = StepInputs::single(&[5, 6, 7], 11);
    step_returns_logits(&mut b, &seen, id, &g, &plan, &inputs);
    // The step inputs reached the device's copy, where the launches read
    // them (pos0, n_kv, n_tokens, 0, then the tokens).
    let step = launches_step(&seen);
    let words: Vec<u32> = arena
        .read(step - arena.address, 32)
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [11, 14, 3, 0, 5, 6, 7, 0]);
}

/// Runs a whole graph's step after writing a pattern where its launches
/// would have left the logits (the mock's launches do nothing), and checks
/// the pattern comes back; returns the exchange for more steps.
fn step_returns_logits(
    b: &mut GpuBackend<MockDevice>,
    seen: &Seen,
    id: GraphId,
    g: &Graph,
    plan: &ArenaPlan,
    inputs: &StepInputs,
) -> Exchange {
    let n = g.tensor(g.logits).rows * g.tensor(g.logits).cols;
    let logits: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let arena = seen.find("activation arena and scratch");
    arena.write(plan.offsets[g.logits] as u64, &bytes);
    let mut exchange = Exchange::new(g, &[GraphPart::whole(g)]);
    b.execute_part(id, 0, inputs, &mut exchange).unwrap();
    assert_eq!(exchange.tensor(g.logits), &logits[..]);
    exchange
}

/// The step-input address the recorded launches were given.
fn launches_step(seen: &Seen) -> u64 {
    let recorded = seen.recorded.borrow();
    let steps: Vec<u64> = recorded[0]
        .iter()
        .flat_map(|l| addresses(l))
        .filter(|(f, _)| *f == "step")
        .map(|(_, a)| a)
        .collect();
    assert!(!steps.is_empty());
    assert!(steps.iter().all(|&s| s == steps[0]), "{steps:?}");
    steps[0]
}

#[test]
fn kept_out_experts_stay_on_the_host_and_cross_through_the_exchange() {
    let t = with_bytes(qwen3_moe(QuantType::Q8_0, QuantType::Q4_0));
    let kept = expert_weights(&t.model, t.model.config.n_layer);
    let (mut b, seen) = backend(GpuOptions::default(), u64::MAX);
    b.load_except(&t.model, &t.kv, &kept, &mut |_, _| {})
        .unwrap();
    let kept_bytes: u64 = kept.iter().map(|&w| t.model.weights.table[w].n_bytes).sum();
    let all: u64 = t.model.weights.table.iter().map(|w| w.n_bytes).sum();
    assert!(b.allocations().weight_bytes <= all - kept_bytes + WEIGHT_ALIGN * 64);
    let g = t.graph(2);
    let plan = ArenaPlan::new(&g);
    let parts = split_graph(&g, &|w| kept.binary_search(&w).is_ok());
    let exchange_bytes = parts.iter().map(|p| p.exchange_bytes(&g)).max().unwrap();
    b.reserve_parts(&g, plan.arena_bytes, exchange_bytes)
        .unwrap();
    // A whole graph reads the kept-out experts: refused.
    assert!(b.prepare(&g, &plan).is_err());
    let device: Vec<GraphPart> = parts
        .iter()
        .filter(|p| p.side == Side::Device)
        .cloned()
        .collect();
    let id = b.prepare_parts(&g, &plan, &device).unwrap();
    // The second device part imports what the host computed: it lands in
    // the arena at the plan's offset.
    let (k, part) = device
        .iter()
        .enumerate()
        .find(|(_, p)| !p.imports.is_empty())
        .unwrap();
    let mut exchange = Exchange::new(&g, &parts);
    let import = part.imports[0];
    let values: Vec<f32> = (0..exchange.tensor(import).len())
        .map(|i| i as f32)
        .collect();
    exchange.tensor_mut(import).copy_from_slice(&values);
    let inputs = StepInputs::single(&[1, 2], 0);
    b.execute_part(id, k, &inputs, &mut exchange).unwrap();
    let arena = seen.find("activation arena and scratch");
    let got = arena.read(plan.offsets[import] as u64, values.len() * 4);
    let want: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(got, want);
}

#[test]
fn a_stall_names_the_launches_in_flight_and_stops_the_backend() {
    let t = with_bytes(dense_llama(QuantType::Q8_0));
    let (mut b, seen) = loaded(&t, GpuOptions::default());
    let g = t.graph(8);
    let id = b.prepare(&g, &ArenaPlan::new(&g)).unwrap();
    let n = seen.recorded.borrow()[0].len();
    assert!(n > 16, "{n} launches");
    *seen.stall_with.borrow_mut() = Some(vec![1, 0, 0, 0, 0, 0, 0, 0]);
    let mut exchange = Exchange::new(&g, &[GraphPart::whole(&g)]);
    let inputs = StepInputs::single(&[1; 8], 0);
    let err = b.execute_part(id, 0, &inputs, &mut exchange).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, BackendError::Timeout { .. }), "{msg}");
    for needle in [
        &format!("launches 9-16 of {n}, from "),
        "of the 8-token graph (mock replay)",
        "likely cause: the test said so",
        "within 1.5 s",
    ] {
        assert!(msg.contains(needle), "no '{needle}' in: {msg}");
    }
    assert!(seen.abandoned.get());
    let again = b.execute_part(id, 0, &inputs, &mut exchange).unwrap_err();
    assert!(matches!(again, BackendError::Unusable { .. }), "{again}");
    let freed = seen.freed.get();
    drop(b);
    assert_eq!(seen.freed.get(), freed, "a stopped backend frees nothing");
}

#[test]
fn a_healthy_backend_frees_everything_it_made() {
    let t = with_bytes(dense_llama(QuantType::Q8_0));
    let (b, seen) = loaded(&t, GpuOptions::default());
    drop(b);
    assert_eq!(seen.freed.get(), seen.allocations.borrow().len());
    assert!(!seen.abandoned.get());
}

#[test]
fn the_shared_switches_override_the_device() {
    let t = with_bytes(dense_llama(QuantType::Q8_0));
    let count = |opts: GpuOptions| {
        let (mut b, seen) = loaded(&t, opts);
        let g = t.graph(1);
        b.prepare(&g, &ArenaPlan::new(&g)).unwrap();
        let launches = seen.recorded.borrow()[0].clone();
        (b.lowering(), launches)
    };
    let (on, fused) = count(GpuOptions::default());
    assert!(on.fuse && on.int_matvec);
    let off = GpuOptions {
        fuse: false,
        int_matvec: false,
        ..GpuOptions::default()
    };
    let (l, unfused) = count(off);
    assert!(!l.fuse && !l.int_matvec);
    assert!(unfused.len() > fused.len());
    assert!(unfused.iter().all(|l| !l.kernel.starts_with("matvec_int_")));
    let skip = GpuOptions {
        skip_launches: Some("Attention".into()),
        ..GpuOptions::default()
    };
    let (_, skipped) = count(skip);
    let attention = fused
        .iter()
        .filter(|l| l.label.contains("Attention"))
        .count();
    assert!(attention > 0);
    assert_eq!(skipped.len(), fused.len() - attention);
    // Big tiles only where the device has matrix-core kernels at all.
    let big = GpuOptions {
        big_tiles: Some(0),
        ..GpuOptions::default()
    };
    assert_eq!(count(big).0.matrix, MatrixTiles::Off);
    assert_eq!(
        matrix_tiles(MatrixTiles::Auto, Some(0)),
        MatrixTiles::BigFrom(0)
    );
    assert_eq!(
        matrix_tiles(MatrixTiles::Small, Some(96)),
        MatrixTiles::BigFrom(96)
    );
    assert_eq!(matrix_tiles(MatrixTiles::Auto, None), MatrixTiles::Auto);
}

#[test]
fn the_spin_test_times_out_and_stops_the_backend() {
    let (mut b, seen) = backend(GpuOptions::default(), u64::MAX);
    let err = b.run_spin_test(Duration::from_secs(2)).unwrap_err();
    assert!(
        err.to_string().contains("op 0 of 1 (spin test kernel)"),
        "{err}"
    );
    assert!(seen.abandoned.get());
    assert!(matches!(
        b.run_spin_test(Duration::from_secs(2)),
        Err(BackendError::Unusable { .. })
    ));
}

#[test]
fn a_step_over_the_submission_budget_is_split_and_still_moves_its_data() {
    let t = with_bytes(dense_llama(QuantType::Q8_0));
    let tight = GpuOptions {
        submit_budget: Duration::ZERO,
        ..GpuOptions::default()
    };
    let (mut b, seen) = loaded(&t, tight);
    let g = t.graph(3);
    let plan = ArenaPlan::new(&g);
    let id = b.prepare(&g, &plan).unwrap();
    // A zero budget: one submission per op, each recorded once.
    let runs = seen.recorded.borrow().len();
    assert_eq!(runs, g.ops.len());
    let inputs = StepInputs::single(&[1, 2, 3], 0);
    let mut exchange = step_returns_logits(&mut b, &seen, id, &g, &plan, &inputs);
    // The step inputs go in with the first submission, the logits come
    // out with the last, and nothing crosses between them.
    let copies = seen.copies.borrow().clone();
    assert_eq!(copies[0], (1, 0));
    assert_eq!(copies[runs - 1], (0, 1));
    assert!(
        copies[1..runs - 1].iter().all(|&c| c == (0, 0)),
        "{copies:?}"
    );
    // A stall names the submission.
    *seen.stall_with.borrow_mut() = Some(vec![0; 8]);
    let err = b.execute_part(id, 0, &inputs, &mut exchange).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&format!("submission 1 of {runs}")), "{msg}");
}

#[test]
fn the_default_budget_keeps_a_small_step_in_one_submission() {
    let t = with_bytes(dense_llama(QuantType::Q8_0));
    let (mut b, seen) = loaded(&t, GpuOptions::default());
    let g = t.graph(8);
    b.prepare(&g, &ArenaPlan::new(&g)).unwrap();
    assert_eq!(seen.recorded.borrow().len(), 1);
}

#[test]
fn a_graph_reports_the_launches_it_replays() {
    let t = with_bytes(dense_llama(QuantType::Q8_0));
    let tight = GpuOptions {
        submit_budget: Duration::ZERO,
        ..GpuOptions::default()
    };
    for opts in [GpuOptions::default(), tight] {
        let (mut b, seen) = loaded(&t, opts);
        let g = t.graph(1);
        let id = b.prepare(&g, &ArenaPlan::new(&g)).unwrap();
        // Every submission's launches, however the step was cut.
        let recorded: usize = seen.recorded.borrow().iter().map(Vec::len).sum();
        assert!(recorded > 0);
        assert_eq!(b.launches(id), Some(recorded));
        assert_eq!(b.launches(GraphId(id.0 + 1)), None);
    }
}
