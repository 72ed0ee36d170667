//! Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Qwen2's attention,
//! routed experts whose weights are not renormalised, plus a shared expert
//! scaled by a sigmoid gate. Those expert rules live with the other expert
//! keys in `moe.rs`; this family has no others.

use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "qwen2moe",
    requires_experts: true,
    qkv_bias: true,
    rope_neox: true,
    ..Family::BASE
};
