//! The GPU lowering every GPU backend shares: which kernels compute a
//! planned graph, with which argument blocks and how many workgroups.
//!
//! The Vulkan and HIP backends run the same kernel families (written once
//! in GLSL under `shaders/`, once in HIP under `kernels/`), address memory
//! the same way (64-bit device addresses: Vulkan buffer device addresses,
//! HIP device pointers) and read per-step values from the same step-input
//! region. So the decisions between a graph and its launches — fusion,
//! kernel choice per weight type and token count, argument layouts, grid
//! sizes, the scratch layout of rounded activations — are made here, once:
//! both backends fuse, round and tile identically by construction, and a
//! backend is its device code plus a [`KernelSink`] that records launches
//! (a command buffer, a captured hipGraph).
//!
//! The contract a backend's kernels keep: a kernel named `name` takes the
//! block passed to [`KernelSink::dispatch`] as its only argument (a push
//! constant block, a by-value struct; layouts in [`push`]), runs with
//! [`workgroup_size`]`(name)` invocations per workgroup over `groups`
//! workgroups laid out by [`grid`], and computes what the GLSL kernel of
//! the same name computes.

mod backend;
#[cfg(test)]
mod backend_tests;
pub mod cost;
pub mod device;
pub mod iq_tables;
mod lower;
#[cfg(test)]
mod lowering_tests;
mod matmul;
#[cfg(test)]
mod mock;
#[cfg(test)]
mod mock_device;
mod moe;
mod options;
pub mod push;
pub mod split;
pub mod staging;

use crate::backend::BackendError;
use crate::quant::QuantType;

pub use backend::GpuBackend;
pub use device::GpuDevice;
pub use lower::{
    check_graph, check_part, q8_packed_layout, record_graph, scratch_bytes, weight_kernel,
    DeviceWeight, GraphAddresses, Reserved, MAX_HEAD_DIM,
};
pub use options::{GpuOptions, LogLaunches, DEFAULT_TIMEOUT};

/// Which matrix-core (cooperative matrix / WMMA) matmul variants lowering
/// may name for prefill graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixTiles {
    /// None: the portable tiled matmul.
    Off,
    /// 128×128 tiles where a matmul has enough of them to fill a large GPU
    /// and a long inner size (measured on the H100, docs/vulkan.md), else
    /// 64×64.
    Auto,
    /// 128×128 tiles when a matmul has at least this many (measurement).
    BigFrom(usize),
    /// 64×64 tiles always.
    Small,
}

/// What a backend's kernels offer, and measurement switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lowering {
    /// Fuse where core's fusion rules allow (off, for measurement: no op
    /// folds into the one before it; matmuls that read one input, such as
    /// Q/K/V or gate/up, still share a launch).
    pub fuse: bool,
    /// Decode mat-vecs of the 32-element types in integers over Q8-packed
    /// activations (off: the f32 mat-vec, for measurement).
    pub int_matvec: bool,
    /// With `int_matvec`: the expert mat-vecs of those types in integers
    /// too (`matvec_id_int_*`); off, the f32 `matvec_id_*`.
    pub int_expert_matvec: bool,
    /// Prefill expert matmuls grouped by expert (`moe_group`, then
    /// `matmul_id_*`), so an expert's rows are read once per tile of the
    /// pairs that chose it rather than once per pair; off, the expert
    /// mat-vec for every batch.
    pub grouped_experts: bool,
    /// Name the integer mat-vecs `matvec_int_dot_*` (Vulkan's variants
    /// built with `dotPacked4x8EXT`) rather than `matvec_int_*`.
    pub int_dot_names: bool,
    pub matrix: MatrixTiles,
    /// Name the register-prefetching matrix-core variants (`matmul_cmp*`).
    pub matrix_prefetch: bool,
    /// Blocks of 32 values per workgroup of the Q8-packed roundings
    /// (`quantize_q8_packed`, `swiglu_q8`): 64 for the GLSL kernels (one
    /// per invocation), 2 for the HIP ones (one per wave).
    pub q8_packed_blocks_per_group: u32,
    /// Rows per workgroup of the dense integer mat-vec (`matvec_int_*`):
    /// 2 for the GLSL kernel (64 invocations walking the blocks of 2
    /// rows), 8 for the HIP one (a wave per 4 rows).
    pub int_rows: u32,
    /// The same for the integer expert mat-vec (`matvec_id_int_*`): 8 for
    /// the GLSL kernel (two teams of 32 invocations x 4 rows) and for the
    /// HIP one.
    pub expert_int_rows: u32,
    /// Rows of fewer units than a dense mat-vec workgroup has invocations
    /// split its workgroups into teams, each on rows of its own
    /// ([`matmul::row_teams`]; the GLSL kernels). Off, a workgroup takes
    /// one row (`matvec_*`) or `int_rows` (`matvec_int_*`) whatever the
    /// row's length (the HIP kernels).
    pub row_teams: bool,
    /// The device's compute units (CUs, SMs): decode attention is split
    /// over positions until the workgroups fill them ([`split`]).
    pub compute_units: u32,
    /// Fewest positions a run of a split decode attention takes
    /// ([`split::SPLIT_MIN_POSITIONS`]; `ROCMFORGE_GPU_SPLIT_MIN`, for
    /// measurement).
    pub split_min: u32,
    /// Teams a dense integer mat-vec workgroup splits into at least, long
    /// rows too (only where [`Lowering::row_teams`]): 2 on Vulkan (4 rows a
    /// workgroup), 1 elsewhere; `ROCMFORGE_GPU_INT_TEAMS` for measurement.
    pub int_teams: u32,
    /// Subgroups of at least 32 invocations: decode attention runs
    /// `attention_decode`, whose subgroups read cache rows side by side
    /// (else `attention_split`, which stages rows in shared memory).
    pub subgroup_decode: bool,
    /// Prefill attention on matrix cores (`attention_cm`, `attention_cm64`:
    /// 32 tokens of a head per workgroup, FlashAttention-2 tiles) for head
    /// sizes of 128 and 64, where the cache rows allow it.
    pub matrix_attention: bool,
}

/// One launch as the lowering names it: `kernel` over `groups`
/// workgroups with `push` as its argument block; `label` names it in
/// timeout messages.
#[derive(Clone, Copy, Debug)]
pub struct Dispatch<'a> {
    pub kernel: &'a str,
    pub push: &'a [u8],
    pub groups: u32,
    pub label: &'a str,
}

/// Records kernel launches in order; a launch sees every earlier launch's
/// writes.
pub trait KernelSink {
    /// Records one launch.
    fn launch(&mut self, d: Dispatch) -> Result<(), BackendError>;

    /// [`KernelSink::launch`] from its parts, as the lowering calls it.
    fn dispatch(
        &mut self,
        kernel: &str,
        push: &[u8],
        groups: u32,
        label: String,
    ) -> Result<(), BackendError> {
        self.launch(Dispatch {
            kernel,
            push,
            groups,
            label: &label,
        })
    }
}

/// Splits `groups` workgroups into an (x, y) grid with x ≤ `max_x` (and ≤
/// 65535, every API's minimum); kernels flatten it back
/// (`wg_linear`: x + y · width).
pub fn grid(groups: u32, max_x: u32) -> (u32, u32) {
    let x = groups.min(max_x.min(65535));
    (x, groups.div_ceil(x.max(1)))
}

/// Invocations of a workgroup of the integer expert mat-vec
/// (`matvec_id_int_*`) that computes `rows` rows (`Lowering::expert_int_rows`):
/// 32 per 4 rows. HIP's 8 rows take 64 ([`workgroup_size`]'s entry, which
/// HIP launches with); the GLSL variant's 4 rows take 32.
pub fn expert_int_workgroup(rows: u32) -> u32 {
    rows.div_ceil(4) * 32
}

/// Invocations per workgroup of each kernel family (the GLSL
/// `local_size_x` of the variant; HIP kernels launch with the same). The
/// one exception is the GLSL integer expert mat-vec: see
/// [`expert_int_workgroup`].
pub fn workgroup_size(kernel: &str) -> Option<u32> {
    let family = |prefix: &str| kernel.starts_with(prefix);
    Some(match kernel {
        _ if family("matvec_int_") || family("matvec_id_") => 64,
        _ if family("matmul_cmps_") || family("matmul_cms_") || family("matmul_id_cms_") => 128,
        _ if family("matmul_cmp_") || family("matmul_cm_") => 256,
        _ if family("matmul_") => 128,
        _ if family("matvec_") || family("embed_") => 64,
        // A decode step's norm is one workgroup per row: 512 invocations
        // cut its serial chain of loads (docs/vulkan.md, 7B tg128 246 → 269).
        "rmsnorm" | "rmsnorm_q8" | "moe_sum_rmsnorm" | "moe_sum_rmsnorm_q8" => 512,
        "rope" | "rope_kv" | "store_kv" | "attention" | "attention_f32" => 64,
        // A workgroup per head (its norm is a workgroup sum), then V's
        // values 64 a workgroup.
        "norm_rope_kv" => 64,
        // A quantized cache's: an invocation per block; the plain
        // attention's size; the decode and rows kernels' size.
        "store_kv_q8_0" | "store_kv_q4_0" | "attention_q8_0" | "attention_q4_0" => 64,
        _ if family("attention_decode_") || family("attention_rows_") => 128,
        // Two subgroups of 32 on the matrix cores.
        "attention_cm" | "attention_cm64" => 64,
        _ if family("attention_cm_") || family("attention_cm64_") => 64,
        "attention_staged" | "attention_staged_q8" | "attention_split" | "attention_decode" => 128,
        "attention_decode_wide" | "attention_rows" | "attention_rows_wide" => 128,
        "attention_combine" | "attention_combine_q8" => 128,
        "add" | "swiglu" | "swiglu_oai" | "sigmoid_gate" | "geglu" | "scale" | "copy"
        | "attn_temp" => 256,
        "quantize_q8_0" | "quantize_q8_k" | "quantize_q8_packed" | "swiglu_q8"
        | "swiglu_oai_q8" | "quantize_f16" | "quantize_bf16" => 64,
        // One wave (RDNA wave32, an NVIDIA warp) per token.
        "moe_route" => 32,
        // The router's rows, then the routing by moe_route's one wave.
        "moe_router_f32" | "moe_norm_router_f32" => 32,
        "moe_sum" | "moe_group" => 256,
        "spin" => 1,
        _ => return None,
    })
}

/// Workgroups of `kernel` for `items` invocations, one item each: the grid
/// of every kernel that takes one value, pair or block per invocation,
/// sized by [`workgroup_size`] so the lowering repeats no workgroup size.
pub fn groups_for(kernel: &str, items: usize) -> Result<u32, BackendError> {
    let wg = workgroup_size(kernel).ok_or_else(|| {
        BackendError::missing_kernel(kernel, "rocmforge_core::gpu has no workgroup size for it")
    })?;
    lower::u32_of(items.div_ceil(wg as usize), "workgroups")
}

/// The kernel-name suffix of a weight type (`matvec_q4_k`), if GPU kernels
/// take it.
pub fn weight_suffix(ty: QuantType) -> Option<&'static str> {
    Some(match ty {
        QuantType::F32 => "f32",
        QuantType::F16 => "f16",
        QuantType::BF16 => "bf16",
        QuantType::Q4_0 => "q4_0",
        QuantType::Q4_1 => "q4_1",
        QuantType::Q5_0 => "q5_0",
        QuantType::Q5_1 => "q5_1",
        QuantType::Q8_0 => "q8_0",
        QuantType::Q2K => "q2_k",
        QuantType::Q3K => "q3_k",
        QuantType::Q4K => "q4_k",
        QuantType::Q5K => "q5_k",
        QuantType::Q6K => "q6_k",
        QuantType::IQ4NL => "iq4_nl",
        QuantType::IQ4XS => "iq4_xs",
        QuantType::MXFP4 => "mxfp4",
        QuantType::IQ2XXS => "iq2_xxs",
        QuantType::IQ2XS => "iq2_xs",
        QuantType::IQ2S => "iq2_s",
        QuantType::IQ3XXS => "iq3_xxs",
        QuantType::IQ3S => "iq3_s",
        QuantType::IQ1S => "iq1_s",
        QuantType::IQ1M => "iq1_m",
        QuantType::TQ1_0 => "tq1_0",
        QuantType::TQ2_0 => "tq2_0",
        _ => return None,
    })
}

/// Whether weights of this type have the integer decode mat-vec
/// (`matvec_int_*`): the 32-element types whose blocks are int8-friendly.
pub fn has_int_form(ty: QuantType) -> bool {
    matches!(
        ty,
        QuantType::Q4_0
            | QuantType::Q4_1
            | QuantType::Q5_0
            | QuantType::Q5_1
            | QuantType::Q8_0
            | QuantType::IQ4NL
            | QuantType::MXFP4
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_a_workgroup_size() {
        for k in [
            "matvec_int_q4_0",
            "matvec_int_dot_iq4_nl",
            "matmul_cmps_q4_k",
            "matmul_cmp_q8_0",
            "matmul_q6_k",
            "matvec_bf16",
            "embed_iq4_xs",
            "attention_staged_q8",
            "swiglu_q8",
        ] {
            assert!(workgroup_size(k).is_some(), "{k}");
        }
        assert_eq!(workgroup_size("matmul_cmps_q4_0"), Some(128));
        assert_eq!(workgroup_size("matmul_cm_q4_0"), Some(256));
        assert_eq!(workgroup_size("no_such_kernel"), None);
    }

    #[test]
    fn grids_cover_every_group_within_the_limit() {
        for groups in [1u32, 7, 65535, 65536, 1 << 20] {
            let (x, y) = grid(groups, u32::MAX);
            assert!(
                x <= 65535 && x * y >= groups && x * (y - 1) < groups,
                "{groups}"
            );
        }
    }
}
