//! The argument blocks of the GPU kernels, one per kernel family: a Vulkan
//! shader's push-constant block (std430) and a HIP kernel's one by-value
//! parameter (`kernels/push.h`) have exactly these layouts. Every u64 is
//! 8-aligned, so fields are ordered to leave no padding.
//!
//! These structs are the source of truth. Each one's [`Push::FIELDS`] table
//! (names, offsets and types read from the struct by `fields!`) is
//! checked at compile time to cover it byte for byte, and
//! `crates/rocmforge-vulkan/tests/push_blocks.rs` compares every compiled
//! shader's push-constant block, read back from its SPIR-V, with the table
//! of the block [`fields_of`] names for it, member by member.

/// Largest argument block any kernel takes (Vulkan's guaranteed minimum of
/// push-constant bytes).
pub const PUSH_BYTES: usize = 128;

/// A kernel argument block.
///
/// # Safety
/// The implementing type is `#[repr(C)]`, has no padding bytes, and is at
/// most [`PUSH_BYTES`] long.
pub unsafe trait Push: Sized {
    /// The fields in declaration order (checked below to tile the struct:
    /// every byte belongs to exactly one listed field).
    const FIELDS: &'static [Field];

    fn bytes(&self) -> &[u8] {
        // SAFETY: the trait's contract: every byte of `Self` is initialised.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}

/// The scalar types argument blocks are made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    U32,
    F32,
    U64,
}

impl Scalar {
    pub const fn bytes(self) -> usize {
        match self {
            Scalar::U32 | Scalar::F32 => 4,
            Scalar::U64 => 8,
        }
    }
}

/// The type of one field of an argument block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    Scalar(Scalar),
    /// `[scalar; n]`.
    Array(Scalar, usize),
    /// A nested `#[repr(C)]` block ([`YarnPush`]), by its fields.
    Struct(&'static [Field]),
}

/// One field of an argument block: what the GLSL push-constant blocks
/// (`shaders/*.comp`, checked from the compiled SPIR-V by
/// `crates/rocmforge-vulkan/tests/push_blocks.rs`) and `kernels/push.h`
/// must declare at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
    pub ty: Ty,
}

/// A Rust type an argument-block field may have, and its [`Ty`].
pub trait FieldType {
    const TY: Ty;
}

macro_rules! scalar_fields {
    ($($t:ty => $s:ident),*) => {$(
        impl FieldType for $t {
            const TY: Ty = Ty::Scalar(Scalar::$s);
        }
        impl<const N: usize> FieldType for [$t; N] {
            const TY: Ty = Ty::Array(Scalar::$s, N);
        }
    )*};
}
scalar_fields!(u32 => U32, f32 => F32, u64 => U64);

/// The [`Field`] of struct `S` named `name` at `offset`, its type taken
/// from `get` (`|s: &S| &s.name`), so a table cannot misstate it.
const fn field<S, T: FieldType>(name: &'static str, offset: usize, get: fn(&S) -> &T) -> Field {
    let _ = get;
    Field {
        name,
        offset,
        size: std::mem::size_of::<T>(),
        ty: T::TY,
    }
}

/// `fields!(S: a, b, c)`: the [`Field`] table of struct `S`, names,
/// offsets and types all read from the struct itself.
macro_rules! fields {
    ($s:ident: $($f:ident),+ $(,)?) => {
        &[$(field(stringify!($f), std::mem::offset_of!($s, $f), |s: &$s| &s.$f)),+]
    };
}

/// Whether `fields` tile `size` bytes: each starts where the one before
/// ends, the first at 0 and the last ending at `size`. So a table lists
/// every field of its struct, in order, and the struct has no padding.
pub const fn tiles(fields: &[Field], size: usize) -> bool {
    let mut at = 0;
    let mut i = 0;
    while i < fields.len() {
        if fields[i].offset != at {
            return false;
        }
        at += fields[i].size;
        i += 1;
    }
    at == size
}

/// The argument block kernel `name` takes, by its fields: the one the
/// lowering (`lower.rs`, `matmul.rs`, `moe.rs`) passes it. Families as in
/// [`super::workgroup_size`]; None for a name no lowering dispatches.
pub fn fields_of(kernel: &str) -> Option<&'static [Field]> {
    let family = |prefix: &str| kernel.starts_with(prefix);
    Some(match kernel {
        _ if family("embed_") => EmbedPush::FIELDS,
        _ if family("matvec_id_") => MatIdPush::FIELDS,
        _ if family("matmul_id_") => MatGroupPush::FIELDS,
        // matvec_, matvec_int_, matvec_int_dot_, matmul_, matmul_cm*_.
        _ if family("matvec_") || family("matmul_") => MatPush::FIELDS,
        "rmsnorm" | "rmsnorm_q8" => NormPush::FIELDS,
        "rope" => RopePush::FIELDS,
        "rope_kv" => RopeKvPush::FIELDS,
        "norm_rope_kv" => NormRopeKvPush::FIELDS,
        "store_kv" | "store_kv_q8_0" | "store_kv_q4_0" => StoreKvPush::FIELDS,
        k if ATTENTION_KERNELS.contains(&k) => AttentionPush::FIELDS,
        "add" | "swiglu" | "swiglu_oai" | "sigmoid_gate" | "geglu" | "scale" | "copy" => {
            EltwisePush::FIELDS
        }
        "attn_temp" => AttnTempPush::FIELDS,
        "quantize_q8_0" | "quantize_q8_k" | "quantize_q8_packed" | "swiglu_q8"
        | "swiglu_oai_q8" | "quantize_f16" | "quantize_bf16" => QuantizePush::FIELDS,
        "moe_route" => MoeRoutePush::FIELDS,
        "moe_router_f32" | "moe_norm_router_f32" => MoeRouterPush::FIELDS,
        "moe_sum" => MoeSumPush::FIELDS,
        "moe_sum_rmsnorm" | "moe_sum_rmsnorm_q8" => MoeSumNormPush::FIELDS,
        "moe_group" => MoeGroupPush::FIELDS,
        "spin" => SpinPush::FIELDS,
        _ => return None,
    })
}

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
unsafe impl Push for EmbedPush {
    const FIELDS: &'static [Field] =
        fields!(EmbedPush: table, out, step, row_bytes, cols, n_vocab, n_tokens);
}

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
    /// Rows added to the output, a fused residual add (`matvec_int` only;
    /// 0 = none).
    pub residual: u64,
    /// Teams the mat-vec workgroups are split into, each with rows of its
    /// own (`matvec_*`, `matvec_int_*`; 1: the whole workgroup on a row, or
    /// on `Lowering::int_rows`; see `gpu::matmul::row_teams`).
    pub teams: u32,
    pub pad: u32,
}
// SAFETY: repr(C), ten u64, six u32 (ending at byte 104, 8-aligned), two
// u64, two u32: 128 bytes, no padding.
unsafe impl Push for MatPush {
    const FIELDS: &'static [Field] =
        fields!(MatPush: x, w, out, bias, rows, k, n, n_parts, x_scales, residual, teams, pad);
}

#[repr(C)]
pub struct NormPush {
    pub x: u64,
    pub w: u64,
    pub out: u64,
    pub group: u32,
    pub n_groups: u32,
    pub eps: f32,
    pub pad: u32,
    /// Where `rmsnorm_q8` also writes its output Q8-packed (quants, scales).
    pub q8: u64,
    pub q8_scales: u64,
    /// A second norm of the same group size in the same launch (`rmsnorm`
    /// only: Qwen3's K norm beside its Q norm): workgroups `n_groups ..
    /// n_groups + n_groups2` normalise `x2` by `w2` into `out2`.
    pub x2: u64,
    pub w2: u64,
    pub out2: u64,
    pub n_groups2: u32,
    pub pad2: u32,
}
// SAFETY: repr(C), three u64, four 4-byte fields, five u64, two u32: 88
// bytes, no padding.
unsafe impl Push for NormPush {
    const FIELDS: &'static [Field] = fields!(NormPush: x, w, out, group, n_groups, eps, pad, q8, q8_scales, x2, w2, out2, n_groups2, pad2);
}

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
    pub yarn: YarnPush,
    /// Always 0: the u64s' alignment rounds the struct to 72 bytes, and
    /// this field makes those last 4 bytes initialised.
    pub pad: u32,
}
// SAFETY: repr(C), three u64 then seven 4-byte fields, YarnPush (four f32)
// and `pad`: 72 bytes with no padding (checked at the end of this file).
unsafe impl Push for RopePush {
    const FIELDS: &'static [Field] = fields!(RopePush: x, step, freq_factors, rows, n_heads, head_dim, n_rot, neox, theta_scale, freq_scale, yarn, pad);
}

/// YaRN's per-op terms ([`crate::graph::YarnTerms`]); `ext_factor` 0 and
/// `mscale` 1 for plain RoPE.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct YarnPush {
    pub ext_factor: f32,
    pub mscale: f32,
    pub corr_lo: f32,
    pub corr_hi: f32,
}

impl YarnPush {
    pub const FIELDS: &'static [Field] = fields!(YarnPush: ext_factor, mscale, corr_lo, corr_hi);
}

impl FieldType for YarnPush {
    const TY: Ty = Ty::Struct(YarnPush::FIELDS);
}

impl From<crate::graph::YarnTerms> for YarnPush {
    fn from(t: crate::graph::YarnTerms) -> Self {
        YarnPush {
            ext_factor: t.ext_factor,
            mscale: t.mscale,
            corr_lo: t.corr_dims[0],
            corr_hi: t.corr_dims[1],
        }
    }
}

/// `rope_kv`: RoPE of Q (at `x`) and K, and the step's K / V rows stored
/// into the layer's cache.
#[repr(C)]
pub struct RopeKvPush {
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
    pub n_heads_kv: u32,
    pub yarn: YarnPush,
    pub k: u64,
    pub v: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    /// Positions the layer's cache block keeps: position `p` is row
    /// `p % ring` (`n_ctx`, or a sliding-window layer's ring).
    pub ring: u32,
    pub pad: u32,
}
// SAFETY: repr(C), three u64, eight 4-byte fields and YarnPush's four
// (ending at byte 72), four u64, two u32: 112 bytes, no padding.
unsafe impl Push for RopeKvPush {
    const FIELDS: &'static [Field] = fields!(RopeKvPush: x, step, freq_factors, rows, n_heads, head_dim, n_rot, neox, theta_scale, freq_scale, n_heads_kv, yarn, k, v, k_cache, v_cache, ring, pad);
}

/// `norm_rope_kv`: Qwen3's per-head RMS norms of Q and K (`q` → `q_out`,
/// `k` → `k_out`, by the weights at `q_norm` / `k_norm`), RoPE of both, and
/// the step's K / V rows stored into the layer's f16 cache: `rope_kv` with
/// the norms before it, for RoPE without YaRN (the block has no room left
/// for its terms: 128 bytes, the least push size Vulkan promises).
#[repr(C)]
pub struct NormRopeKvPush {
    pub q: u64,
    pub q_out: u64,
    pub k: u64,
    pub k_out: u64,
    pub v: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    pub step: u64,
    pub freq_factors: u64,
    pub q_norm: u64,
    pub k_norm: u64,
    pub rows: u32,
    pub n_heads: u32,
    pub head_dim: u32,
    pub n_rot: u32,
    pub neox: u32,
    pub theta_scale: f32,
    pub freq_scale: f32,
    pub n_heads_kv: u32,
    /// Position `p` is row `p % ring` of the layer's blocks.
    pub ring: u32,
    pub eps: f32,
}
// SAFETY: repr(C), eleven u64 then ten 4-byte fields: 128 bytes, no
// padding.
unsafe impl Push for NormRopeKvPush {
    const FIELDS: &'static [Field] = fields!(NormRopeKvPush: q, q_out, k, k_out, v, k_cache, v_cache, step, freq_factors, q_norm, k_norm, rows, n_heads, head_dim, n_rot, neox, theta_scale, freq_scale, n_heads_kv, ring, eps);
}

#[repr(C)]
pub struct StoreKvPush {
    pub k: u64,
    pub v: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    pub step: u64,
    pub rows: u32,
    pub kv_dim: u32,
    /// Position `p` is row `p % ring` of the layer's blocks.
    pub ring: u32,
    pub pad: u32,
}
// SAFETY: repr(C), five u64 then four u32: 56 bytes, no padding.
unsafe impl Push for StoreKvPush {
    const FIELDS: &'static [Field] =
        fields!(StoreKvPush: k, v, k_cache, v_cache, step, rows, kv_dim, ring, pad);
}

/// The kernels that take an [`AttentionPush`].
pub const ATTENTION_KERNELS: &[&str] = &[
    "attention",
    "attention_f32",
    "attention_staged",
    "attention_staged_q8",
    "attention_split",
    "attention_decode",
    "attention_decode_wide",
    "attention_rows",
    "attention_rows_wide",
    "attention_cm",
    "attention_cm64",
    "attention_combine",
    "attention_combine_q8",
    // A quantized cache's (K and V of one type).
    "attention_q8_0",
    "attention_q4_0",
    "attention_decode_q8_0",
    "attention_decode_q4_0",
    "attention_decode_wide_q8_0",
    "attention_decode_wide_q4_0",
    "attention_rows_q8_0",
    "attention_rows_q4_0",
    "attention_rows_wide_q8_0",
    "attention_rows_wide_q4_0",
    "attention_cm_q8_0",
    "attention_cm_q4_0",
    "attention_cm64_q8_0",
    "attention_cm64_q4_0",
];

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
    /// Where `attention_staged_q8` also writes its output Q8-packed.
    pub q8: u64,
    pub q8_scales: u64,
    /// Positions a token attends to (itself and the ones before), 0 for
    /// all of them.
    pub window: u32,
    /// Position `p` is row `p % ring` of the layer's cache blocks.
    pub ring: u32,
    /// One logit per query head joining every softmax's denominator
    /// (gpt-oss's attention sinks, f32), 0 for none.
    pub sinks: u64,
    /// Decode attention by runs (`attention_split`, `attention_decode*`,
    /// `attention_combine*`; 0 otherwise): each run's running maximum, sum
    /// and unnormalised output ([`super::split`] has the layout).
    pub partials: u64,
    /// Splits of every (token, head) row's positions, 1 unsplit.
    pub n_split: u32,
    /// Fewest positions a split takes (fewer splits at a short context).
    pub split_min: u32,
    /// A `u32` per (token, head) row in the step-input region (zero at
    /// the start of every step, [`crate::plan::StepInputLayout`]): the
    /// decode kernels count a row's finished runs there, and the last one
    /// merges the row as `attention_combine` would and puts the count back
    /// to zero. 0: a combine launch merges.
    pub counters: u64,
}
// SAFETY: repr(C), five u64, six 4-byte fields (ending at byte 64), two
// u64, two u32, two u64, two u32, one u64: 120 bytes, no padding.
unsafe impl Push for AttentionPush {
    const FIELDS: &'static [Field] = fields!(AttentionPush: q, out, k_cache, v_cache, step, n_tokens, n_head, n_head_kv, head_dim, kv_dim, scale, q8, q8_scales, window, ring, sinks, partials, n_split, split_min, counters);
}

#[repr(C)]
pub struct EltwisePush {
    pub a: u64,
    pub b: u64,
    pub out: u64,
    pub n: u32,
    /// The factor of `scale`, the alpha of `swiglu_oai` (unused by the
    /// other element-wise kernels).
    pub factor: f32,
    /// The clamp of `swiglu_oai`.
    pub limit: f32,
    /// Values per row of `a`, whose row `i / cols` of `b` (one value per
    /// row) scales it (`sigmoid_gate`; unused by the others).
    pub cols: u32,
}
// SAFETY: repr(C), three u64 then four 4-byte fields: 40 bytes, no padding.
unsafe impl Push for EltwisePush {
    const FIELDS: &'static [Field] = fields!(EltwisePush: a, b, out, n, factor, limit, cols);
}

#[repr(C)]
pub struct SpinPush {
    pub flag: u64,
    pub bound: u64,
}
// SAFETY: repr(C), two u64: 16 bytes.
unsafe impl Push for SpinPush {
    const FIELDS: &'static [Field] = fields!(SpinPush: flag, bound);
}

#[repr(C)]
pub struct QuantizePush {
    pub x: u64,
    pub out: u64,
    pub n: u32,
    pub pad: u32,
    /// Where `quantize_q8_packed` writes the per-block (d, s).
    pub scales: u64,
    /// `swiglu_q8` and `swiglu_oai_q8` only: the up projection (`x` is the
    /// gate) and where the f32 SwiGLU output goes.
    pub up: u64,
    pub act: u64,
    /// `swiglu_oai_q8` only: gpt-oss's alpha and limit (`Op::SwiGluOai`).
    pub alpha: f32,
    pub limit: f32,
}
// SAFETY: repr(C), two u64, two u32, three u64, two f32: 56 bytes, no
// padding.
unsafe impl Push for QuantizePush {
    const FIELDS: &'static [Field] =
        fields!(QuantizePush: x, out, n, pad, scales, up, act, alpha, limit);
}

/// `attn_temp`: Llama 4's attention temperature on `n` values in rows of
/// `cols`, row `r` at position `pos0 + r` (pos0 from the step region).
#[repr(C)]
pub struct AttnTempPush {
    pub x: u64,
    pub step: u64,
    pub n: u32,
    pub cols: u32,
    pub scale: f32,
    pub floor: u32,
}
// SAFETY: repr(C), two u64 then four 4-byte fields: 32 bytes, no padding.
unsafe impl Push for AttnTempPush {
    const FIELDS: &'static [Field] = fields!(AttnTempPush: x, step, n, cols, scale, floor);
}

// The sizes the SAFETY lines above state, and that the GLSL push blocks and
// `kernels/push.h` repeat.
const _: () = assert!(std::mem::size_of::<EmbedPush>() == 40);
const _: () = assert!(std::mem::size_of::<MatPush>() == 128);
const _: () = assert!(std::mem::size_of::<NormPush>() == 88);
const _: () = assert!(std::mem::size_of::<RopePush>() == 72);
const _: () = assert!(std::mem::size_of::<RopeKvPush>() == 112);
const _: () = assert!(std::mem::size_of::<NormRopeKvPush>() == 128);
const _: () = assert!(std::mem::size_of::<StoreKvPush>() == 56);
const _: () = assert!(std::mem::size_of::<AttentionPush>() == 120);
const _: () = assert!(std::mem::size_of::<EltwisePush>() == 40);
const _: () = assert!(std::mem::size_of::<SpinPush>() == 16);
const _: () = assert!(std::mem::size_of::<QuantizePush>() == 56);
const _: () = assert!(std::mem::size_of::<AttnTempPush>() == 32);
const _: () = assert!(std::mem::size_of::<MoeRouterPush>() == 112);

#[repr(C)]
pub struct MoeRoutePush {
    pub logits: u64,
    pub ids: u64,
    pub weights: u64,
    pub n_rows: u32,
    pub n_expert: u32,
    pub k: u32,
    pub normalize: u32,
}
// SAFETY: repr(C), three u64 then four u32: 40 bytes, no padding.
unsafe impl Push for MoeRoutePush {
    const FIELDS: &'static [Field] =
        fields!(MoeRoutePush: logits, ids, weights, n_rows, n_expert, k, normalize);
}

/// `moe_router_f32`: a decode step's router mat-vec of f32 weights
/// (`matvec_f32`'s arithmetic, one workgroup per expert) whose last
/// workgroup to finish routes the logits as `moe_route` does, so the
/// routing needs no launch of its own. With `norm_x` set it also runs the
/// RMS norm in front of the router (the FFN norm): every workgroup
/// normalises the rows it reads itself, and writes its share of the
/// norm's output (blocks of 32 values `r`, `r + n_expert`, ...) to `x` and,
/// where `q8` is set, Q8-packed for the experts' integer mat-vec.
#[repr(C)]
pub struct MoeRouterPush {
    /// The tokens' f32 inputs, `n` rows of `cols` (with `norm_x`: the
    /// norm's output, written).
    pub x: u64,
    /// The router, `n_expert` rows of `cols` f32.
    pub w: u64,
    /// `n_expert` f32 added to the logits, 0 for none.
    pub bias: u64,
    /// The logits written, `n` rows of `n_expert`.
    pub logits: u64,
    /// The picks, `n` rows of `k`: expert ids (as f32) and weights.
    pub ids: u64,
    pub weights: u64,
    /// A `u32` of the step-input region's counters (zero at the start of
    /// every step, [`crate::plan::StepInputLayout`]): the workgroups count
    /// themselves there, and the last puts it back to zero.
    pub counter: u64,
    /// The norm's input rows (0: no norm), its weight (`cols` f32), and
    /// where its output goes Q8-packed (0: not at all).
    pub norm_x: u64,
    pub norm_w: u64,
    pub q8: u64,
    pub q8_scales: u64,
    pub cols: u32,
    pub n_expert: u32,
    /// Tokens, at most `MATVEC_MAX_TOKENS`.
    pub n: u32,
    /// Experts per token.
    pub k: u32,
    pub normalize: u32,
    /// The norm's epsilon.
    pub eps: f32,
}
// SAFETY: repr(C), eleven u64 then six 4-byte fields: 112 bytes, no
// padding.
unsafe impl Push for MoeRouterPush {
    const FIELDS: &'static [Field] = fields!(
        MoeRouterPush: x,
        w,
        bias,
        logits,
        ids,
        weights,
        counter,
        norm_x,
        norm_w,
        q8,
        q8_scales,
        cols,
        n_expert,
        n,
        k,
        normalize,
        eps
    );
}

#[repr(C)]
pub struct MatIdPush {
    pub x: u64,
    /// The stack of experts; expert `e` starts `e * expert_bytes` in.
    pub w: u64,
    pub ids: u64,
    pub out: u64,
    pub expert_bytes: u64,
    /// Rows of one expert.
    pub rows: u32,
    pub k: u32,
    pub n_pairs: u32,
    /// Pairs per row of `x`: the experts per token when every choice of a
    /// token reads the token's row, 1 when each has its own.
    pub x_div: u32,
    /// Per-expert biases, `rows` f32 per expert, added to each output (0
    /// for none).
    pub bias: u64,
    /// The integer form (`matvec_id_int_*`): the (d, s) of each Q8-packed
    /// block of `x` (0 for the f32 mat-vec).
    pub x_scales: u64,
    /// `matvec_id_int_*`: a second stack of the same shape and type that
    /// reads the same input and ids (up, beside gate), its output and
    /// biases; 0 for none. With one, the grid doubles and its second half
    /// computes the second stack.
    pub up_w: u64,
    pub up_out: u64,
    pub up_bias: u64,
}
// SAFETY: repr(C), five u64, four u32, five u64: 96 bytes, no padding.
unsafe impl Push for MatIdPush {
    const FIELDS: &'static [Field] = fields!(
        MatIdPush: x,
        w,
        ids,
        out,
        expert_bytes,
        rows,
        k,
        n_pairs,
        x_div,
        bias,
        x_scales,
        up_w,
        up_out,
        up_bias
    );
}

#[repr(C)]
pub struct MoeSumPush {
    pub x: u64,
    pub weights: u64,
    pub out: u64,
    pub n_rows: u32,
    pub cols: u32,
    pub k: u32,
    pub pad: u32,
    /// A residual added to each sum (a fused residual add), 0 for none.
    pub residual: u64,
}
// SAFETY: repr(C), three u64, four u32, one u64: 48 bytes, no padding.
unsafe impl Push for MoeSumPush {
    const FIELDS: &'static [Field] =
        fields!(MoeSumPush: x, weights, out, n_rows, cols, k, pad, residual);
}

/// `moe_sum_rmsnorm` / `moe_sum_rmsnorm_q8`: a mixture-of-experts layer's
/// weighted sum, the residual add after it and the RMS norm of their result
/// (the next block's input norm) in one launch, one workgroup per row `t`:
/// `sum[t] = Σ_j weights[t][j] · x[t·k + j] + residual[t]` (as `moe_sum`,
/// written to `sum`), then `out[t] = rmsnorm(sum[t]) · w` (as `rmsnorm`;
/// `_q8` also writes it Q8-packed to `q8` / `q8_scales`, as `rmsnorm_q8`).
#[repr(C)]
pub struct MoeSumNormPush {
    pub x: u64,
    pub weights: u64,
    pub residual: u64,
    pub sum: u64,
    pub w: u64,
    pub out: u64,
    pub q8: u64,
    pub q8_scales: u64,
    pub cols: u32,
    pub n_rows: u32,
    pub k: u32,
    pub eps: f32,
}
// SAFETY: repr(C), eight u64 then four 4-byte fields: 80 bytes, no padding.
unsafe impl Push for MoeSumNormPush {
    const FIELDS: &'static [Field] = fields!(
        MoeSumNormPush: x,
        weights,
        residual,
        sum,
        w,
        out,
        q8,
        q8_scales,
        cols,
        n_rows,
        k,
        eps
    );
}

/// `moe_group`: the (token, choice) pairs of `ids` sorted by expert into
/// `table` for the grouped expert matmul ([`super::moe`] has the layout).
#[repr(C)]
pub struct MoeGroupPush {
    pub ids: u64,
    pub table: u64,
    pub n_pairs: u32,
    pub n_expert: u32,
    /// Most pairs per slot: the matmul's tile of tokens.
    pub tile: u32,
    pub slots: u32,
}
// SAFETY: repr(C), two u64 then four u32: 32 bytes, no padding.
unsafe impl Push for MoeGroupPush {
    const FIELDS: &'static [Field] =
        fields!(MoeGroupPush: ids, table, n_pairs, n_expert, tile, slots);
}

/// `matmul_id_*`: the grouped expert matmul. Output row `p` (of
/// `n_pairs`) is expert `ids[p]` of `w` times row `p / x_div` of `x`; a
/// workgroup takes one slot of `moe_group`'s table times a range of rows.
#[repr(C)]
pub struct MatGroupPush {
    pub x: u64,
    /// The stack of experts; expert `e` starts `e * expert_bytes` in.
    pub w: u64,
    pub table: u64,
    pub out: u64,
    pub expert_bytes: u64,
    /// Per-expert biases, `rows` f32 per expert (0 for none).
    pub bias: u64,
    /// Rows of one expert.
    pub rows: u32,
    pub k: u32,
    pub n_pairs: u32,
    pub x_div: u32,
    pub slots: u32,
    pub pad: u32,
}
// SAFETY: repr(C), six u64 then six u32: 72 bytes, no padding.
unsafe impl Push for MatGroupPush {
    const FIELDS: &'static [Field] = fields!(
        MatGroupPush: x,
        w,
        table,
        out,
        expert_bytes,
        bias,
        rows,
        k,
        n_pairs,
        x_div,
        slots,
        pad
    );
}

// Every table lists its struct's fields in order and the struct has no
// padding (what the SAFETY lines above state).
const _: () = assert!(tiles(YarnPush::FIELDS, std::mem::size_of::<YarnPush>()));
macro_rules! assert_tiles {
    ($($s:ident),*) => {$(
        const _: () = assert!(tiles($s::FIELDS, std::mem::size_of::<$s>()));
        const _: () = assert!(std::mem::size_of::<$s>() <= PUSH_BYTES);
    )*};
}
assert_tiles!(
    EmbedPush,
    MatPush,
    NormPush,
    RopePush,
    RopeKvPush,
    NormRopeKvPush,
    StoreKvPush,
    AttentionPush,
    EltwisePush,
    SpinPush,
    QuantizePush,
    AttnTempPush,
    MoeRoutePush,
    MatIdPush,
    MoeSumPush,
    MoeSumNormPush,
    MoeGroupPush,
    MatGroupPush
);
