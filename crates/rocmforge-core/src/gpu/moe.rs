//! Lowering of the mixture-of-experts ops: routing, expert matmuls and
//! the weighted sum (the expert matmuls after the rounding of their input
//! that every matmul gets).
//!
//! The expert ids exist only on the device, so every expert kernel reads
//! them there and offsets the weight address itself: one recorded dispatch
//! serves whichever experts a step routes to.
//!
//! **Decode** (at most [`MATVEC_MAX_TOKENS`] tokens) runs the expert
//! mat-vec per (token, choice) pair: for the weight types with an integer
//! form `matvec_id_int_*` over Q8-packed activations (the dense decode
//! mat-vec's arithmetic, two rows of one pair a workgroup), else the f32
//! `matvec_id_*` (one workgroup per (pair, row)).
//!
//! **Prefill** groups the pairs by expert, as llama.cpp's `mul_mat_id`
//! does, so an expert's rows are read once per tile of the tokens that
//! chose it instead of once per token. `moe_group` (one workgroup) sorts
//! the pairs of `ids` by expert into a table in the scratch, after the
//! rounded activations ([`table_offset`]): `slots` 16-byte slots
//! (expert, begin, end, 0), one per tile of at most `tile` pairs of one
//! expert (unused ones expert `u32::MAX`), then `order`, the pair indices
//! sorted by expert, slot `s` holding `order[begin..end]`. There are at
//! most `ceil(n_pairs / tile) + min(experts, n_pairs)` tiles, so that many
//! slots are laid out and the grid is fixed at record time. `matmul_id_*`
//! (the prefill matmul's tiles, portable or on matrix cores) then runs
//! slots x row tiles, gathering its tile's x rows and scattering its
//! output rows through `order`. The table depends on `ids` only, so the
//! gate, up and down matmuls of a layer share one.

use crate::backend::BackendError;
use crate::graph::fusion::ResidualAdd;
use crate::graph::{Graph, Op, TensorId};
use crate::plan::ArenaPlan;

use super::lower::{
    q8_packed_layout, u32_of, weight_kernel, DeviceWeight, GraphAddresses, ScratchForm,
};
use super::matmul::{
    activation_kernel, q8_packed_at, quantize_q8_packed, round_activations, COOPMAT_MIN_TOKENS,
    MATVEC_MAX_TOKENS,
};
use super::push::{
    MatGroupPush, MatIdPush, MoeGroupPush, MoeRoutePush, MoeRouterPush, MoeSumPush, Push,
};
use super::{groups_for, has_int_form, KernelSink, Lowering, MatrixTiles};
use crate::quant::QuantType;

/// Most experts `moe_route` takes (its `MOE_ROUTE_MAX_E` / `MAX_E`: the
/// probabilities of a token's experts sit in shared memory).
pub const MAX_EXPERTS: usize = 512;
/// Most experts `moe_router_f32` routes: its last workgroup keeps a
/// token's logits in a wave's registers (HIP's `MOE_ROUTE_HELD` * 32).
pub const ROUTER_MAX_EXPERTS: usize = 128;
/// Most experts `moe_group` takes (its `MAX_E`); a model with more runs
/// the expert mat-vec for prefill too.
pub const MOE_GROUP_MAX_EXPERTS: usize = 256;
/// Pairs per tile of the portable grouped matmul (`matmul_id_*`, the
/// portable matmul's 32 tokens), and of the matrix-core one
/// (`matmul_id_cms_*`, 64x64 tiles).
const GROUP_TILE: u32 = 32;
const GROUP_TILE_MATRIX: u32 = 64;
/// Weight rows per tile of either.
const GROUP_ROWS: usize = 64;

/// The fused router of a decode step, where op `i` is a router mat-vec of
/// f32 weights whose logits the next op routes: `moe_router_f32` (one
/// workgroup per expert, the last to finish routing every token, counting
/// in the step's first counter) in place of `matvec_f32` and `moe_route`.
/// `None` where the pattern does not hold, the step has no counters, or
/// the shape is one the kernel does not take; the caller checks that
/// fusion is on and both ops are its to record. The push has no norm in
/// front: the caller of an RMS norm before the router sets its fields.
pub(super) fn fused_router(
    graph: &Graph,
    plan: &ArenaPlan,
    i: usize,
    a: &GraphAddresses,
    t: &dyn Fn(TensorId) -> u64,
) -> Result<Option<MoeRouterPush>, BackendError> {
    let (
        Some(&Op::MatMul { w, x, bias, out }),
        Some(&Op::TopKGate {
            logits,
            ids,
            weights,
            k,
            normalize,
        }),
    ) = (graph.ops.get(i), graph.ops.get(i + 1))
    else {
        return Ok(None);
    };
    let w = &a.weights[w];
    let (experts, cols) = (graph.tensor(out).cols, graph.tensor(x).cols);
    let rows = graph.tensor(out).rows;
    let fits = logits == out
        && w.ty == QuantType::F32
        && w.rows == experts
        && cols.is_multiple_of(8)
        && (1..=ROUTER_MAX_EXPERTS).contains(&experts)
        && k <= experts
        && rows <= MATVEC_MAX_TOKENS
        && plan.step_inputs.counters > 0;
    if !fits {
        return Ok(None);
    }
    Ok(Some(MoeRouterPush {
        x: t(x),
        w: w.address,
        bias: bias.map_or(0, |b| a.weights[b].address),
        logits: t(out),
        ids: t(ids),
        weights: t(weights),
        counter: a.step + plan.step_inputs.counters_at() as u64,
        norm_x: 0,
        norm_w: 0,
        q8: 0,
        q8_scales: 0,
        cols: u32_of(cols, "columns")?,
        n_expert: u32_of(experts, "experts")?,
        n: u32_of(rows, "tokens")?,
        k: u32_of(k, "experts per token")?,
        normalize: u32::from(normalize),
        eps: 0.0,
    }))
}

/// What the table region of the scratch holds: the grouping of this `ids`
/// tensor in tiles of this many pairs.
pub type GroupTable = Option<(TensorId, u32)>;

/// Whether the expert matmul of `ids` (a row of choices per token) runs
/// grouped by expert: a prefill, on a backend that groups, of a model
/// `moe_group` takes.
fn grouped(lw: &Lowering, graph: &Graph, ids: TensorId, experts: usize) -> bool {
    lw.grouped_experts && groups_table(graph, ids) && experts <= MOE_GROUP_MAX_EXPERTS
}

/// Whether a graph's expert matmuls of `ids` may be grouped (more tokens
/// than a decode mat-vec takes): the scratch then holds a table for them.
fn groups_table(graph: &Graph, ids: TensorId) -> bool {
    graph.tensor(ids).rows > MATVEC_MAX_TOKENS
}

/// Slots of the table for `n_pairs` pairs over `experts` experts in tiles
/// of `tile`: every tile of every expert, at most.
fn group_slots(n_pairs: usize, experts: usize, tile: u32) -> usize {
    n_pairs.div_ceil(tile as usize) + experts.min(n_pairs)
}

/// Bytes of a table for `n_pairs` pairs, for any expert count and tile
/// (at most one slot per pair more than the smallest tile's).
fn table_bytes(n_pairs: usize) -> usize {
    (group_slots(n_pairs, n_pairs, GROUP_TILE) * 16 + n_pairs * 4).next_multiple_of(256)
}

/// Where the table lies in the scratch: after the largest rounded matmul
/// input, so rounding the down projection's input keeps the table of its
/// layer.
pub fn table_offset(graph: &Graph) -> usize {
    graph
        .ops
        .iter()
        .filter_map(|op| match *op {
            Op::MatMul { x, .. } | Op::MatMulId { x, .. } => {
                let d = graph.tensor(x);
                Some(d.bytes().max(q8_packed_layout(d.rows * d.cols).1))
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
        .next_multiple_of(256)
}

/// Bytes of scratch the tables of a graph's grouped expert matmuls take
/// after [`table_offset`] (one table at a time).
pub fn tables_bytes(graph: &Graph) -> usize {
    graph
        .ops
        .iter()
        .filter_map(|op| match *op {
            Op::MatMulId { ids, out, .. } if groups_table(graph, ids) => {
                Some(table_bytes(graph.tensor(out).rows))
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// What the scratch holds, kept up to date by the lowering: the rounded
/// activations of a tensor (so the up matmul reuses the gate's rounding of
/// their shared input) and the table of the grouped expert matmuls.
pub struct ScratchState<'s> {
    pub held: &'s mut Option<(TensorId, ScratchForm)>,
    /// Where the table lies ([`table_offset`] into the scratch), and what
    /// it holds.
    pub table: (u64, &'s mut GroupTable),
}

/// Records `op` if it is a mixture-of-experts op; returns how many ops it
/// recorded: 0 if it was none, 2 if `next` (the op after it, where the
/// lowering may fuse it) was recorded in the same dispatch (an up expert
/// mat-vec beside its gate).
#[allow(clippy::too_many_arguments)] // the lowering's state, as record_matmuls takes it
pub fn record_moe_op(
    sink: &mut dyn KernelSink,
    lw: &Lowering,
    graph: &Graph,
    (op, next): (&Op, Option<&Op>),
    a: &GraphAddresses,
    t: &dyn Fn(TensorId) -> u64,
    state: ScratchState,
    label: String,
) -> Result<usize, BackendError> {
    let scratch = state.held;
    match *op {
        Op::TopKGate {
            logits,
            ids,
            weights,
            k,
            normalize,
        } => {
            let d = graph.tensor(logits);
            if d.cols > MAX_EXPERTS {
                return Err(BackendError::Unsupported {
                    what: format!("mixture of {} experts", d.cols),
                    reason: format!("the GPU routing takes at most {MAX_EXPERTS}"),
                });
            }
            let push = MoeRoutePush {
                logits: t(logits),
                ids: t(ids),
                weights: t(weights),
                n_rows: u32_of(d.rows, "rows")?,
                n_expert: u32_of(d.cols, "experts")?,
                k: u32_of(k, "experts per token")?,
                normalize: u32::from(normalize),
            };
            // One workgroup per token.
            sink.dispatch("moe_route", push.bytes(), push.n_rows, label)?;
        }
        Op::MatMulId {
            w,
            x,
            ids,
            bias,
            out,
        } => {
            let dw = &a.weights[w];
            let suffix = weight_kernel(dw)?;
            let xd = graph.tensor(x);
            let n_pairs = graph.tensor(out).rows;
            let rows = dw.rows / dw.experts;
            let mut push = MatIdPush {
                x: t(x),
                w: dw.address,
                ids: t(ids),
                out: t(out),
                expert_bytes: (rows * dw.row_bytes) as u64,
                rows: u32_of(rows, "rows")?,
                k: u32_of(xd.cols, "inner size")?,
                n_pairs: u32_of(n_pairs, "expert choices")?,
                x_div: u32_of(n_pairs / xd.rows, "experts per token")?,
                bias: bias.map_or(0, |b| a.weights[b].address),
                x_scales: 0,
                up_w: 0,
                up_out: 0,
                up_bias: 0,
            };
            let values = u32_of(xd.rows * xd.cols, "activations")?;
            if grouped(lw, graph, ids, dw.experts) {
                push.x = rounded_input(sink, dw, (x, push.x), values, a.scratch, scratch, &label)?;
                record_grouped(sink, lw, graph, state.table, ids, &push, dw, label)?;
                return Ok(1);
            }
            if int_expert_route(lw, graph, op, a) {
                // In integers: the input Q8-packed once (gate and up share
                // it), then two rows of one pair a workgroup.
                let held = Some((x, ScratchForm::Q8Packed));
                (push.x, push.x_scales) = if *scratch == held {
                    q8_packed_at(a.scratch, values)
                } else {
                    *scratch = held;
                    let rounding = format!("{label} (rounding {} activations)", dw.ty);
                    quantize_q8_packed(sink, lw, push.x, values, a.scratch, rounding)?
                };
                // The up mat-vec beside the gate: same input, ids, shape
                // and type, the grid doubled.
                let up = next.filter(|n| {
                    matches!(**n, Op::MatMulId { w: uw, x: ux, ids: ui, .. }
                        if ux == x && ui == ids && same_stack(dw, &a.weights[uw]))
                        && int_expert_route(lw, graph, n, a)
                });
                let mut names = dw.name.clone();
                if let Some(&Op::MatMulId { w, bias, out, .. }) = up {
                    push.up_w = a.weights[w].address;
                    push.up_out = t(out);
                    push.up_bias = bias.map_or(0, |b| a.weights[b].address);
                    names = format!("{names}+{}", a.weights[w].name);
                }
                let parts = if up.is_some() { 2 } else { 1 };
                let dot = if lw.int_dot_names { "_dot" } else { "" };
                let groups = parts * n_pairs * rows.div_ceil(lw.expert_int_rows as usize);
                let groups = u32_of(groups, "expert mat-vec workgroups")?;
                let what = format!("{label} ({names} {})", dw.ty);
                let name = format!("matvec_id_int{dot}_{suffix}");
                sink.dispatch(&name, push.bytes(), groups, what)?;
                return Ok(parts);
            }
            push.x = rounded_input(sink, dw, (x, push.x), values, a.scratch, scratch, &label)?;
            let groups = u32_of(n_pairs * rows, "expert mat-vec workgroups")?;
            let what = format!("{label} ({} {})", dw.name, dw.ty);
            sink.dispatch(&format!("matvec_id_{suffix}"), push.bytes(), groups, what)?;
        }
        _ => return Ok(0),
    }
    Ok(1)
}

/// Whether two expert stacks have one shape and type (one kernel and grid
/// serve both).
fn same_stack(a: &DeviceWeight, b: &DeviceWeight) -> bool {
    (a.ty, a.rows, a.cols, a.row_bytes, a.experts) == (b.ty, b.rows, b.cols, b.row_bytes, b.experts)
}

/// Records the weighted sum of a token's expert rows (`Op::MoeSum` of `x`
/// by `weights` into `out`), with the residual add that follows it folded
/// in where the lowering fuses it (`residual`: written to its `out`
/// instead).
pub fn record_moe_sum(
    sink: &mut dyn KernelSink,
    graph: &Graph,
    (x, weights, out): (TensorId, TensorId, TensorId),
    residual: Option<ResidualAdd>,
    t: &dyn Fn(TensorId) -> u64,
    label: String,
) -> Result<(), BackendError> {
    let d = graph.tensor(out);
    let push = MoeSumPush {
        x: t(x),
        weights: t(weights),
        out: t(residual.map_or(out, |r| r.out)),
        n_rows: u32_of(d.rows, "rows")?,
        cols: u32_of(d.cols, "columns")?,
        k: u32_of(graph.tensor(weights).cols, "experts per token")?,
        pad: 0,
        residual: residual.map_or(0, |r| t(r.residual)),
    };
    let groups = groups_for("moe_sum", d.rows * d.cols)?;
    sink.dispatch("moe_sum", push.bytes(), groups, label)
}

/// Whether `op` is an expert matmul that runs as the integer expert
/// mat-vec, reading its input Q8-packed from the scratch (so the op that
/// writes that input may write it so, as `swiglu_q8` does).
pub fn int_expert_route(lw: &Lowering, graph: &Graph, op: &Op, a: &GraphAddresses) -> bool {
    let Op::MatMulId { w, x, ids, .. } = *op else {
        return false;
    };
    let dw = &a.weights[w];
    !grouped(lw, graph, ids, dw.experts)
        && lw.int_matvec
        && lw.int_expert_matvec
        && has_int_form(dw.ty)
        && graph.tensor(x).cols.is_multiple_of(32)
}

/// The address of expert-matmul input `x` (at `at`, `values` of them) as
/// the f32 kernels read it: rounded into the scratch the way the CPU
/// reference quantizes it for the weight type (unless `held` says the
/// scratch holds that already: up reuses gate's), or `at` itself for types
/// read unrounded.
fn rounded_input(
    sink: &mut dyn KernelSink,
    dw: &DeviceWeight,
    (x, at): (TensorId, u64),
    values: u32,
    scratch: u64,
    held: &mut Option<(TensorId, ScratchForm)>,
    label: &str,
) -> Result<u64, BackendError> {
    let form = activation_kernel(dw.ty).map(|k| (x, ScratchForm::Rounded(k)));
    if form.is_some() && *held == form {
        return Ok(scratch);
    }
    *held = form;
    let rounding = format!("{label} (rounding {} activations)", dw.ty);
    let rounded = round_activations(sink, dw.ty, at, values, scratch, rounding)?;
    Ok(if rounded { scratch } else { at })
}

/// Records a grouped expert matmul (a prefill's) routed by `ids`, its
/// input already rounded at `push.x`: `moe_group` unless the table holds
/// this `ids`'s grouping, then `matmul_id_*`. `push` is the mat-vec's
/// argument block, filled in.
#[allow(clippy::too_many_arguments)] // record_moe_op's state, passed on
fn record_grouped(
    sink: &mut dyn KernelSink,
    lw: &Lowering,
    graph: &Graph,
    (table_at, table): (u64, &mut GroupTable),
    ids: TensorId,
    push: &MatIdPush,
    dw: &DeviceWeight,
    label: String,
) -> Result<(), BackendError> {
    // Matrix cores as for a dense prefill of as many tokens (f16 operands
    // but for F32 weights, and not for short graphs); decided by the token
    // count, so a layer's gate, up and down share one tiling and table.
    let matrix = lw.matrix != MatrixTiles::Off
        && dw.ty != QuantType::F32
        && graph.tensor(ids).rows >= COOPMAT_MIN_TOKENS;
    let (kernel, tile) = if matrix {
        ("matmul_id_cms", GROUP_TILE_MATRIX)
    } else {
        ("matmul_id", GROUP_TILE)
    };
    let n_pairs = push.n_pairs as usize;
    let slots = u32_of(group_slots(n_pairs, dw.experts, tile), "expert tiles")?;
    if *table != Some((ids, tile)) {
        let group = MoeGroupPush {
            ids: push.ids,
            table: table_at,
            n_pairs: push.n_pairs,
            n_expert: u32_of(dw.experts, "experts")?,
            tile,
            slots,
        };
        sink.dispatch(
            "moe_group",
            group.bytes(),
            1,
            format!("{label} (grouping by expert)"),
        )?;
        *table = Some((ids, tile));
    }
    let mm = MatGroupPush {
        x: push.x,
        w: push.w,
        table: table_at,
        out: push.out,
        expert_bytes: push.expert_bytes,
        bias: push.bias,
        rows: push.rows,
        k: push.k,
        n_pairs: push.n_pairs,
        x_div: push.x_div,
        slots,
        pad: 0,
    };
    let groups = slots as usize * (push.rows as usize).div_ceil(GROUP_ROWS);
    let groups = u32_of(groups, "expert matmul workgroups")?;
    let what = format!("{label} ({} {})", dw.name, dw.ty);
    let name = format!("{kernel}_{}", weight_kernel(dw)?);
    sink.dispatch(&name, mm.bytes(), groups, what)
}
