//! Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder): Qwen3's attention, and a routed
//! mixture of experts in place of every feed-forward block. The experts'
//! keys are read by `moe.rs`; `feed_forward_length`, which its converters
//! fill with the checkpoint's dense width (6144 for Qwen3-30B-A3B) that no
//! tensor has, is not checked against them.

use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "qwen3moe",
    qk_norm: true,
    requires_experts: true,
    rope_neox: true,
    ..Family::BASE
};
