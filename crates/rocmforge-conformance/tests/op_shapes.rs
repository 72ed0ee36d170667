//! Single ops in the shapes that break subgroup and tiling assumptions, for
//! every weight type on every backend, against the CPU backend (issue 26).
//!
//! Whole models hide ragged shapes: their rows are long and their output
//! counts even. Here each op gets its own inputs, and one graph per weight
//! type holds them all, run as one part through the `Backend` trait's parts
//! API (the inputs are imports, the outputs exports), so one load and one
//! recording serve a type. The shapes:
//! - rows of 1, 2, 3, 5 and 9 blocks (fewer blocks than a subgroup of 8,
//!   32 or 64 has lanes, and counts that are not multiples of them), and
//!   of 65 blocks of 32 (more than a mat-vec workgroup has invocations);
//! - output counts that are not multiples of the rows a workgroup computes
//!   (7 and 37: odd, and past one 32-row tile);
//! - 1, 3 and 9 tokens (the decode mat-vec, its multi-token form, and the
//!   tiled prefill matmul);
//! - experts: 1, 3 and 8 experts with 1, 3 and 8 used, the expert input
//!   shared by a token's choices (gate, up) or one row per choice (down),
//!   rows of the ragged lengths above and of 65 blocks;
//! - the routing top-k and the weighted sum at those counts, and the top-k
//!   of 60, 128 and 200 experts, and a decode step's f32 router with the
//!   routing of its logits, with and without the FFN norm in front (one
//!   launch on the GPU backends).
//!
//! The CPU backend is checked first, against f64 arithmetic on the
//! dequantized weights (see [`CPU_VS_F64_SIGMA`]), then every other
//! backend against it.
//!
//! Tolerance: each op's output against the CPU's, in σ of the CPU's output.
//! The GPU kernels round activations as the CPU does, so only the order of
//! the additions differs (measured below 0.002σ; Q4_1 and Q5_1, whose CPU
//! dot adds a separately rounded activation sum, below 0.01σ); a dropped
//! block, row or expert is off by the order of 1σ.

use std::sync::Arc;

use rocmforge_conformance::*;
use rocmforge_core::backend::{Backend, StepInputs};
use rocmforge_core::gguf::{GgufFile, GgufWriter};
use rocmforge_core::graph::split::{Exchange, GraphPart, Side};
use rocmforge_core::graph::{AttentionSpec, Graph, Op, RopeSpec, TensorDesc, TensorId};
use rocmforge_core::model::{Model, ModelWeights, WeightRef, WEIGHT_ALIGN};
use rocmforge_core::plan::{ArenaPlan, KvLayout};
use rocmforge_core::quant::{self, QuantType};

const MAX_SIGMA: f32 = 0.03;

/// Deterministic values in [-1, 1).
struct Rng(u64);

impl Rng {
    /// xorshift64.
    fn step(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn next(&mut self) -> f32 {
        (self.step() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.step() % n as u64) as usize
    }
}

/// A weight in the making: name, shape (cols, rows, experts), type, bytes.
struct NewWeight {
    name: String,
    cols: usize,
    rows: usize,
    experts: usize,
    ty: QuantType,
    data: Vec<u8>,
}

fn encode(ty: QuantType, values: &[f32], cols: usize) -> Vec<u8> {
    use QuantType as T;
    match ty {
        // The i-quants llama-quantize refuses without an importance matrix
        // (and their siblings): a flat one, as gen-model uses.
        T::IQ2XXS | T::IQ2XS | T::IQ2S | T::IQ3XXS | T::IQ3S | T::IQ1S | T::IQ1M => {
            quant::quantize_to_vec_with_importance(ty, values, &vec![1.0; cols]).unwrap()
        }
        _ => quant::quantize_to_vec(ty, values).unwrap(),
    }
}

/// The ops of one weight type, their inputs and their weights.
#[derive(Default)]
struct Cases {
    tensors: Vec<TensorDesc>,
    ops: Vec<Op>,
    labels: Vec<String>,
    inputs: Vec<(TensorId, Vec<f32>)>,
    outputs: Vec<TensorId>,
    weights: Vec<NewWeight>,
}

impl Cases {
    fn tensor(&mut self, rows: usize, cols: usize) -> TensorId {
        self.tensors.push(TensorDesc { rows, cols });
        self.tensors.len() - 1
    }

    fn input(&mut self, rows: usize, values: Vec<f32>) -> TensorId {
        let t = self.tensor(rows, values.len() / rows);
        self.inputs.push((t, values));
        t
    }

    fn weight(
        &mut self,
        ty: QuantType,
        cols: usize,
        rows: usize,
        experts: usize,
        rng: &mut Rng,
    ) -> usize {
        let values = rng.values(cols * rows * experts);
        self.weights.push(NewWeight {
            name: format!("w{}", self.weights.len()),
            cols,
            rows: rows * experts,
            experts,
            ty,
            data: encode(ty, &values, cols),
        });
        self.weights.len() - 1
    }

    fn f32_weight(&mut self, values: Vec<f32>, cols: usize) -> usize {
        self.weights.push(NewWeight {
            name: format!("w{}", self.weights.len()),
            cols,
            rows: values.len() / cols,
            experts: 1,
            ty: QuantType::F32,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
        self.weights.len() - 1
    }

    fn op(&mut self, op: Op, label: String) {
        self.outputs.extend(op.outputs());
        self.ops.push(op);
        self.labels.push(label);
    }
}

/// Elements per "block" of a row: the type's block, or 32 for the float
/// types (whose kernels still walk rows in units of 8 and 32).
fn block(ty: QuantType) -> usize {
    ty.block_size().max(32)
}

/// Distinct experts for each of `n` tokens, `k` of `e`, as the router's
/// f32 ids.
fn expert_ids(n: usize, k: usize, e: usize, rng: &mut Rng) -> Vec<f32> {
    let mut ids = Vec::with_capacity(n * k);
    for _ in 0..n {
        let mut all: Vec<usize> = (0..e).collect();
        for j in 0..k {
            let pick = j + rng.below(e - j);
            all.swap(j, pick);
            ids.push(all[j] as f32);
        }
    }
    ids
}

fn matmul_cases(c: &mut Cases, ty: QuantType, rng: &mut Rng) {
    let b = block(ty);
    // Rows of 65 blocks of 32 too: more blocks than the integer mat-vec's
    // workgroup has invocations, so one team of the whole workgroup takes
    // them, as in a real model (the short ones split it into teams; 9
    // blocks of 256, or of 32 f32 values, are one team of the f32 one).
    let long = if b == 32 { Some(65) } else { None };
    for (i, &blocks) in [1usize, 2, 3, 5, 9].iter().chain(&long).enumerate() {
        for &n in &[1usize, 3, 9] {
            let k = blocks * b;
            let m = if i % 2 == 0 { 7 } else { 37 };
            let w = c.weight(ty, k, m, 1, rng);
            let bias = (n == 3).then(|| c.f32_weight(rng.values(m), m));
            let x = c.input(n, rng.values(n * k));
            let out = c.tensor(n, m);
            c.op(
                Op::MatMul { w, x, bias, out },
                format!("matmul {ty} k {k} ({blocks} blocks) x {m} rows, {n} tokens"),
            );
        }
    }
}

fn expert_cases(c: &mut Cases, ty: QuantType, rng: &mut Rng) {
    let b = block(ty);
    let shapes = [(1usize, 1usize), (3, 1), (3, 3), (8, 3), (8, 8)];
    for (i, &(e, k_used)) in shapes.iter().enumerate() {
        for &n in &[1usize, 3] {
            // Gate/up form (one input row per token) and down form (one
            // per choice), with row lengths cycling through the ragged ones
            // and one of more blocks than an expert mat-vec workgroup has
            // invocations (65: each invocation walks a second pass).
            for (form, per_choice) in [("shared input", false), ("input per choice", true)] {
                let blocks = [1usize, 2, 3, 5, 9, 65][(i + usize::from(per_choice) + n) % 6];
                let k = blocks * b;
                // The biased case (gpt-oss) has 24 rows: the bias is a
                // matrix of one row per expert, and a GPU backend takes
                // f32 matrices in rows of multiples of 8 values.
                let biased = n == 3 && !per_choice;
                let m = match (per_choice, biased) {
                    (true, _) => 7,
                    (false, true) => 24,
                    (false, false) => 37,
                };
                let w = c.weight(ty, k, m, e, rng);
                let x_rows = if per_choice { n * k_used } else { n };
                let x = c.input(x_rows, rng.values(x_rows * k));
                let ids = c.input(n, expert_ids(n, k_used, e, rng));
                let bias = biased.then(|| c.f32_weight(rng.values(e * m), m));
                let out = c.tensor(n * k_used, m);
                c.op(
                    Op::MatMulId {
                        w,
                        x,
                        ids,
                        bias,
                        out,
                    },
                    format!(
                        "expert matmul {ty} k {k} ({blocks} blocks) x {m} rows, {e} experts, \
                         {k_used} used, {n} tokens, {form}"
                    ),
                );
            }
        }
    }
}

/// Routing and the weighted sum (no weights; run once, with the F32 set).
fn routing_cases(c: &mut Cases, rng: &mut Rng) {
    // Also real models' counts: Qwen1.5-MoE's 60 and Qwen3-MoE's 128 (the
    // GPU routing keeps up to 128 in registers), and 200 past them.
    let counts = [
        (1usize, 1usize),
        (3, 1),
        (3, 3),
        (8, 1),
        (8, 3),
        (8, 8),
        (60, 4),
        (128, 8),
        (200, 8),
    ];
    for &(e, k) in &counts {
        for &n in &[1usize, 3] {
            for normalize in [false, true] {
                // Logits spread wide enough that no two probabilities tie.
                let logits = c.input(n, rng.values(n * e).iter().map(|v| 4.0 * v).collect());
                let ids = c.tensor(n, k);
                let weights = c.tensor(n, k);
                c.op(
                    Op::TopKGate {
                        logits,
                        ids,
                        weights,
                        k,
                        normalize,
                    },
                    format!("top-{k} of {e} experts, {n} tokens, normalize {normalize}"),
                );
            }
            let x = c.input(n * k, rng.values(n * k * 40));
            let weights = c.input(n, rng.values(n * k));
            let out = c.tensor(n, 40);
            c.op(
                Op::MoeSum { x, weights, out },
                format!("weighted sum of {k} choices, {n} tokens"),
            );
        }
    }
    // A decode step's f32 router and the routing of its logits, which GPU
    // backends run as one launch (the last workgroup routes); with a bias,
    // as gpt-oss's.
    for &(e, k) in &[(8usize, 2usize), (60, 4), (128, 8)] {
        for &n in &[1usize, 3] {
            let cols = 64;
            let bias = (n == 3).then(|| c.f32_weight(rng.values(e), e));
            let x = c.input(n, rng.values(n * cols));
            router_case(c, rng, x, (e, k), bias, true, "");
        }
    }
    // The same with the FFN norm in front, which GPU backends also run in
    // the router's launch (each workgroup writing blocks of 32 of the
    // norm's output): rows of 2 and 3 blocks, fewer and more blocks than
    // experts.
    for &(e, k, cols) in &[(8usize, 2usize, 64usize), (60, 4, 96), (3, 1, 96)] {
        for &n in &[1usize, 3] {
            let x = c.input(n, rng.values(n * cols));
            let norm_w = c.f32_weight(rng.values(cols), cols);
            let normed = c.tensor(n, cols);
            c.op(
                Op::RmsNorm {
                    x,
                    weight: norm_w,
                    out: normed,
                    group: cols,
                },
                format!("norm of {cols} before a router, {n} tokens"),
            );
            router_case(c, rng, normed, (e, k), None, false, " after a norm");
        }
    }
}

/// An f32 router of `e` experts over `x` and the top-`k` routing of its
/// logits.
fn router_case(
    c: &mut Cases,
    rng: &mut Rng,
    x: TensorId,
    (e, k): (usize, usize),
    bias: Option<usize>,
    normalize: bool,
    after: &str,
) {
    let (n, cols) = (c.tensors[x].rows, c.tensors[x].cols);
    let w = c.weight(QuantType::F32, cols, e, 1, rng);
    let logits = c.tensor(n, e);
    c.op(
        Op::MatMul {
            w,
            x,
            bias,
            out: logits,
        },
        format!("router of {e} experts{after}, {n} tokens"),
    );
    let (ids, weights) = (c.tensor(n, k), c.tensor(n, k));
    c.op(
        Op::TopKGate {
            logits,
            ids,
            weights,
            k,
            normalize,
        },
        format!("top-{k} of the router's {e} logits{after}, {n} tokens"),
    );
}

/// A model holding `cases`' weights (the config of a tiny generated model,
/// which only sizes the KV cache here).
fn model_of(cases: &Cases) -> Model {
    let donor = generated_model("tiny-qwen3moe-ragged", QuantType::Q8_0);
    let mut w = GgufWriter::new();
    for nw in &cases.weights {
        let shape: Vec<u64> = if nw.experts > 1 {
            vec![
                nw.cols as u64,
                (nw.rows / nw.experts) as u64,
                nw.experts as u64,
            ]
        } else {
            vec![nw.cols as u64, nw.rows as u64]
        };
        w.add_tensor(&nw.name, &shape, nw.ty, nw.data.clone())
            .unwrap();
    }
    let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let mut region = 0u64;
    let table = cases
        .weights
        .iter()
        .map(|nw| {
            let t = file.tensor(&nw.name).unwrap();
            let region_offset = region.next_multiple_of(WEIGHT_ALIGN);
            region = region_offset + t.n_bytes;
            WeightRef {
                name: nw.name.clone(),
                ty: nw.ty,
                cols: nw.cols,
                rows: nw.rows,
                experts: nw.experts,
                file_offset: file.data_offset() + t.offset,
                n_bytes: t.n_bytes,
                region_offset,
            }
        })
        .collect();
    Model {
        file: Arc::new(file),
        config: donor.config.clone(),
        weights: ModelWeights {
            table,
            token_embd: 0,
            output_norm: 0,
            output: 0,
            rope_freqs: None,
            layers: Vec::new(),
            region_bytes: region,
        },
    }
}

fn graph_of(cases: &Cases) -> Graph {
    Graph {
        n_tokens: 1,
        all_logits: true,
        batched: false,
        tensors: cases.tensors.clone(),
        ops: cases.ops.clone(),
        logits: *cases.outputs.last().unwrap(),
        rms_eps: RMS_EPS,
        rope: RopeSpec {
            neox: false,
            n_rot: 32,
            freq_base: 1e4,
            freq_scale: 1.0,
            freq_factors: None,
            local: None,
            yarn: None,
            attn_factor: 1.0,
        },
        attention: AttentionSpec {
            n_head: 1,
            n_head_kv: 1,
            head_dim: 32,
            scale: 1.0,
        },
    }
}

/// Every tensor in a place of its own: the ops are independent and every
/// output is read back, so nothing may share space.
fn plan_of(graph: &Graph) -> ArenaPlan {
    ArenaPlan::unshared(graph)
}

/// The part's imports and exports as a GPU backend stages them, each
/// 256-aligned: the alignment slack backends add covers parts of a few
/// tensors (a split model's), and this one moves a hundred.
fn staged_bytes(graph: &Graph, part: &GraphPart) -> usize {
    part.imports
        .iter()
        .chain(&part.exports)
        .map(|&t| graph.tensor(t).bytes().next_multiple_of(256))
        .sum()
}

/// Runs every op of `cases` on `backend` as one part; returns the exports.
fn run(backend: &mut dyn Backend, model: &Model, cases: &Cases) -> Exchange {
    let graph = graph_of(cases);
    let plan = plan_of(&graph);
    let part = GraphPart {
        side: Side::Device,
        ops: 0..graph.ops.len(),
        imports: cases.inputs.iter().map(|(t, _)| *t).collect(),
        exports: cases.outputs.clone(),
    };
    let name = backend.info().name;
    let kv = KvLayout::new(&model.config, 8, 8);
    backend
        .load_except(model, &kv, &[], &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{name}: load: {e}"));
    backend
        .reserve_parts(&graph, plan.arena_bytes, staged_bytes(&graph, &part))
        .unwrap_or_else(|e| panic!("{name}: reserve: {e}"));
    let parts = [part];
    let id = backend
        .prepare_parts(&graph, &plan, &parts)
        .unwrap_or_else(|e| panic!("{name}: prepare: {e}"));
    let mut exchange = Exchange::new(&graph, &parts);
    for (t, values) in &cases.inputs {
        exchange.tensor_mut(*t).copy_from_slice(values);
    }
    let inputs = StepInputs::single(&[0], 0);
    backend
        .execute_part(id, 0, &inputs, &mut exchange)
        .unwrap_or_else(|e| panic!("{name}: execute: {e}"));
    exchange
}

fn sigma(v: &[f32]) -> f32 {
    let n = v.len() as f32;
    let mean = v.iter().sum::<f32>() / n;
    (v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n).sqrt()
}

/// The CPU backend itself, against plain f64 arithmetic on the dequantized
/// weights and unrounded activations. The CPU rounds activations as ggml
/// does (Q8_0, Q8_K, f16), which moves an output by up to 0.033σ here
/// (IQ2_XS; most types 0.014-0.019σ); a lost block of a 9-block row moves
/// it by about a third of σ. Routing must pick
/// the same experts with the same weights (to f32 rounding).
const CPU_VS_F64_SIGMA: f32 = 0.08;

/// The norms' epsilon.
const RMS_EPS: f32 = 1e-6;

fn check_cpu(cases: &Cases, model: &Model, cpu: &Exchange) -> f32 {
    let input = |t: TensorId| -> &[f32] {
        &cases
            .inputs
            .iter()
            .find(|(i, _)| *i == t)
            .expect("an input")
            .1
    };
    let dequant = |w: usize| -> Vec<f32> {
        let r = &model.weights.table[w];
        let mut out = vec![0f32; r.rows * r.cols];
        quant::dequantize(r.ty, model.weight_bytes(w), &mut out).unwrap();
        out
    };
    let mut worst = 0f32;
    for (op, label) in cases.ops.iter().zip(&cases.labels) {
        let (expected, out): (Vec<f32>, TensorId) = match *op {
            Op::MatMul { w, x, bias, out }
            | Op::MatMulId {
                w, x, bias, out, ..
            } => {
                // The input given, or the CPU's own from the norm before.
                let xv = (cases.inputs.iter())
                    .find(|(i, _)| *i == x)
                    .map_or_else(|| cpu.tensor(x), |(_, v)| &v[..]);
                let wv = dequant(w);
                let r = &model.weights.table[w];
                let (k, m) = (r.cols, r.expert_rows());
                let bias = bias.map(dequant);
                // The chosen experts, and how many each token has.
                let (ids, per_token) = match *op {
                    Op::MatMulId { ids, .. } => (Some(input(ids)), cases.tensors[ids].cols),
                    _ => (None, 1),
                };
                let rows = cases.tensors[out].rows;
                let x_rows = cases.tensors[x].rows;
                let mut v = Vec::with_capacity(rows * m);
                for p in 0..rows {
                    let e = ids.map_or(0, |ids| ids[p] as usize);
                    let xr = if x_rows == rows { p } else { p / per_token };
                    for j in 0..m {
                        let row = &wv[(e * m + j) * k..(e * m + j + 1) * k];
                        let dot: f64 = row
                            .iter()
                            .zip(&xv[xr * k..(xr + 1) * k])
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum();
                        let b = bias.as_ref().map_or(0.0, |b| f64::from(b[e * m + j]));
                        v.push((dot + b) as f32);
                    }
                }
                (v, out)
            }
            Op::TopKGate {
                logits,
                ids,
                weights,
                k,
                normalize,
            } => {
                // Logits given, or the CPU's own from the router before.
                let l = (cases.inputs.iter())
                    .find(|(i, _)| *i == logits)
                    .map_or_else(|| cpu.tensor(logits), |(_, v)| &v[..]);
                let e = cases.tensors[logits].cols;
                let mut want_ids = Vec::new();
                let mut want_w = Vec::new();
                for row in l.chunks(e) {
                    let mx = row.iter().fold(f64::MIN, |m, &v| m.max(f64::from(v)));
                    let p: Vec<f64> = row.iter().map(|&v| (f64::from(v) - mx).exp()).collect();
                    let sum: f64 = p.iter().sum();
                    let mut order: Vec<usize> = (0..e).collect();
                    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
                    let chosen: f64 = order[..k].iter().map(|&i| p[i] / sum).sum();
                    for &i in &order[..k] {
                        want_ids.push(i as f32);
                        let w = p[i] / sum;
                        want_w.push((if normalize { w / chosen } else { w }) as f32);
                    }
                }
                assert_eq!(
                    cpu.tensor(ids),
                    &want_ids[..],
                    "cpu, {label}: chosen experts"
                );
                (want_w, weights)
            }
            Op::MoeSum { x, weights, out } => {
                let (xv, wv) = (input(x), input(weights));
                let cols = cases.tensors[out].cols;
                let k = cases.tensors[weights].cols;
                let mut v = Vec::new();
                for t in 0..cases.tensors[out].rows {
                    for c in 0..cols {
                        let s: f64 = (0..k)
                            .map(|j| {
                                f64::from(xv[(t * k + j) * cols + c]) * f64::from(wv[t * k + j])
                            })
                            .sum();
                        v.push(s as f32);
                    }
                }
                (v, out)
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                group,
            } => {
                let (xv, wv) = (input(x), dequant(weight));
                let mut v = Vec::new();
                for row in xv.chunks(group) {
                    let ss: f64 = row.iter().map(|&a| f64::from(a) * f64::from(a)).sum();
                    let scale = 1.0 / (ss / group as f64 + f64::from(RMS_EPS)).sqrt();
                    for (&a, &w) in row.iter().zip(&wv) {
                        v.push((f64::from(a) * scale * f64::from(w)) as f32);
                    }
                }
                (v, out)
            }
            _ => unreachable!("no other ops here"),
        };
        let got = cpu.tensor(out);
        let scale = match sigma(&expected) {
            s if s > 0.0 => s,
            _ => expected.iter().fold(1e-6f32, |m, v| m.max(v.abs())),
        };
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            let err = (g - e).abs() / scale;
            worst = worst.max(err);
            assert!(
                err <= CPU_VS_F64_SIGMA,
                "cpu vs f64, {label}: output {i} is {g} where f64 gives {e} ({err:.4}σ)"
            );
        }
    }
    worst
}

/// Compares every op's outputs; returns the worst error in σ.
fn compare(backend: &str, cases: &Cases, ours: &Exchange, cpu: &Exchange) -> f32 {
    let mut worst = 0f32;
    for (op, label) in cases.ops.iter().zip(&cases.labels) {
        if let Op::TopKGate { ids, .. } = *op {
            assert_eq!(
                ours.tensor(ids),
                cpu.tensor(ids),
                "{backend} vs cpu, {label}: chosen experts"
            );
        }
        for t in op.outputs() {
            let (a, b) = (ours.tensor(t), cpu.tensor(t));
            // A single value (one expert, one token) has no spread: use its
            // magnitude.
            let scale = match sigma(b) {
                s if s > 0.0 => s,
                _ => b.iter().fold(1e-6f32, |m, v| m.max(v.abs())),
            };
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let err = if x.is_finite() {
                    (x - y).abs() / scale
                } else {
                    f32::INFINITY
                };
                worst = worst.max(err);
                assert!(
                    err <= MAX_SIGMA,
                    "{backend} vs cpu, {label}: output {i} is {x} where the CPU has {y} ({err:.4}σ)"
                );
            }
        }
    }
    worst
}

/// Names a subset of the weight types to check (comma-separated ggml
/// names), where every type would take too long: `.ci/run` checks all of
/// them at lavapipe's default width and these at its other subgroup
/// widths, where each kernel's first dispatch compiles it for minutes
/// (docs/vulkan.md, "Subgroup size"). Unset: every type.
const TYPES_ENV: &str = "ROCMFORGE_OP_SHAPES_TYPES";

/// The types `TYPES_ENV` names (each must be one of `all`), or `all`; says
/// which when it is a subset, so a partial run never passes for a whole one.
fn chosen_types(all: &[QuantType]) -> Vec<QuantType> {
    let Ok(list) = std::env::var(TYPES_ENV) else {
        return all.to_vec();
    };
    let chosen: Vec<QuantType> = list
        .split(',')
        .map(|name| match QuantType::from_name(name.trim()) {
            Some(ty) if all.contains(&ty) => ty,
            _ => panic!("{TYPES_ENV}: {name:?} is not a supported weight type"),
        })
        .collect();
    eprintln!(
        "{TYPES_ENV}: checking {} of the {} weight types: {}",
        chosen.len(),
        all.len(),
        list
    );
    chosen
}

#[test]
fn ragged_shapes_of_every_weight_type_match_the_cpu() {
    let backends: Vec<_> = backends_under_test()
        .into_iter()
        .filter(|&b| b != "cpu")
        .collect();
    let types: Vec<QuantType> = QuantType::supported().collect();
    let chosen = chosen_types(&types);
    for (i, &ty) in types.iter().enumerate() {
        if !chosen.contains(&ty) {
            continue;
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
        let mut cases = Cases::default();
        matmul_cases(&mut cases, ty, &mut rng);
        expert_cases(&mut cases, ty, &mut rng);
        if ty == QuantType::F32 {
            routing_cases(&mut cases, &mut rng);
        }
        let model = model_of(&cases);
        let cpu = run(create("cpu").as_mut(), &model, &cases);
        // The CPU must have computed something: a part that silently ran
        // nothing would leave every export zero and compare equal.
        // (Expert ids may all be 0: one expert.)
        for (op, label) in cases.ops.iter().zip(&cases.labels) {
            let t = match *op {
                Op::TopKGate { weights, .. } => weights,
                _ => op.outputs()[0],
            };
            assert!(
                cpu.tensor(t).iter().any(|&v| v != 0.0),
                "cpu: {label}: output all zeros"
            );
        }
        let worst = check_cpu(&cases, &model, &cpu);
        eprintln!(
            "cpu vs f64, {ty}: {} ops in ragged shapes agree, worst {worst:.5}σ",
            cases.ops.len()
        );
        for &backend in &backends {
            let _device = device_lock();
            let ours = run(create(backend).as_mut(), &model, &cases);
            let worst = compare(backend, &cases, &ours, &cpu);
            eprintln!(
                "{backend} vs cpu, {ty}: {} ops in ragged shapes agree, worst {worst:.5}σ",
                cases.ops.len()
            );
        }
    }
}
