//! Lowering: turns a planned graph into kernel launches, once, at a
//! backend's `prepare`.
//!
//! Decode steps are dominated by many small launches, so lowering fuses
//! where core's fusion rules allow ([`crate::graph::fusion`]): RoPE of Q
//! and K with the KV store, a residual add into the integer mat-vec before
//! it, and the Q8 rounding of a mat-vec's input into the op that produces it
//! (RmsNorm, SwiGLU, decode attention). Where a launch's closing work needs
//! every workgroup's output (split decode attention's merge, a MoE router's
//! routing), the workgroups count themselves in the step's counters
//! ([`crate::plan::StepInputLayout`]) and the last to finish does it, so it
//! takes no launch of its own. [`Lowering::fuse`] off lowers them unfused.
//!
//! Every address is frozen at lowering time (weights, arena offsets, the KV
//! cache, the step-input region); what changes per step (token ids, pos0,
//! n_kv) is read by the kernels from the step-input region, so grids depend
//! only on the graph's shape.

use std::ops::Range;

use crate::backend::BackendError;
use crate::graph::fusion::{
    group_starting_at, matmul_groups, next_matmul_reads, norm_pair_at, norm_rope_store_at,
    norm_router_at, residual_add_after, rope_store_at, sum_norm_after, NormRopeStore, RopeStore,
};
use crate::graph::split::GraphPart;
use crate::graph::{Graph, Op, TensorId};
use crate::plan::{ArenaPlan, KvLayout, KvTypes, StepInputLayout};
use crate::quant::QuantType;

use super::matmul::{
    int_route, leaves_scratch, matmul_weight, q8_packed_at, record_matmuls, MatmulRun, ScratchUse,
};
use super::moe::{
    fused_router, int_expert_route, record_moe_op, record_moe_sum, table_offset, GroupTable,
    ScratchState,
};
use super::push::*;
use super::split::{attention_splits, partials_bytes, MAX_SPLIT_TOKENS};
use super::{groups_for, weight_suffix, KernelSink, Lowering};

/// The form in which the scratch holds a tensor, for ops that can reuse it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScratchForm {
    /// Q8-packed (`q8_packed_layout`), as the integer mat-vecs read it.
    Q8Packed,
    /// Rounded by this activation kernel, as the f32 mat-vecs read it.
    Rounded(&'static str),
}

/// A weight as kernels see it.
#[derive(Clone, Debug)]
pub struct DeviceWeight {
    pub name: String,
    pub ty: QuantType,
    pub address: u64,
    pub cols: usize,
    /// Rows of all experts together for a stack of experts.
    pub rows: usize,
    pub row_bytes: usize,
    /// Stacked matrices (experts), 1 for a plain weight.
    pub experts: usize,
}

/// Tokens of one head per workgroup of `attention_rows` (its `TQ`).
const ROWS_PER_GROUP: usize = 4;

/// Fewest tokens of a step whose portable attention follows ggml's f32
/// tiles (`attention_f32`) rather than its f16 per-head walk, as ggml's CPU
/// path and the CPU backend do (ggml's `GGML_FA_TILE_Q`).
pub const F32_ATTENTION_MIN_TOKENS: usize = 64;

/// Tokens per workgroup of the matrix-core prefill attention
/// (`attention_cm*`).
const MATRIX_ROWS_PER_GROUP: usize = 32;
/// Largest head size the attention kernel takes (`ATT_DIMS * WG_SIZE`).
pub const MAX_HEAD_DIM: usize = 256;

/// Bytes of scratch a graph needs: one rounded copy of the largest matmul
/// input (f32), or its Q8-packed form (`q8_packed_layout`), whichever is
/// larger, then room for the grouped expert matmul's table
/// ([`super::moe`]) if the graph has one.
pub fn scratch_bytes(graph: &Graph) -> usize {
    table_offset(graph) + super::moe::tables_bytes(graph)
}

/// Layout of `n` activations quantized by `quantize_q8_packed`: int8 quants
/// from byte 0, then per block of 32 a (d, s) pair of f32 from the returned
/// offset; returns (scales offset, total bytes).
pub fn q8_packed_layout(n: usize) -> (usize, usize) {
    let scales = n.next_multiple_of(256);
    (scales, scales + n / 32 * 8)
}

/// Everything a graph's dispatches refer to.
pub struct GraphAddresses<'a> {
    pub weights: &'a [DeviceWeight],
    pub arena: u64,
    /// Rounded matmul activations.
    pub scratch: u64,
    pub kv: u64,
    pub kv_layout: &'a KvLayout,
    /// Decode attention's partials ([`super::split`]) and their bytes.
    pub partials: u64,
    pub partials_bytes: u64,
    pub step: u64,
    pub n_vocab: usize,
}

pub(super) fn u32_of(v: usize, what: &str) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| {
        BackendError::unsupported("size", format!("{what} {v} exceeds the kernels' 32 bits"))
    })
}

/// The suffix of the kernels for weight `w`, or the unsupported-weight error.
pub fn weight_kernel(w: &DeviceWeight) -> Result<&'static str, BackendError> {
    let unsupported = || BackendError::UnsupportedWeight {
        tensor: w.name.clone(),
        ty: w.ty,
    };
    let suffix = weight_suffix(w.ty).ok_or_else(unsupported)?;
    // Kernels read rows in units of 8 values (plain float rows need only be
    // a multiple of 8; their 32-value "blocks" are contiguous).
    if !w.cols.is_multiple_of(w.ty.block_size().max(8)) {
        return Err(unsupported());
    }
    Ok(suffix)
}

/// The kernel-name suffix of a quantized cache (`q8_0`), `None` for f16;
/// unsupported where K and V differ (the kernels take one type for both,
/// as llama.cpp's CUDA build does by default).
fn kv_suffix(l: &KvLayout) -> Result<Option<&'static str>, BackendError> {
    let KvTypes { k, v } = l.types;
    if k != v {
        return Err(BackendError::unsupported(
            "KV cache types",
            format!(
                "--cache-type-k {k} with --cache-type-v {v}: the GPU kernels take K and V of one type (use the same for both, or --backend cpu)"
            ),
        ));
    }
    Ok(k.is_quantized().then_some(k.name()))
}

/// `_q8_0` after a kernel family's name for a quantized cache.
fn suffix(quantized: Option<&str>) -> String {
    quantized.map_or(String::new(), |q| format!("_{q}"))
}

/// What a GPU backend reserved, for [`check_graph`].
#[derive(Clone, Copy, Debug)]
pub struct Reserved {
    pub arena_bytes: u64,
    pub scratch_bytes: u64,
    /// Tokens of the largest graph (sizes the step-input region).
    pub max_tokens: usize,
    pub logits_bytes: u64,
}

/// The checks every GPU backend makes before recording `graph`: it fits
/// what was reserved (recorded addresses must never move), its rope
/// parameters are valid (`rope_freqs`: the model's frequency factors, if
/// the graph uses them), and its attention shape is one the kernels take.
pub fn check_graph(
    graph: &Graph,
    plan: &ArenaPlan,
    r: &Reserved,
    rope_freqs: Option<&[f32]>,
) -> Result<(), BackendError> {
    if graph.batched {
        return Err(BackendError::unsupported(
            "step",
            "the GPU kernels run one sequence a step so far (batched sequences run on the cpu backend)",
        ));
    }
    let exceeds = |what, needed: u64, reserved: u64| {
        if needed > reserved {
            Err(BackendError::ExceedsReservation {
                what,
                needed,
                reserved,
            })
        } else {
            Ok(())
        }
    };
    exceeds(
        "the activation arena",
        plan.arena_bytes as u64,
        r.arena_bytes,
    )?;
    exceeds(
        "the activation scratch",
        scratch_bytes(graph) as u64,
        r.scratch_bytes,
    )?;
    exceeds(
        "the step-input region",
        plan.step_inputs.bytes() as u64,
        4 * StepInputLayout::bound_words(r.max_tokens, graph.attention.n_head) as u64,
    )?;
    let logits_bytes = graph.tensor(graph.logits).bytes();
    exceeds("the logits readback", logits_bytes as u64, r.logits_bytes)?;
    let s = &graph.attention;
    let ff = graph.rope.freq_factors.map(|_| rope_freqs.unwrap_or(&[]));
    graph.rope.check(s.head_dim, ff)?;
    if s.head_dim > MAX_HEAD_DIM
        || !s.head_dim.is_multiple_of(2)
        || s.n_head_kv == 0
        || !s.n_head.is_multiple_of(s.n_head_kv)
    {
        return Err(BackendError::unsupported(
            "attention shape",
            format!(
                "{} heads of {} over {} KV heads (head size must be even and at most {MAX_HEAD_DIM}, heads a multiple of KV heads)",
                s.n_head, s.head_dim, s.n_head_kv
            ),
        ));
    }
    Ok(())
}

/// Refuses a part of a split graph that reads a weight this device left
/// out of its memory (address 0, see [`crate::backend::Backend::load_except`])
/// or lies outside the graph.
pub fn check_part(
    graph: &Graph,
    part: &GraphPart,
    weights: &[DeviceWeight],
) -> Result<(), BackendError> {
    if part.ops.start > part.ops.end || part.ops.end > graph.ops.len() {
        return Err(BackendError::InvalidGraph(format!(
            "part of ops {:?} outside a graph of {} ops",
            part.ops,
            graph.ops.len()
        )));
    }
    let tensors = part.imports.iter().chain(&part.exports);
    if let Some(t) = tensors.into_iter().find(|&&t| t >= graph.tensors.len()) {
        return Err(BackendError::InvalidGraph(format!(
            "part moves tensor {t}, not one of the graph's"
        )));
    }
    for op in &graph.ops[part.ops.clone()] {
        if let Some(w) = op.weights().into_iter().find(|&w| weights[w].address == 0) {
            return Err(BackendError::InvalidGraph(format!(
                "a part recorded here reads '{}', which this device left in host memory",
                weights[w].name
            )));
        }
    }
    Ok(())
}

/// Lowers ops `ops` of `graph` (all of them, or one part of a split graph)
/// into launches recorded by `sink`.
pub fn record_graph(
    sink: &mut dyn KernelSink,
    lw: &Lowering,
    graph: &Graph,
    plan: &ArenaPlan,
    a: &GraphAddresses,
    ops: Range<usize>,
) -> Result<(), BackendError> {
    let t = |id: TensorId| a.arena + plan.offsets[id] as u64;
    let n_ops = graph.ops.len();
    // A fused run must end inside `ops` (a part of a split graph); one that
    // would reach past it runs unfused.
    let fits = |end: usize| end <= ops.end;
    let groups = matmul_groups(graph, plan);
    let fuse = lw.fuse;
    let label = |i: usize, what: String| format!("op {i} of {n_ops} ({what})");
    // Where the Q8-packed form of `id` goes in the scratch: (quants, scales).
    let q8_at = |id: TensorId| {
        let d = graph.tensor(id);
        q8_packed_at(a.scratch, (d.rows * d.cols) as u32)
    };
    // A SwiGLU (`kernel`: swiglu_q8, or gpt-oss's swiglu_oai_q8 with its
    // alpha and limit) that writes its output and the output's Q8 packing
    // for the integer mat-vec after it in one pass.
    let swiglu_q8 = |sink: &mut dyn KernelSink,
                     kernel: &str,
                     (gate, up, out): (TensorId, TensorId, TensorId),
                     (alpha, limit): (f32, f32),
                     what: String| {
        let d = graph.tensor(out);
        let n = u32_of(d.rows * d.cols, "elements")?;
        let (quants, scales) = q8_at(out);
        let push = QuantizePush {
            x: t(gate),
            out: quants,
            n,
            pad: 0,
            scales,
            up: t(up),
            act: t(out),
            alpha,
            limit,
        };
        let groups = (n / 32).div_ceil(lw.q8_packed_blocks_per_group);
        sink.dispatch(kernel, push.bytes(), groups, what)
    };
    // Whether op i's output `out` is read next by an integer mat-vec (dense
    // or expert), so op i may write it Q8-packed for it: by the op after
    // it, or by the expert mat-vec after a router that leaves the scratch
    // alone (an F32 mat-vec of `out`) and the routing.
    let feeds_int_matvec = |i: usize, out: TensorId| {
        let expert = |next: &Op| {
            matches!(*next, Op::MatMulId { x, .. } if x == out)
                && int_expert_route(lw, graph, next, a)
        };
        let d = graph.tensor(out);
        let routed = || {
            fits(i + 4)
                && matches!(graph.ops[i + 1], Op::MatMul { x, .. } if x == out)
                && leaves_scratch(lw, matmul_weight(&graph.ops[i + 1], a), d.rows, d.cols)
                && matches!(graph.ops[i + 2], Op::TopKGate { .. })
                && expert(&graph.ops[i + 3])
        };
        fuse && fits(i + 2)
            && (next_matmul_reads(graph, i, out)
                && int_route(lw, matmul_weight(&graph.ops[i + 1], a), d.rows, d.cols)
                || expert(&graph.ops[i + 1])
                || routed())
    };
    // Whether the RMS norm at op i (of whole rows, where `whole_rows`, by
    // the weight at `w_at`) also writes its output `out` Q8-packed: an
    // integer mat-vec reads it next, and the weight allows vec4 access.
    let norm_q8 = |i: usize, out: TensorId, whole_rows: bool, w_at: u64| {
        whole_rows && w_at.is_multiple_of(16) && feeds_int_matvec(i, out)
    };
    // What the scratch holds after the ops recorded so far, if anything a
    // later op can reuse.
    let mut scratch: Option<(TensorId, ScratchForm)> = None;
    // The grouping the scratch's table region holds (`super::moe`), and
    // where that region is.
    let mut table: GroupTable = None;
    let table_at = a.scratch + table_offset(graph) as u64;
    let mut i = ops.start;
    while i < ops.end {
        let op = &graph.ops[i];
        if let Op::MatMul { x, .. } = *op {
            let group = group_starting_at(&groups, i)
                .filter(|g| fits(g.end))
                .unwrap_or(i..i + 1);
            // A decode step's f32 router routes its own logits.
            if group.len() == 1 && fuse && fits(i + 2) {
                if let Some(push) = fused_router(graph, plan, i, a, &t)? {
                    let what = label(i, format!("Router+TopKGate {}", matmul_weight(op, a).name));
                    let groups = push.n_expert;
                    sink.dispatch("moe_router_f32", push.bytes(), groups, what)?;
                    i += 2;
                    continue;
                }
            }
            let xd = graph.tensor(x);
            let residual = residual_add_after(graph, plan, i).filter(|_| {
                fuse && fits(i + 2)
                    && group.len() == 1
                    && int_route(lw, matmul_weight(op, a), xd.rows, xd.cols)
            });
            // Runs of the group with one weight type, at most three each.
            let mut start = group.start;
            while start < group.end {
                let ty = matmul_weight(&graph.ops[start], a).ty;
                let mut end = start + 1;
                while end < group.end
                    && end - start < 3
                    && matmul_weight(&graph.ops[end], a).ty == ty
                {
                    end += 1;
                }
                let run = MatmulRun {
                    ops: &graph.ops[start..end],
                    first: start,
                    prequantized: scratch == Some((x, ScratchForm::Q8Packed)),
                    residual,
                };
                scratch = match record_matmuls(sink, lw, graph, &run, a, &t)? {
                    ScratchUse::Q8Packed => Some((x, ScratchForm::Q8Packed)),
                    ScratchUse::Untouched => scratch,
                    ScratchUse::Overwritten => None,
                };
                start = end;
            }
            // A fused residual add is done.
            i = group.end + usize::from(residual.is_some());
            continue;
        }
        // Expert mat-vecs keep it up to date themselves and the routing
        // does not touch it; every other op either leaves nothing reusable
        // or says what it wrote below.
        if !matches!(op, Op::MatMulId { .. } | Op::TopKGate { .. }) {
            scratch = None;
        }
        // The fused rope and store writes f16 rows only. Qwen3's Q and K
        // norms join it where RoPE has no YaRN terms.
        if fuse && fits(i + 5) && a.kv_layout.types == KvTypes::default() {
            if let Some(nrs) = norm_rope_store_at(graph, plan, i) {
                let yarn = graph.rope.for_op(nrs.rope.local).yarn_terms();
                if yarn.ext_factor == 0.0 && yarn.mscale == 1.0 {
                    let what = format!("RmsNorm+RmsNorm+Rope+StoreKv layer {}", nrs.rope.layer);
                    record_norm_rope_store(sink, graph, &nrs, a, &t, label(i, what))?;
                    i += 5;
                    continue;
                }
            }
        }
        if fuse && fits(i + 3) && a.kv_layout.types == KvTypes::default() {
            if let Some(rs) = rope_store_at(graph, i) {
                record_rope_store(
                    sink,
                    graph,
                    &rs,
                    a,
                    &t,
                    label(i, format!("Rope+StoreKv layer {}", rs.layer)),
                )?;
                i += 3;
                continue;
            }
        }
        match *op {
            Op::MoeSum { x, weights, out } => {
                // With the residual add and the next block's norm, where
                // rows are whole Q8 blocks (vec4 rows on Vulkan).
                let sum_norm = sum_norm_after(graph, plan, i)
                    .filter(|_| fuse && fits(i + 3) && graph.tensor(out).cols.is_multiple_of(32));
                if let Some((
                    add,
                    &Op::RmsNorm {
                        weight, out: nout, ..
                    },
                )) = sum_norm
                {
                    let w = &a.weights[weight];
                    let q8 = norm_q8(i + 2, nout, true, w.address);
                    let (kernel, (q8, q8_scales)) = if q8 {
                        ("moe_sum_rmsnorm_q8", q8_at(nout))
                    } else {
                        ("moe_sum_rmsnorm", (0, 0))
                    };
                    let d = graph.tensor(out);
                    let push = MoeSumNormPush {
                        x: t(x),
                        weights: t(weights),
                        residual: t(add.residual),
                        sum: t(add.out),
                        w: w.address,
                        out: t(nout),
                        q8,
                        q8_scales,
                        cols: u32_of(d.cols, "columns")?,
                        n_rows: u32_of(d.rows, "rows")?,
                        k: u32_of(graph.tensor(weights).cols, "experts per token")?,
                        eps: graph.rms_eps,
                    };
                    let what = label(i, format!("MoeSum+Add+RmsNorm {}", w.name));
                    sink.dispatch(kernel, push.bytes(), push.n_rows, what)?;
                    scratch = (q8 != 0).then_some((nout, ScratchForm::Q8Packed));
                    i += 3;
                    continue;
                }
                let residual = residual_add_after(graph, plan, i).filter(|_| fuse && fits(i + 2));
                let what = label(
                    i,
                    format!("MoeSum{}", if residual.is_some() { "+Add" } else { "" }),
                );
                record_moe_sum(sink, graph, (x, weights, out), residual, &t, what)?;
                // A fused residual add is done.
                i += 1 + usize::from(residual.is_some());
                continue;
            }
            Op::TopKGate { .. } | Op::MatMulId { .. } => {
                let what = label(i, format!("{op:?}"));
                let state = ScratchState {
                    held: &mut scratch,
                    table: (table_at, &mut table),
                };
                let next = graph.ops.get(i + 1).filter(|_| fuse && fits(i + 2));
                let done = record_moe_op(sink, lw, graph, (op, next), a, &t, state, what)?;
                i += done;
                continue;
            }
            Op::Embed { table, out } => {
                let w = &a.weights[table];
                let name = format!("embed_{}", weight_kernel(w)?);
                let push = EmbedPush {
                    table: w.address,
                    out: t(out),
                    step: a.step,
                    row_bytes: u32_of(w.row_bytes, "row bytes")?,
                    cols: u32_of(w.cols, "columns")?,
                    n_vocab: u32_of(a.n_vocab, "vocabulary")?,
                    n_tokens: u32_of(graph.n_tokens, "tokens")?,
                };
                sink.dispatch(
                    &name,
                    push.bytes(),
                    push.n_tokens,
                    label(i, format!("Embed {} {}", w.name, w.ty)),
                )?;
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                group,
            } => {
                let d = graph.tensor(x);
                let w = &a.weights[weight];
                let q8 = norm_q8(i, out, group == d.cols, w.address);
                // A decode step's FFN norm runs in the router's launch
                // (rows of whole Q8 blocks, read as vec4 on Vulkan).
                let in_router = fuse
                    && fits(i + 3)
                    && d.cols.is_multiple_of(32)
                    && w.address.is_multiple_of(16)
                    && norm_router_at(graph, plan, i);
                if in_router {
                    if let Some(mut push) = fused_router(graph, plan, i + 1, a, &t)? {
                        push.norm_x = t(x);
                        push.norm_w = w.address;
                        (push.q8, push.q8_scales) = if q8 { q8_at(out) } else { (0, 0) };
                        push.eps = graph.rms_eps;
                        let router = matmul_weight(&graph.ops[i + 1], a);
                        let what = label(i, format!("RmsNorm+Router+TopKGate {}", router.name));
                        sink.dispatch("moe_norm_router_f32", push.bytes(), push.n_expert, what)?;
                        scratch = q8.then_some((out, ScratchForm::Q8Packed));
                        i += 3;
                        continue;
                    }
                }
                let kernel = if q8 { "rmsnorm_q8" } else { "rmsnorm" };
                let n_groups = u32_of(d.rows * d.cols / group, "norm groups")?;
                let (q8, q8_scales) = if q8 { q8_at(out) } else { (0, 0) };
                let mut push = NormPush {
                    x: t(x),
                    w: w.address,
                    out: t(out),
                    group: u32_of(group, "norm group")?,
                    n_groups,
                    eps: graph.rms_eps,
                    pad: 0,
                    q8,
                    q8_scales,
                    x2: 0,
                    w2: 0,
                    out2: 0,
                    n_groups2: 0,
                    pad2: 0,
                };
                scratch = (q8 != 0).then_some((out, ScratchForm::Q8Packed));
                let mut what = label(i, format!("RmsNorm {}", w.name));
                // The next norm in the same launch (Qwen3's K norm after
                // its Q norm).
                let pair = norm_pair_at(graph, plan, i).filter(|_| fuse && q8 == 0 && fits(i + 2));
                if let Some(&Op::RmsNorm {
                    x: x2,
                    weight: w2,
                    out: out2,
                    ..
                }) = pair
                {
                    if !feeds_int_matvec(i + 1, out2) {
                        let d2 = graph.tensor(x2);
                        let w2 = &a.weights[w2];
                        push.x2 = t(x2);
                        push.w2 = w2.address;
                        push.out2 = t(out2);
                        push.n_groups2 = u32_of(d2.rows * d2.cols / group, "norm groups")?;
                        what = format!("{what} + {}", w2.name);
                        let groups = n_groups.checked_add(push.n_groups2).ok_or_else(|| {
                            BackendError::InvalidGraph(format!("{what}: too many norm groups"))
                        })?;
                        sink.dispatch(kernel, push.bytes(), groups, what)?;
                        i += 2;
                        continue;
                    }
                }
                sink.dispatch(kernel, push.bytes(), n_groups, what)?;
            }
            Op::Rope { x, n_heads, local } => {
                let d = graph.tensor(x);
                let r = &graph.rope.for_op(local);
                let push = RopePush {
                    x: t(x),
                    step: a.step,
                    freq_factors: r.freq_factors.map_or(0, |f| a.weights[f].address),
                    rows: u32_of(d.rows, "rows")?,
                    n_heads: u32_of(n_heads, "heads")?,
                    head_dim: u32_of(d.cols / n_heads, "head size")?,
                    n_rot: u32_of(r.n_rot, "rotated dims")?,
                    neox: u32::from(r.neox),
                    theta_scale: r.theta_scale(),
                    freq_scale: r.freq_scale,
                    yarn: r.yarn_terms().into(),
                    pad: 0,
                };
                let items = d.rows * n_heads * (r.n_rot / 2);
                let groups = groups_for("rope", items)?;
                let what = label(i, format!("Rope {n_heads} heads"));
                sink.dispatch("rope", push.bytes(), groups, what)?;
            }
            Op::AttnTemperature { x, scale, floor } => {
                let d = graph.tensor(x);
                let n = u32_of(d.rows * d.cols, "elements")?;
                let push = AttnTempPush {
                    x: t(x),
                    step: a.step,
                    n,
                    cols: u32_of(d.cols, "columns")?,
                    scale,
                    floor: u32_of(floor.max(1), "temperature floor")?,
                };
                let what = label(i, "AttnTemperature".into());
                let groups = groups_for("attn_temp", n as usize)?;
                sink.dispatch("attn_temp", push.bytes(), groups, what)?;
            }
            Op::StoreKv { layer, k, v } => {
                let d = graph.tensor(k);
                let l = a.kv_layout;
                let push = StoreKvPush {
                    k: t(k),
                    v: t(v),
                    k_cache: a.kv + l.k_at(layer) as u64,
                    v_cache: a.kv + l.v_at(layer) as u64,
                    step: a.step,
                    rows: u32_of(d.rows, "rows")?,
                    kv_dim: u32_of(l.kv_dim, "kv width")?,
                    ring: u32_of(l.capacity(layer), "cache positions")?,
                    pad: 0,
                };
                // f16: an invocation per pair of values; quantized: per
                // block of 32.
                let (kernel, per) = match kv_suffix(l)? {
                    None => ("store_kv".to_string(), 2),
                    Some(q) => (format!("store_kv_{q}"), 32),
                };
                let groups = groups_for(&kernel, d.rows * l.kv_dim / per)?;
                let what = label(i, format!("StoreKv layer {layer}"));
                sink.dispatch(&kernel, push.bytes(), groups, what)?;
            }
            Op::Attention {
                layer,
                q,
                out,
                window,
                sinks,
            } => {
                let s = &graph.attention;
                let l = a.kv_layout;
                let k_cache = a.kv + l.k_at(layer) as u64;
                let v_cache = a.kv + l.v_at(layer) as u64;
                // A quantized cache (both K and V of one type) has kernels
                // of its own, named with the type.
                let quantized = kv_suffix(l)?;
                let f16_cache = quantized.is_none();
                // Few (token, head) workgroups: stage K/V rows in shared
                // memory with 16-byte loads (attention.comp, STAGE_KV).
                // The decode kernels (staged, split or by runs) take graphs
                // of up to MAX_SPLIT_TOKENS tokens: on the H100 staging
                // halved decode attention time and cost prefill a fifth of
                // its speed (docs/vulkan.md), and the partials are sized
                // for that many rows.
                let decode = graph.n_tokens <= MAX_SPLIT_TOKENS;
                let staged = f16_cache
                    && decode
                    && s.head_dim.is_multiple_of(8)
                    && l.kv_dim.is_multiple_of(8)
                    && (k_cache | v_cache).is_multiple_of(16);
                // A quantized cache's decode runs by runs on wide subgroups.
                let quantized_runs = !f16_cache && decode && lw.subgroup_decode;
                let q8 = (staged || quantized_runs)
                    && s.head_dim.is_multiple_of(32)
                    && feeds_int_matvec(i, out);
                let (q8, q8_scales) = if q8 { q8_at(out) } else { (0, 0) };
                // Split over positions where the rows alone leave the
                // device idle (super::split); the layer attends to at most
                // its window or its ring.
                let ring = l.capacity(layer);
                let attended = window.map_or(ring, |w| w.min(ring));
                let n_split = if staged || quantized_runs {
                    attention_splits(
                        graph.n_tokens,
                        s.n_head,
                        attended,
                        lw.compute_units,
                        lw.split_min as usize,
                    )
                } else {
                    1
                };
                let rows = graph.n_tokens * s.n_head;
                let wide = if s.head_dim > 128 { "_wide" } else { "" };
                let row_groups = graph.n_tokens.div_ceil(ROWS_PER_GROUP) * s.n_head;
                // The matrix-core kernel reads f16 cache rows in 16-byte
                // units, and a quantized cache's blocks in 16-bit ones.
                let matrix = match s.head_dim {
                    128 => Some("attention_cm"),
                    64 => Some("attention_cm64"),
                    _ => None,
                }
                .filter(|_| {
                    lw.matrix_attention
                        && (!f16_cache
                            || l.kv_dim.is_multiple_of(8) && (k_cache | v_cache).is_multiple_of(16))
                });
                // Decode by runs, merged by a combine that writes the
                // output: on wide subgroups always (their kernel serves
                // every decode step), elsewhere when split.
                let by_runs = (staged && (lw.subgroup_decode || n_split > 1)) || quantized_runs;
                let (kernel, groups) = match (by_runs, lw.subgroup_decode, staged, q8 != 0) {
                    (true, true, ..) => (
                        format!("attention_decode{wide}{}", suffix(quantized)),
                        rows * n_split,
                    ),
                    (true, false, ..) => ("attention_split".into(), rows * n_split),
                    // Prefill on matrix cores: tiles of 32 tokens by 32
                    // positions.
                    (false, true, ..) if matrix.is_some() => (
                        format!("{}{}", matrix.unwrap_or_default(), suffix(quantized)),
                        graph.n_tokens.div_ceil(MATRIX_ROWS_PER_GROUP) * s.n_head,
                    ),
                    // Prefill on wide subgroups: a few tokens of a head per
                    // workgroup share each cache row they read.
                    (false, true, ..) => (
                        format!("attention_rows{wide}{}", suffix(quantized)),
                        row_groups,
                    ),
                    // Elsewhere a quantized cache takes the plain kernel,
                    // a workgroup per (token, head).
                    _ if !f16_cache => (format!("attention{}", suffix(quantized)), rows),
                    (false, false, true, true) => ("attention_staged_q8".into(), rows),
                    (false, false, true, false) => ("attention_staged".into(), rows),
                    (false, false, false, _) if graph.n_tokens >= F32_ATTENTION_MIN_TOKENS => {
                        ("attention_f32".into(), rows)
                    }
                    (false, false, false, _) => ("attention".into(), rows),
                };
                let partials_needed = partials_bytes(rows * n_split, s.head_dim) as u64;
                if by_runs && partials_needed > a.partials_bytes {
                    return Err(BackendError::ExceedsReservation {
                        what: "the split attention's partials",
                        needed: partials_needed,
                        reserved: a.partials_bytes,
                    });
                }
                // The last run of each row to finish merges it (no combine
                // launch), counting in the step's counters.
                let merged = by_runs && fuse && plan.step_inputs.counters >= rows;
                let counters = if merged {
                    a.step + plan.step_inputs.counters_at() as u64
                } else {
                    0
                };
                let push = AttentionPush {
                    q: t(q),
                    out: t(out),
                    k_cache,
                    v_cache,
                    step: a.step,
                    n_tokens: u32_of(graph.n_tokens, "tokens")?,
                    n_head: u32_of(s.n_head, "heads")?,
                    n_head_kv: u32_of(s.n_head_kv, "kv heads")?,
                    head_dim: u32_of(s.head_dim, "head size")?,
                    kv_dim: u32_of(l.kv_dim, "kv width")?,
                    scale: s.scale,
                    q8,
                    q8_scales,
                    window: u32_of(window.unwrap_or(0), "attention window")?,
                    ring: u32_of(ring, "cache positions")?,
                    sinks: sinks.map_or(0, |w| a.weights[w].address),
                    partials: if by_runs { a.partials } else { 0 },
                    n_split: u32_of(n_split, "attention splits")?,
                    split_min: lw.split_min.max(1),
                    counters,
                };
                scratch = (q8 != 0).then_some((out, ScratchForm::Q8Packed));
                let what = label(i, format!("Attention layer {layer}"));
                let groups = u32_of(groups, "attention workgroups")?;
                sink.dispatch(&kernel, push.bytes(), groups, what.clone())?;
                if by_runs && !merged {
                    let combine = if q8 != 0 {
                        "attention_combine_q8"
                    } else {
                        "attention_combine"
                    };
                    let groups = u32_of(rows, "attention workgroups")?;
                    sink.dispatch(combine, push.bytes(), groups, what)?;
                }
            }
            Op::SwiGlu { gate, up, out } => {
                if feeds_int_matvec(i, out) {
                    let what = label(i, "SwiGlu".into());
                    swiglu_q8(sink, "swiglu_q8", (gate, up, out), (0.0, 0.0), what)?;
                    scratch = Some((out, ScratchForm::Q8Packed));
                } else {
                    eltwise(
                        sink,
                        "swiglu",
                        t(gate),
                        t(up),
                        t(out),
                        graph.tensor(out),
                        label(i, "SwiGlu".into()),
                    )?;
                }
            }
            Op::SwiGluOai {
                gate,
                up,
                out,
                alpha,
                limit,
            } => {
                let what = label(i, "SwiGluOai".into());
                if feeds_int_matvec(i, out) {
                    swiglu_q8(sink, "swiglu_oai_q8", (gate, up, out), (alpha, limit), what)?;
                    scratch = Some((out, ScratchForm::Q8Packed));
                } else {
                    let params = EltParams {
                        factor: alpha,
                        limit,
                        cols: 0,
                    };
                    let (tensors, shape) = ((t(gate), t(up), t(out)), graph.tensor(out));
                    eltwise_with(sink, "swiglu_oai", tensors, params, shape, what)?;
                }
            }
            Op::SigmoidGate { x, gate, out } => {
                let shape = graph.tensor(out);
                let params = EltParams {
                    factor: 0.0,
                    limit: 0.0,
                    cols: u32_of(shape.cols, "columns")?,
                };
                let what = label(i, "SigmoidGate".into());
                let tensors = (t(x), t(gate), t(out));
                eltwise_with(sink, "sigmoid_gate", tensors, params, shape, what)?;
            }
            Op::GeGlu { gate, up, out } => {
                eltwise(
                    sink,
                    "geglu",
                    t(gate),
                    t(up),
                    t(out),
                    graph.tensor(out),
                    label(i, "GeGlu".into()),
                )?;
            }
            Op::Scale { x, out, factor } => {
                let what = label(i, format!("Scale {factor}"));
                eltwise_scaled(
                    sink,
                    "scale",
                    (t(x), 0, t(out)),
                    factor,
                    graph.tensor(out),
                    what,
                )?;
            }
            Op::Add { a: x, b, out } => {
                eltwise(
                    sink,
                    "add",
                    t(x),
                    t(b),
                    t(out),
                    graph.tensor(out),
                    label(i, "Add".into()),
                )?;
            }
            Op::LastRow { x, out } => {
                let d = graph.tensor(x);
                let src = t(x) + ((d.rows - 1) * d.cols * 4) as u64;
                eltwise(
                    sink,
                    "copy",
                    src,
                    0,
                    t(out),
                    graph.tensor(out),
                    label(i, "LastRow".into()),
                )?;
            }
            Op::PickRows { .. } => unreachable!("check_graph refuses batched graphs"),
            Op::MatMul { .. } => unreachable!("handled above"),
        }
        i += 1;
    }
    Ok(())
}

/// The head size of a rope-and-store run, once its K rows are checked to be
/// the cache's rows.
fn kv_head_dim(
    graph: &Graph,
    rs: &RopeStore,
    l: &KvLayout,
    label: &str,
) -> Result<usize, BackendError> {
    let head_dim = graph.tensor(rs.q).cols / rs.n_head;
    let k_cols = graph.tensor(rs.k).cols;
    if k_cols != l.kv_dim || rs.n_head_kv * head_dim != l.kv_dim {
        return Err(BackendError::InvalidGraph(format!(
            "{label}: K rows of {k_cols} values do not match the cache's {}",
            l.kv_dim
        )));
    }
    Ok(head_dim)
}

/// RoPE of a layer's Q and K and the store of its K and V rows into the
/// cache, in one dispatch (`rope_kv`).
fn record_rope_store(
    sink: &mut dyn KernelSink,
    graph: &Graph,
    rs: &RopeStore,
    a: &GraphAddresses,
    t: &dyn Fn(TensorId) -> u64,
    label: String,
) -> Result<(), BackendError> {
    let r = &graph.rope.for_op(rs.local);
    let l = a.kv_layout;
    let q = graph.tensor(rs.q);
    let head_dim = kv_head_dim(graph, rs, l, &label)?;
    let push = RopeKvPush {
        x: t(rs.q),
        step: a.step,
        freq_factors: r.freq_factors.map_or(0, |f| a.weights[f].address),
        rows: u32_of(q.rows, "rows")?,
        n_heads: u32_of(rs.n_head, "heads")?,
        head_dim: u32_of(head_dim, "head size")?,
        n_rot: u32_of(r.n_rot, "rotated dims")?,
        neox: u32::from(r.neox),
        theta_scale: r.theta_scale(),
        freq_scale: r.freq_scale,
        n_heads_kv: u32_of(rs.n_head_kv, "kv heads")?,
        yarn: r.yarn_terms().into(),
        k: t(rs.k),
        v: t(rs.v),
        k_cache: a.kv + l.k_at(rs.layer) as u64,
        v_cache: a.kv + l.v_at(rs.layer) as u64,
        ring: u32_of(l.capacity(rs.layer), "cache positions")?,
        pad: 0,
    };
    // Q pairs, K pairs, K's unrotated dims, V values (rope.comp, STORE_KV).
    let half = r.n_rot / 2;
    let per_row = rs.n_head * half + rs.n_head_kv * (half + head_dim - r.n_rot) + l.kv_dim;
    let groups = groups_for("rope_kv", q.rows * per_row)?;
    sink.dispatch("rope_kv", push.bytes(), groups, label)
}

/// Qwen3's per-head norms of a layer's Q and K, their RoPE and the store
/// of K and V rows into the cache, in one dispatch (`norm_rope_kv`): a
/// workgroup per (token, head) of Q, then of K, then V's values 64 a
/// workgroup. The caller checked that RoPE has no YaRN terms.
fn record_norm_rope_store(
    sink: &mut dyn KernelSink,
    graph: &Graph,
    nrs: &NormRopeStore,
    a: &GraphAddresses,
    t: &dyn Fn(TensorId) -> u64,
    label: String,
) -> Result<(), BackendError> {
    let rs = &nrs.rope;
    let r = &graph.rope.for_op(rs.local);
    let l = a.kv_layout;
    let q = graph.tensor(rs.q);
    let head_dim = kv_head_dim(graph, rs, l, &label)?;
    let push = NormRopeKvPush {
        q: t(nrs.q),
        q_out: t(rs.q),
        k: t(nrs.k),
        k_out: t(rs.k),
        v: t(rs.v),
        k_cache: a.kv + l.k_at(rs.layer) as u64,
        v_cache: a.kv + l.v_at(rs.layer) as u64,
        step: a.step,
        freq_factors: r.freq_factors.map_or(0, |f| a.weights[f].address),
        q_norm: a.weights[nrs.q_norm].address,
        k_norm: a.weights[nrs.k_norm].address,
        rows: u32_of(q.rows, "rows")?,
        n_heads: u32_of(rs.n_head, "heads")?,
        head_dim: u32_of(head_dim, "head size")?,
        n_rot: u32_of(r.n_rot, "rotated dims")?,
        neox: u32::from(r.neox),
        theta_scale: r.theta_scale(),
        freq_scale: r.freq_scale,
        n_heads_kv: u32_of(rs.n_head_kv, "kv heads")?,
        ring: u32_of(l.capacity(rs.layer), "cache positions")?,
        eps: graph.rms_eps,
    };
    let heads = q.rows * (rs.n_head + rs.n_head_kv);
    let v_groups = groups_for("norm_rope_kv", q.rows * l.kv_dim)? as usize;
    let groups = u32_of(heads + v_groups, "workgroups")?;
    sink.dispatch("norm_rope_kv", push.bytes(), groups, label)
}

#[allow(clippy::too_many_arguments)]
fn eltwise(
    sink: &mut dyn KernelSink,
    kernel: &str,
    a: u64,
    b: u64,
    out: u64,
    shape: crate::graph::TensorDesc,
    label: String,
) -> Result<(), BackendError> {
    eltwise_scaled(sink, kernel, (a, b, out), 1.0, shape, label)
}

/// [`eltwise`] with the factor `scale` reads.
fn eltwise_scaled(
    sink: &mut dyn KernelSink,
    kernel: &str,
    tensors: (u64, u64, u64),
    factor: f32,
    shape: crate::graph::TensorDesc,
    label: String,
) -> Result<(), BackendError> {
    let params = EltParams {
        factor,
        limit: 0.0,
        cols: 0,
    };
    eltwise_with(sink, kernel, tensors, params, shape, label)
}

/// The scalar arguments of the element-wise kernels (`EltwisePush`).
struct EltParams {
    factor: f32,
    limit: f32,
    cols: u32,
}

/// One element-wise launch over `shape`'s values: `out = op(a, b)`.
fn eltwise_with(
    sink: &mut dyn KernelSink,
    kernel: &str,
    (a, b, out): (u64, u64, u64),
    p: EltParams,
    shape: crate::graph::TensorDesc,
    label: String,
) -> Result<(), BackendError> {
    let n = u32_of(shape.rows * shape.cols, "elements")?;
    let push = EltwisePush {
        a,
        b,
        out,
        n,
        factor: p.factor,
        limit: p.limit,
        cols: p.cols,
    };
    let groups = groups_for(kernel, n as usize)?;
    sink.dispatch(kernel, push.bytes(), groups, label)
}
