//! gpt-oss (OpenAI's open-weight MoE): biases on Q, K, V and the attention
//! output, attention sinks, sliding-window layers alternating with full
//! ones, YaRN RoPE, and experts with biases and a clamped SwiGLU, routed by
//! a softmax over the chosen experts' logits (the expert rules are in
//! `moe.rs`).
//!
//! The rules are llama.cpp's `LLM_ARCH_OPENAI_MOE` hyperparameters
//! (`src/llama-model.cpp`, `load_hparams`): `attention.sliding_window` is
//! required, every other layer is local (`set_swa_pattern(2)`) unless
//! `attention.sliding_window_pattern` says otherwise, and the local layers
//! share the global RoPE base and scale, the base replaced by
//! `rope.freq_base_swa` where the file has one.

use super::super::super::ModelError;
use super::super::keys::{Keys, POSITIVE};
use super::super::ModelConfig;
use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "gpt-oss",
    requires_experts: true,
    qkv_bias: true,
    rope_neox: true,
    read,
    ..Family::BASE
};

/// Period of the local layers when `attention.sliding_window_pattern` is
/// absent: one local, one global.
const SWA_PERIOD: usize = 2;

fn read(keys: &Keys, c: &mut ModelConfig) -> Result<(), ModelError> {
    let window = keys
        .ranged("attention.sliding_window", 1, u32::MAX.into())?
        .ok_or_else(|| keys.missing("attention.sliding_window"))?;
    c.sliding_window = Some(window);
    c.local_layers = keys.local_layers(c.n_layer, SWA_PERIOD)?;
    c.rope_freq_base_local = keys
        .float("rope.freq_base_swa", POSITIVE, |v| v > 0.0)?
        .unwrap_or(c.rope_freq_base);
    c.rope_freq_scale_local = c.rope_freq_scale;
    Ok(())
}
