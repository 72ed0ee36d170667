//! Matmul dispatches: the decode mat-vec (in integers over Q8-packed
//! activations where the weight type has an integer form, else in f32), the
//! portable tiled matmul, and the matrix-core matmul for prefill.

use crate::backend::BackendError;
use crate::graph::fusion::ResidualAdd;
use crate::graph::{Graph, Op, TensorId};
use crate::model::WeightId;
use crate::quant::QuantType;

use super::lower::{q8_packed_layout, u32_of, weight_kernel, DeviceWeight, GraphAddresses};
use super::push::{MatPush, Push, QuantizePush};
use super::{groups_for, has_int_form, KernelSink, Lowering, MatrixTiles};

/// Largest token count the decode mat-vec kernel takes (`MV_MAX_TOKENS`).
pub(super) const MATVEC_MAX_TOKENS: usize = 8;
/// Fewest tokens for the matrix-core matmul. Its f16 operands move results
/// by ~0.06σ from the f32 kernels' (within the tolerance against the CPU);
/// keeping short graphs (decode batches, split prompts) on the f32 kernels
/// keeps them consistent with each other.
pub(super) const COOPMAT_MIN_TOKENS: usize = 32;
/// The matrix-core matmul uses 128x128 tiles when there are at least this
/// many of them and k is at least `COOPMAT_BIG_MIN_K`, else 64x64 ones.
/// Measured on the H100 (docs/vulkan.md): 128x128 everywhere is best for
/// llama2-7b (k 4096 / 11008, >= 128 tiles), 64x64 everywhere for
/// qwen2-0.5b (k 896 / 4864, gate+up 304 big tiles, down 28).
const COOPMAT_BIG_MIN_TILES: usize = 96;
const COOPMAT_BIG_MIN_K: usize = 2048;

/// Whether a matmul of `tiles` 128x128 tiles and inner size `k` takes them.
fn coopmat_big(matrix: MatrixTiles, tiles: usize, k: usize) -> bool {
    match matrix {
        MatrixTiles::BigFrom(min) => tiles >= min,
        MatrixTiles::Auto => tiles >= COOPMAT_BIG_MIN_TILES && k >= COOPMAT_BIG_MIN_K,
        MatrixTiles::Small | MatrixTiles::Off => false,
    }
}

/// Invocations of a dense mat-vec workgroup (`shaders/matvec.comp`,
/// `shaders/matvec_int.comp`).
const MATVEC_WG: usize = 64;

/// Teams a dense mat-vec workgroup is split into for rows of `per_row`
/// work items (8-value units for `matvec_*`, 32-value blocks for
/// `matvec_int_*`), each team on rows of its own: as many as still give
/// every lane of a team an item (a power of two), so a short row does not
/// leave most of a workgroup idle. Real models' rows are thousands of
/// values, one team; the tiny test models' are 64 to 192, where one row a
/// workgroup spent 99% of lavapipe's decode time on the output projection
/// (docs/measurements.md). 1 without `Lowering::row_teams`.
pub fn row_teams(lw: &Lowering, per_row: usize) -> u32 {
    if !lw.row_teams {
        return 1;
    }
    let lanes = per_row.next_power_of_two().min(MATVEC_WG);
    (MATVEC_WG / lanes) as u32
}

/// The name part of a mat-vec split into `teams`: a variant of its own
/// (`_teams`), so the one-team kernel holds none of the split's code.
fn teams_variant(teams: u32) -> &'static str {
    if teams > 1 {
        "_teams"
    } else {
        ""
    }
}

/// Whether matmuls of weight `w` over `n` tokens of `k` values run as the
/// integer mat-vec, reading Q8-packed activations from the scratch.
pub fn int_route(lw: &Lowering, w: &DeviceWeight, n: usize, k: usize) -> bool {
    lw.int_matvec && n <= MATVEC_MAX_TOKENS && has_int_form(w.ty) && k.is_multiple_of(32)
}

/// Whether a matmul by `w` of `n` rows of `k` values reads its input as it
/// is, leaving the scratch alone ([`ScratchUse::Untouched`]): an F32
/// weight (a mixture-of-experts router) off the integer route.
pub fn leaves_scratch(lw: &Lowering, w: &DeviceWeight, n: usize, k: usize) -> bool {
    !int_route(lw, w, n, k) && activation_kernel(w.ty).is_none()
}

/// The kernel that rounds a matmul's activations the way the CPU reference
/// (ggml) quantizes them for this weight type, if any: Q8_0 (and Q8_1,
/// which rounds the same) for the 32-blocks (MXFP4 included), Q8_K for the 256-blocks (the
/// K-quants, IQ4_XS, the lattice i-quants and the ternary types), f16 /
/// bf16 for those weights.
pub(super) fn activation_kernel(ty: QuantType) -> Option<&'static str> {
    use QuantType as T;
    match ty {
        T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 | T::Q8_0 | T::IQ4NL | T::MXFP4 => {
            Some("quantize_q8_0")
        }
        T::Q2K | T::Q3K | T::Q4K | T::Q5K | T::Q6K | T::IQ4XS => Some("quantize_q8_k"),
        T::IQ2XXS | T::IQ2XS | T::IQ2S | T::IQ3XXS | T::IQ3S | T::IQ1S | T::IQ1M => {
            Some("quantize_q8_k")
        }
        T::TQ1_0 | T::TQ2_0 => Some("quantize_q8_k"),
        T::F16 => Some("quantize_f16"),
        T::BF16 => Some("quantize_bf16"),
        _ => None,
    }
}

/// Rounds `n` activations at `x` into `scratch` the way the CPU reference
/// quantizes them for weights of type `ty`, if it does; returns whether it
/// did (the matmul then reads `scratch`).
pub(super) fn round_activations(
    sink: &mut dyn KernelSink,
    ty: QuantType,
    x: u64,
    n: u32,
    scratch: u64,
    what: String,
) -> Result<bool, BackendError> {
    let Some(q) = activation_kernel(ty) else {
        return Ok(false);
    };
    let quant = QuantizePush {
        x,
        out: scratch,
        n,
        pad: 0,
        scales: 0,
        up: 0,
        act: 0,
        alpha: 0.0,
        limit: 0.0,
    };
    // One invocation per block of 32 (256 for Q8_K, 8 for floats).
    let block = match q {
        "quantize_q8_0" => 32,
        "quantize_q8_k" => 256,
        _ => 8,
    };
    let groups = groups_for(q, (n / block) as usize)?;
    sink.dispatch(q, quant.bytes(), groups, what)?;
    Ok(true)
}

pub fn matmul_weight<'w>(op: &Op, a: &'w GraphAddresses) -> &'w DeviceWeight {
    match *op {
        Op::MatMul { w, .. } => &a.weights[w],
        _ => unreachable!("matmul groups hold matmuls only"),
    }
}

/// Matmuls that one dispatch computes: they share their input and weight
/// type (at most three: the push block's size).
pub struct MatmulRun<'g> {
    pub ops: &'g [Op],
    /// Index of the first in the graph (for labels).
    pub first: usize,
    /// The scratch already holds the input Q8-packed (a fused producer
    /// wrote it, or an earlier run of the same group quantized it).
    pub prequantized: bool,
    /// A residual add folded into the (single, integer-route) matmul.
    pub residual: Option<ResidualAdd>,
}

/// What a recorded matmul run left in the scratch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScratchUse {
    /// The run's input, Q8-packed (the integer mat-vec's form).
    Q8Packed,
    /// Nothing: the run read its input as it is (an F32 router), so what
    /// the scratch held before still holds.
    Untouched,
    /// Rounded activations the lowering does not reuse.
    Overwritten,
}

/// Records one run; returns what it left in the scratch.
pub fn record_matmuls(
    sink: &mut dyn KernelSink,
    lw: &Lowering,
    graph: &Graph,
    run: &MatmulRun,
    a: &GraphAddresses,
    t: &dyn Fn(TensorId) -> u64,
) -> Result<ScratchUse, BackendError> {
    let n_ops = graph.ops.len();
    let mut push = MatPush {
        x: 0,
        w: [0; 3],
        out: [0; 3],
        bias: [0; 3],
        rows: [0; 3],
        k: 0,
        n: 0,
        n_parts: run.ops.len() as u32,
        x_scales: 0,
        residual: 0,
        teams: 1,
        pad: 0,
    };
    let mut names = Vec::new();
    let mut weight: Option<&DeviceWeight> = None;
    for (p, op) in run.ops.iter().enumerate() {
        let Op::MatMul { w, x, bias, out } = *op else {
            unreachable!("matmul groups hold matmuls only")
        };
        let dw: &DeviceWeight = &a.weights[w as WeightId];
        let xd = graph.tensor(x);
        push.x = t(x);
        push.k = u32_of(xd.cols, "inner size")?;
        push.n = u32_of(xd.rows, "tokens")?;
        push.w[p] = dw.address;
        push.out[p] = t(out);
        push.bias[p] = bias.map_or(0, |b| a.weights[b].address);
        push.rows[p] = u32_of(dw.rows, "rows")?;
        names.push(dw.name.clone());
        weight = Some(dw);
    }
    let w = weight.expect("at least one matmul");
    // A mat-vec's workgroups at `per_group` rows each: every part's rows
    // in whole workgroups.
    let row_groups = |per_group: usize| -> usize {
        run.ops
            .iter()
            .map(|op| matmul_weight(op, a).rows.div_ceil(per_group))
            .sum()
    };
    let suffix = weight_kernel(w)?;
    let n = push.n as usize;
    let first = run.first;
    let what = matmul_label(&names, w.ty, first, run.ops.len(), n_ops);
    let activations = format!("op {first} of {n_ops} (rounding {} activations)", w.ty);
    if int_route(lw, w, n, push.k as usize) {
        // Decode in integers: the activations as Q8 blocks (unless a fused
        // producer wrote them), then the integer mat-vec.
        let values = push.n * push.k;
        (push.x, push.x_scales) = if run.prequantized {
            q8_packed_at(a.scratch, values)
        } else {
            quantize_q8_packed(sink, lw, push.x, values, a.scratch, activations)?
        };
        if let (Some(r), 1) = (run.residual, run.ops.len()) {
            push.out[0] = t(r.out);
            push.residual = t(r.residual);
        }
        let dot = if lw.int_dot_names { "_dot" } else { "" };
        push.teams = row_teams(lw, push.k as usize / 32);
        if lw.row_teams {
            push.teams = push.teams.max(lw.int_teams);
        }
        let groups = row_groups((lw.int_rows * push.teams) as usize);
        let teams = teams_variant(push.teams);
        sink.dispatch(
            &format!("matvec_int{dot}{teams}_{suffix}"),
            push.bytes(),
            u32_of(groups, "matmul workgroups")?,
            what,
        )?;
        return Ok(ScratchUse::Q8Packed);
    }
    let mut used = ScratchUse::Untouched;
    if round_activations(sink, w.ty, push.x, push.n * push.k, a.scratch, activations)? {
        push.x = a.scratch;
        used = ScratchUse::Overwritten;
    }
    let (kernel, groups) = if n <= MATVEC_MAX_TOKENS {
        push.teams = row_teams(lw, push.k as usize / 8);
        ("matvec", row_groups(push.teams as usize))
    } else {
        // Workgroups of a tiling by `bt` tokens x `br` rows.
        let tiles = |bt: usize, br: usize| -> usize {
            run.ops
                .iter()
                .map(|op| matmul_weight(op, a).rows.div_ceil(br) * n.div_ceil(bt))
                .sum()
        };
        // Matrix cores take f16 operands: exact for activations rounded to
        // Q8 / f16 times f16 weights up to one f16 rounding of the product
        // terms, but F32 weights keep the f32 kernel (and their tight
        // agreement with the CPU).
        if lw.matrix != MatrixTiles::Off && w.ty != QuantType::F32 && n >= COOPMAT_MIN_TOKENS {
            // 128x128 tiles where they still fill the GPU, else 64x64;
            // the register-prefetching variants unless turned off.
            let big = tiles(128, 128);
            match (
                coopmat_big(lw.matrix, big, push.k as usize),
                lw.matrix_prefetch,
            ) {
                (true, true) => ("matmul_cmp", big),
                (true, false) => ("matmul_cm", big),
                (false, true) => ("matmul_cmps", tiles(64, 64)),
                (false, false) => ("matmul_cms", tiles(64, 64)),
            }
        } else {
            ("matmul", tiles(32, 64))
        }
    };
    // A split mat-vec's variant (`teams` stays 1 off the mat-vec).
    let teams = teams_variant(push.teams);
    sink.dispatch(
        &format!("{kernel}{teams}_{suffix}"),
        push.bytes(),
        u32_of(groups, "matmul workgroups")?,
        what,
    )?;
    Ok(used)
}

/// Where `values` activations Q8-packed at `scratch` have their quants
/// and their scales (`q8_packed_layout`).
pub(super) fn q8_packed_at(scratch: u64, values: u32) -> (u64, u64) {
    let (scales, _) = q8_packed_layout(values as usize);
    (scratch, scratch + scales as u64)
}

/// Records the Q8 packing of `values` activations at `x` into `scratch`,
/// for an integer mat-vec; returns where its quants and scales are.
pub(super) fn quantize_q8_packed(
    sink: &mut dyn KernelSink,
    lw: &Lowering,
    x: u64,
    values: u32,
    scratch: u64,
    label: String,
) -> Result<(u64, u64), BackendError> {
    let (quants, scales) = q8_packed_at(scratch, values);
    let quant = QuantizePush {
        x,
        out: quants,
        n: values,
        pad: 0,
        scales,
        up: 0,
        act: 0,
        alpha: 0.0,
        limit: 0.0,
    };
    let groups = (values / 32).div_ceil(lw.q8_packed_blocks_per_group);
    sink.dispatch("quantize_q8_packed", quant.bytes(), groups, label)?;
    Ok((quants, scales))
}

/// The timeout label of a (fused) matmul dispatch.
fn matmul_label(names: &[String], ty: QuantType, first: usize, len: usize, n_ops: usize) -> String {
    if len == 1 {
        format!("op {first} of {n_ops} (MatMul {} {ty})", names[0])
    } else {
        format!(
            "ops {first}..{} of {n_ops} (MatMul {} {ty})",
            first + len,
            names.join("+")
        )
    }
}
