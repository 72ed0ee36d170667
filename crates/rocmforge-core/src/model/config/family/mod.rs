//! One module per architecture family: what sets it apart from the reading
//! every family shares (`dims.rs`, `rope.rs`).
//!
//! A family is a [`Family`] value: the graph traits [`Arch`] answers from
//! (Q/K norms, biases, RoPE pairing, ...), and a `read` step for its own
//! keys and rules, which runs last on a config the shared reading has
//! completed with defaults (no window, no embedding scale, SiLU, 1/sqrt of
//! the head size) and replaces those that do not hold for it. A family
//! without rules of its own (Qwen2, Qwen3, ...) is only its traits. The
//! rules say where in llama.cpp they come from, so a difference from it is
//! a bug here, not a choice.

use super::super::ModelError;
use super::keys::Keys;
use super::{Arch, ModelConfig};

mod gemma3;
mod gpt_oss;
mod llama;
mod mistral3;
mod phi3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;

/// What sets one family apart. Its modules fill in the fields that differ
/// from [`Family::BASE`] (llama's traits, no rules of its own).
pub(super) struct Family {
    /// `general.architecture` of its files.
    pub name: &'static str,
    /// Per-head RMSNorm on Q and K before RoPE.
    pub qk_norm: bool,
    /// RMSNorms after attention and after the feed-forward block.
    pub post_norms: bool,
    /// Every feed-forward block is a mixture of experts.
    pub requires_experts: bool,
    /// Biases on the Q, K and V projections.
    pub qkv_bias: bool,
    /// RoPE rotates the two halves of each head against each other (NeoX)
    /// rather than adjacent pairs.
    pub rope_neox: bool,
    /// Rows of `ffn_up` per feed-forward row (2 where gate and up are fused).
    pub ffn_up_parts: usize,
    /// Reads the family's own keys into a config the shared reading has
    /// completed, replacing the defaults that do not hold for it.
    pub read: fn(&Keys, &mut ModelConfig) -> Result<(), ModelError>,
}

impl Family {
    /// Llama's traits and no rules: what a family differs from.
    pub const BASE: Family = Family {
        name: "",
        qk_norm: false,
        post_norms: false,
        requires_experts: false,
        qkv_bias: false,
        rope_neox: false,
        ffn_up_parts: 1,
        read: |_, _| Ok(()),
    };
}

/// The family of `arch`.
pub(super) fn of(arch: Arch) -> &'static Family {
    match arch {
        Arch::Llama => &llama::FAMILY,
        Arch::Qwen2 => &qwen2::FAMILY,
        Arch::Qwen3 => &qwen3::FAMILY,
        Arch::Qwen3Moe => &qwen3moe::FAMILY,
        Arch::Qwen2Moe => &qwen2moe::FAMILY,
        Arch::Phi3 => &phi3::FAMILY,
        Arch::Gemma3 => &gemma3::FAMILY,
        Arch::GptOss => &gpt_oss::FAMILY,
        Arch::Mistral3 => &mistral3::FAMILY,
    }
}
