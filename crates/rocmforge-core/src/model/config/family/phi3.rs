//! Phi-3 / Phi-3.5 / Phi-4-mini: Q, K and V in one fused matrix, gate and
//! up in another, gate first (split at load); the graph is llama's with
//! NeoX RoPE.
//!
//! Its converters write an `attention.sliding_window` that llama.cpp says
//! is wrong and does not apply, so, as for every family without local
//! layers, the key is not read.

use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "phi3",
    rope_neox: true,
    ffn_up_parts: 2,
    ..Family::BASE
};
