//! Lowering of the mixture-of-experts ops: routing, expert mat-vecs and
//! the weighted sum, one dispatch each (the expert mat-vec after the
//! rounding of its input that every f32 matmul gets).
//!
//! The expert ids exist only on the device, so the expert mat-vec reads
//! them there and offsets the weight address itself: one recorded dispatch
//! serves whichever experts a step routes to. For the weight types with an
//! integer form it is `matvec_id_int_*` over Q8-packed activations (the
//! dense decode mat-vec's arithmetic, two rows of one pair a workgroup),
//! else the f32 `matvec_id_*` (one workgroup per (pair, row)). Either way
//! a prefill reads an expert's rows once per token that chose it; grouping
//! tokens by expert (as llama.cpp's `mul_mat_id` does) is the next step
//! for prefill speed.

use crate::backend::BackendError;
use crate::graph::{Graph, Op, TensorId};

use super::lower::{u32_of, weight_kernel, GraphAddresses, ScratchForm};
use super::matmul::{
    activation_kernel, q8_packed_at, quantize_q8_packed, round_activations, MATVEC_INT_ROWS,
};
use super::push::{MatIdPush, MoeRoutePush, MoeSumPush, Push};
use super::{groups_for, has_int_form, KernelSink, Lowering};

/// Records `op` if it is a mixture-of-experts op; returns whether it was.
/// `scratch` is what the scratch holds, kept up to date here so the up
/// mat-vec reuses the gate's rounding of their shared input.
#[allow(clippy::too_many_arguments)] // the lowering's state, as record_matmuls takes it
pub fn record_moe_op(
    sink: &mut dyn KernelSink,
    lw: &Lowering,
    graph: &Graph,
    op: &Op,
    a: &GraphAddresses,
    t: &dyn Fn(TensorId) -> u64,
    scratch: &mut Option<(TensorId, ScratchForm)>,
    label: String,
) -> Result<bool, BackendError> {
    match *op {
        Op::TopKGate {
            logits,
            ids,
            weights,
            k,
            normalize,
        } => {
            let d = graph.tensor(logits);
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
            };
            let values = u32_of(xd.rows * xd.cols, "activations")?;
            let int = lw.int_matvec && lw.int_expert_matvec;
            if int && has_int_form(dw.ty) && xd.cols.is_multiple_of(32) {
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
                let dot = if lw.int_dot_names { "_dot" } else { "" };
                let groups = n_pairs * rows.div_ceil(MATVEC_INT_ROWS);
                let groups = u32_of(groups, "expert mat-vec workgroups")?;
                let what = format!("{label} ({} {})", dw.name, dw.ty);
                let name = format!("matvec_id_int{dot}_{suffix}");
                sink.dispatch(&name, push.bytes(), groups, what)?;
                return Ok(true);
            }
            let held = activation_kernel(dw.ty).map(|k| (x, ScratchForm::Rounded(k)));
            if held.is_some() && *scratch == held {
                push.x = a.scratch;
            } else {
                let rounding = format!("{label} (rounding {} activations)", dw.ty);
                if round_activations(sink, dw.ty, push.x, values, a.scratch, rounding)? {
                    push.x = a.scratch;
                }
                *scratch = held;
            }
            let groups = u32_of(n_pairs * rows, "expert mat-vec workgroups")?;
            let what = format!("{label} ({} {})", dw.name, dw.ty);
            sink.dispatch(&format!("matvec_id_{suffix}"), push.bytes(), groups, what)?;
        }
        Op::MoeSum { x, weights, out } => {
            let d = graph.tensor(out);
            let push = MoeSumPush {
                x: t(x),
                weights: t(weights),
                out: t(out),
                n_rows: u32_of(d.rows, "rows")?,
                cols: u32_of(d.cols, "columns")?,
                k: u32_of(graph.tensor(weights).cols, "experts per token")?,
                pad: 0,
            };
            let groups = groups_for("moe_sum", d.rows * d.cols)?;
            sink.dispatch("moe_sum", push.bytes(), groups, label)?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}
