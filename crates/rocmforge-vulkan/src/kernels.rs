//! Per-op push constants and dispatch recording: turns a planned graph into
//! dispatches, once, at `prepare`.
//!
//! Every address is frozen at record time (weights, arena offsets, the KV
//! cache, the step-input region); what changes per step (token ids, pos0,
//! n_kv) is read by the kernels from the step-input region, so grids depend
//! only on the graph's shape.

use rocmforge_core::backend::BackendError;
use rocmforge_core::graph::fusion::{group_starting_at, matmul_groups};
use rocmforge_core::graph::{Graph, Op, TensorId};
use rocmforge_core::model::WeightId;
use rocmforge_core::plan::{ArenaPlan, KvLayout};
use rocmforge_core::quant::QuantType;

use crate::commands::{Push, Recorder};
use crate::pipelines::{has_int_form, weight_suffix, Pipelines};

/// A weight as kernels see it.
#[derive(Clone, Debug)]
pub struct DeviceWeight {
    pub name: String,
    pub ty: QuantType,
    pub address: u64,
    pub cols: usize,
    pub rows: usize,
    pub row_bytes: usize,
}

/// Largest token count the decode mat-vec kernel takes (`MV_MAX_TOKENS`).
pub const MATVEC_MAX_TOKENS: usize = 8;
/// Most matmuls one dispatch fuses (the push block holds three).
const MAX_PARTS: usize = 3;
/// Fewest tokens for the matrix-core matmul. Its f16 operands move results
/// by ~0.06σ from the f32 kernels' (within the tolerance against the CPU);
/// keeping short graphs (decode batches, split prompts) on the f32 kernels
/// keeps them consistent with each other.
const COOPMAT_MIN_TOKENS: usize = 32;
/// The matrix-core matmul uses 128x128 tiles when there are at least this
/// many of them and k is at least `COOPMAT_BIG_MIN_K`, else 64x64 ones.
/// Measured on the H100 (docs/vulkan.md): 128x128 everywhere is best for
/// llama2-7b (k 4096 / 11008, >= 128 tiles), 64x64 everywhere for
/// qwen2-0.5b (k 896 / 4864, gate+up 304 big tiles, down 28).
const COOPMAT_BIG_MIN_TILES: usize = 96;
const COOPMAT_BIG_MIN_K: usize = 2048;
/// Whether a matmul of `tiles` 128x128 tiles and inner size `k` takes them;
/// `ROCMFORGE_VULKAN_BIG_TILES=n` replaces the rule by "at least n tiles"
/// (tests use 0 to run the 128x128 kernel on small models).
fn coopmat_big(tiles: usize, k: usize) -> bool {
    match std::env::var("ROCMFORGE_VULKAN_BIG_TILES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(min) => tiles >= min,
        None => tiles >= COOPMAT_BIG_MIN_TILES && k >= COOPMAT_BIG_MIN_K,
    }
}
/// Largest graph (tokens) whose attention stages K/V rows in shared memory
/// (`attention_staged`): on the H100 staging halved decode attention time
/// and cost prefill a fifth of its speed (docs/vulkan.md).
const STAGED_ATTENTION_MAX_TOKENS: usize = 8;
/// Largest head size the attention kernel takes (`ATT_DIMS * WG_SIZE`).
pub const MAX_HEAD_DIM: usize = 256;

#[repr(C)]
pub struct EmbedPush {
    pub table: u64,
    pub out: u64,
    pub step: u64,
    pub row_bytes: u32,
    pub cols: u32,
    pub n_vocab: u32,
    pub n_tokens: u32,
}
// SAFETY: repr(C), three u64 then four u32: 40 bytes, no padding.
unsafe impl Push for EmbedPush {}

#[repr(C)]
pub struct MatPush {
    pub x: u64,
    pub w: [u64; 3],
    pub out: [u64; 3],
    pub bias: [u64; 3],
    pub rows: [u32; 3],
    pub k: u32,
    pub n: u32,
    pub n_parts: u32,
    /// Per-block (d, s) of Q8-packed activations (`matvec_int` only).
    pub x_scales: u64,
}
// SAFETY: repr(C), ten u64, six u32 (ending at byte 104, 8-aligned), one
// u64: 112 bytes, no padding.
unsafe impl Push for MatPush {}

#[repr(C)]
pub struct NormPush {
    pub x: u64,
    pub w: u64,
    pub out: u64,
    pub group: u32,
    pub n_groups: u32,
    pub eps: f32,
    pub pad: u32,
}
// SAFETY: repr(C), three u64 then four 4-byte fields: 40 bytes, no padding.
unsafe impl Push for NormPush {}

#[repr(C)]
pub struct RopePush {
    pub x: u64,
    pub step: u64,
    pub freq_factors: u64,
    pub rows: u32,
    pub n_heads: u32,
    pub head_dim: u32,
    pub n_rot: u32,
    pub neox: u32,
    pub theta_scale: f32,
    pub freq_scale: f32,
    pub pad: u32,
}
// SAFETY: repr(C), three u64 then eight 4-byte fields: 56 bytes, no padding.
unsafe impl Push for RopePush {}

#[repr(C)]
pub struct StoreKvPush {
    pub k: u64,
    pub v: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    pub step: u64,
    pub rows: u32,
    pub kv_dim: u32,
}
// SAFETY: repr(C), five u64 then two u32: 48 bytes, no padding.
unsafe impl Push for StoreKvPush {}

#[repr(C)]
pub struct AttentionPush {
    pub q: u64,
    pub out: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    pub step: u64,
    pub n_tokens: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    pub kv_dim: u32,
    pub scale: f32,
}
// SAFETY: repr(C), five u64 then six 4-byte fields: 64 bytes, no padding.
unsafe impl Push for AttentionPush {}

#[repr(C)]
pub struct EltwisePush {
    pub a: u64,
    pub b: u64,
    pub out: u64,
    pub n: u32,
    pub pad: u32,
}
// SAFETY: repr(C), three u64 then two u32: 32 bytes, no padding.
unsafe impl Push for EltwisePush {}

#[repr(C)]
pub struct SpinPush {
    pub flag: u64,
    pub bound: u64,
}
// SAFETY: repr(C), two u64: 16 bytes.
unsafe impl Push for SpinPush {}

#[repr(C)]
pub struct QuantizePush {
    pub x: u64,
    pub out: u64,
    pub n: u32,
    pub pad: u32,
    /// Where `quantize_q8_packed` writes the per-block (d, s).
    pub scales: u64,
}
// SAFETY: repr(C), two u64, two u32, one u64: 32 bytes, no padding.
unsafe impl Push for QuantizePush {}

/// The kernel that rounds a matmul's activations the way the CPU reference
/// (ggml) quantizes them for this weight type, if any: Q8_0 (and Q8_1,
/// which rounds the same) for the 32-blocks, Q8_K for the K-quants and
/// IQ4_XS, f16 / bf16 for those weights.
pub fn activation_kernel(ty: QuantType) -> Option<&'static str> {
    use QuantType as T;
    match ty {
        T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 | T::Q8_0 | T::IQ4NL => Some("quantize_q8_0"),
        T::Q2K | T::Q3K | T::Q4K | T::Q5K | T::Q6K | T::IQ4XS => Some("quantize_q8_k"),
        T::F16 => Some("quantize_f16"),
        T::BF16 => Some("quantize_bf16"),
        _ => None,
    }
}

/// Bytes of scratch a graph needs: one rounded copy of the largest matmul
/// input (f32), or its Q8-packed form (`q8_packed_layout`), whichever is
/// larger.
pub fn scratch_bytes(graph: &Graph) -> usize {
    graph
        .ops
        .iter()
        .filter_map(|op| match *op {
            Op::MatMul { x, .. } => {
                let d = graph.tensor(x);
                Some(d.bytes().max(q8_packed_layout(d.rows * d.cols).1))
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
        .next_multiple_of(256)
}

/// Layout of `n` activations quantized by `quantize_q8_packed`: int8 quants
/// from byte 0, then per block of 32 a (d, s) pair of f32 from the returned
/// offset; returns (scales offset, total bytes).
pub fn q8_packed_layout(n: usize) -> (usize, usize) {
    let scales = n.next_multiple_of(256);
    (scales, scales + n / 32 * 8)
}

/// Rows per workgroup of the `matvec_int` kernels (`NR` in build.rs).
const MATVEC_INT_ROWS: usize = 2;

/// Whether the decode mat-vec in integers is on
/// (`ROCMFORGE_VULKAN_MATVEC_INT=0` keeps the f32 one, for measurement).
fn matvec_int_enabled() -> bool {
    std::env::var("ROCMFORGE_VULKAN_MATVEC_INT").map_or(true, |v| v != "0")
}

/// Everything a graph's dispatches refer to.
pub struct GraphAddresses<'a> {
    pub weights: &'a [DeviceWeight],
    pub arena: u64,
    /// Rounded matmul activations.
    pub scratch: u64,
    pub kv: u64,
    pub kv_layout: KvLayout,
    pub step: u64,
    pub n_vocab: usize,
}

fn u32_of(v: usize, what: &str) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| BackendError::Device(format!("{what} {v} exceeds 32 bits")))
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

/// Records every op of `graph` into `rec`.
pub fn record_graph(
    rec: &mut Recorder,
    pipes: &mut Pipelines,
    device: &ash::Device,
    graph: &Graph,
    plan: &ArenaPlan,
    a: &GraphAddresses,
) -> Result<(), BackendError> {
    let t = |id: TensorId| a.arena + plan.offsets[id] as u64;
    let n_ops = graph.ops.len();
    let groups = matmul_groups(graph, plan);
    let label = |i: usize, what: String| format!("op {i} of {n_ops} ({what})");
    let mut i = 0;
    while i < n_ops {
        let group = group_starting_at(&groups, i).unwrap_or(i..i + 1);
        let op = &graph.ops[i];
        if let Op::MatMul { .. } = op {
            // Runs of the group with one weight type, at most MAX_PARTS each.
            let mut start = group.start;
            while start < group.end {
                let ty = matmul_weight(&graph.ops[start], a).ty;
                let mut end = start + 1;
                while end < group.end
                    && end - start < MAX_PARTS
                    && matmul_weight(&graph.ops[end], a).ty == ty
                {
                    end += 1;
                }
                record_matmuls(
                    rec,
                    pipes,
                    device,
                    graph,
                    &graph.ops[start..end],
                    a,
                    &t,
                    start,
                    n_ops,
                )?;
                start = end;
            }
            i = group.end;
            continue;
        }
        match *op {
            Op::Embed { table, out } => {
                let w = &a.weights[table];
                let name = format!("embed_{}", weight_kernel(w)?);
                let p = pipes.get(device, &name)?;
                let push = EmbedPush {
                    table: w.address,
                    out: t(out),
                    step: a.step,
                    row_bytes: u32_of(w.row_bytes, "row bytes")?,
                    cols: u32_of(w.cols, "columns")?,
                    n_vocab: u32_of(a.n_vocab, "vocabulary")?,
                    n_tokens: u32_of(graph.n_tokens, "tokens")?,
                };
                rec.dispatch(
                    p,
                    &push,
                    push.n_tokens,
                    label(i, format!("Embed {} {}", w.name, w.ty)),
                );
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                group,
            } => {
                let d = graph.tensor(x);
                let w = &a.weights[weight];
                let p = pipes.get(device, "rmsnorm")?;
                let n_groups = u32_of(d.rows * d.cols / group, "norm groups")?;
                let push = NormPush {
                    x: t(x),
                    w: w.address,
                    out: t(out),
                    group: u32_of(group, "norm group")?,
                    n_groups,
                    eps: graph.rms_eps,
                    pad: 0,
                };
                rec.dispatch(p, &push, n_groups, label(i, format!("RmsNorm {}", w.name)));
            }
            Op::Rope { x, n_heads } => {
                let d = graph.tensor(x);
                let r = &graph.rope;
                let p = pipes.get(device, "rope")?;
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
                    pad: 0,
                };
                let items = d.rows * n_heads * (r.n_rot / 2);
                let groups = u32_of(items.div_ceil(64), "rope workgroups")?;
                rec.dispatch(p, &push, groups, label(i, format!("Rope {n_heads} heads")));
            }
            Op::StoreKv { layer, k, v } => {
                let d = graph.tensor(k);
                let l = a.kv_layout;
                let p = pipes.get(device, "store_kv")?;
                let push = StoreKvPush {
                    k: t(k),
                    v: t(v),
                    k_cache: a.kv + 2 * l.k_offset(layer) as u64,
                    v_cache: a.kv + 2 * l.v_offset(layer) as u64,
                    step: a.step,
                    rows: u32_of(d.rows, "rows")?,
                    kv_dim: u32_of(l.kv_dim, "kv width")?,
                };
                let groups = u32_of((d.rows * l.kv_dim / 2).div_ceil(64), "store workgroups")?;
                rec.dispatch(p, &push, groups, label(i, format!("StoreKv layer {layer}")));
            }
            Op::Attention { layer, q, out } => {
                let s = &graph.attention;
                let l = a.kv_layout;
                // Few (token, head) workgroups: stage K/V rows in shared
                // memory (attention.comp, STAGE_KV).
                let kernel = if graph.n_tokens <= STAGED_ATTENTION_MAX_TOKENS {
                    "attention_staged"
                } else {
                    "attention"
                };
                let p = pipes.get(device, kernel)?;
                let push = AttentionPush {
                    q: t(q),
                    out: t(out),
                    k_cache: a.kv + 2 * l.k_offset(layer) as u64,
                    v_cache: a.kv + 2 * l.v_offset(layer) as u64,
                    step: a.step,
                    n_tokens: u32_of(graph.n_tokens, "tokens")?,
                    n_head: u32_of(s.n_head, "heads")?,
                    n_head_kv: u32_of(s.n_head_kv, "kv heads")?,
                    head_dim: u32_of(s.head_dim, "head size")?,
                    kv_dim: u32_of(l.kv_dim, "kv width")?,
                    scale: s.scale,
                };
                let groups = u32_of(graph.n_tokens * s.n_head, "attention workgroups")?;
                rec.dispatch(
                    p,
                    &push,
                    groups,
                    label(i, format!("Attention layer {layer}")),
                );
            }
            Op::SwiGlu { gate, up, out } => {
                eltwise(
                    rec,
                    pipes,
                    device,
                    "swiglu",
                    t(gate),
                    t(up),
                    t(out),
                    graph.tensor(out),
                    label(i, "SwiGlu".into()),
                )?;
            }
            Op::Add { a: x, b, out } => {
                eltwise(
                    rec,
                    pipes,
                    device,
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
                    rec,
                    pipes,
                    device,
                    "copy",
                    src,
                    0,
                    t(out),
                    graph.tensor(out),
                    label(i, "LastRow".into()),
                )?;
            }
            Op::MatMul { .. } => unreachable!("handled above"),
        }
        i += 1;
    }
    Ok(())
}

fn matmul_weight<'w>(op: &Op, a: &'w GraphAddresses) -> &'w DeviceWeight {
    match *op {
        Op::MatMul { w, .. } => &a.weights[w],
        _ => unreachable!("matmul groups hold matmuls only"),
    }
}

#[allow(clippy::too_many_arguments)]
fn eltwise(
    rec: &mut Recorder,
    pipes: &mut Pipelines,
    device: &ash::Device,
    kernel: &str,
    a: u64,
    b: u64,
    out: u64,
    shape: rocmforge_core::graph::TensorDesc,
    label: String,
) -> Result<(), BackendError> {
    let p = pipes.get(device, kernel)?;
    let n = u32_of(shape.rows * shape.cols, "elements")?;
    let push = EltwisePush {
        a,
        b,
        out,
        n,
        pad: 0,
    };
    rec.dispatch(p, &push, n.div_ceil(256), label);
    Ok(())
}

/// One dispatch for matmuls sharing input and weight type: the decode
/// mat-vec for up to `MATVEC_MAX_TOKENS` tokens, else the tiled matmul (on
/// matrix cores where the device has them, from `COOPMAT_MIN_TOKENS`).
#[allow(clippy::too_many_arguments)]
fn record_matmuls(
    rec: &mut Recorder,
    pipes: &mut Pipelines,
    device: &ash::Device,
    graph: &Graph,
    ops: &[Op],
    a: &GraphAddresses,
    t: &dyn Fn(TensorId) -> u64,
    first: usize,
    n_ops: usize,
) -> Result<(), BackendError> {
    let mut push = MatPush {
        x: 0,
        w: [0; 3],
        out: [0; 3],
        bias: [0; 3],
        rows: [0; 3],
        k: 0,
        n: 0,
        n_parts: ops.len() as u32,
        x_scales: 0,
    };
    let mut names = Vec::new();
    let mut weight: Option<&DeviceWeight> = None;
    let mut n_rows = 0;
    for (p, op) in ops.iter().enumerate() {
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
        n_rows += dw.rows;
        names.push(dw.name.clone());
        weight = Some(dw);
    }
    let w = weight.expect("at least one matmul");
    let suffix = weight_kernel(w)?;
    let n = push.n as usize;
    let activations = format!("op {first} of {n_ops} (rounding {} activations)", w.ty);
    if n <= MATVEC_MAX_TOKENS
        && has_int_form(w.ty)
        && matvec_int_enabled()
        && push.k.is_multiple_of(32)
    {
        // Decode in integers: quantize the activations to Q8 blocks, then
        // the integer mat-vec.
        let values = push.n * push.k;
        let (scales, _) = q8_packed_layout(values as usize);
        let quant = QuantizePush {
            x: push.x,
            out: a.scratch,
            n: values,
            pad: 0,
            scales: a.scratch + scales as u64,
        };
        let p = pipes.get(device, "quantize_q8_packed")?;
        rec.dispatch(p, &quant, (values / 32).div_ceil(64), activations);
        push.x = quant.out;
        push.x_scales = quant.scales;
        let dot = if pipes.int_dot { "_dot" } else { "" };
        let groups: usize = ops
            .iter()
            .map(|op| matmul_weight(op, a).rows.div_ceil(MATVEC_INT_ROWS))
            .sum();
        let p = pipes.get(device, &format!("matvec_int{dot}_{suffix}"))?;
        let what = matmul_label(&names, w.ty, first, ops.len(), n_ops);
        rec.dispatch(p, &push, u32_of(groups, "matmul workgroups")?, what);
        return Ok(());
    }
    if let Some(q) = activation_kernel(w.ty) {
        let p = pipes.get(device, q)?;
        let n = push.n * push.k;
        let quant = QuantizePush {
            x: push.x,
            out: a.scratch,
            n,
            pad: 0,
            scales: 0,
        };
        // One invocation per block of 32 (256 for Q8_K, 8 for floats).
        let block = match q {
            "quantize_q8_0" => 32,
            "quantize_q8_k" => 256,
            _ => 8,
        };
        rec.dispatch(p, &quant, (n / block).div_ceil(64), activations);
        push.x = a.scratch;
    }
    let (kernel, groups) = if n <= MATVEC_MAX_TOKENS {
        ("matvec", n_rows)
    } else {
        // Workgroups of a tiling by `bt` tokens x `br` rows.
        let tiles = |bt: usize, br: usize| -> usize {
            ops.iter()
                .map(|op| matmul_weight(op, a).rows.div_ceil(br) * n.div_ceil(bt))
                .sum()
        };
        // Matrix cores take f16 operands: exact for activations rounded to
        // Q8 / f16 times f16 weights up to one f16 rounding of the product
        // terms, but F32 weights keep the f32 kernel (and their tight
        // agreement with the CPU).
        if pipes.coopmat && w.ty != QuantType::F32 && n >= COOPMAT_MIN_TOKENS {
            // 128x128 tiles where they still fill the GPU, else 64x64.
            // The register-prefetching variants unless
            // ROCMFORGE_VULKAN_COOPMAT_PREFETCH=0.
            let prefetch =
                std::env::var("ROCMFORGE_VULKAN_COOPMAT_PREFETCH").map_or(true, |v| v != "0");
            let big = tiles(128, 128);
            match (coopmat_big(big, push.k as usize), prefetch) {
                (true, true) => ("matmul_cmp", big),
                (true, false) => ("matmul_cm", big),
                (false, true) => ("matmul_cmps", tiles(64, 64)),
                (false, false) => ("matmul_cms", tiles(64, 64)),
            }
        } else {
            ("matmul", tiles(32, 64))
        }
    };
    let p = pipes.get(device, &format!("{kernel}_{suffix}"))?;
    let what = matmul_label(&names, w.ty, first, ops.len(), n_ops);
    rec.dispatch(p, &push, u32_of(groups, "matmul workgroups")?, what);
    Ok(())
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
