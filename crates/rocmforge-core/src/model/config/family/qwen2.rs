//! Qwen2 / Qwen2.5: llama's graph with biases on Q, K and V, and NeoX RoPE.
//! No keys of its own (llama.cpp's `LLM_ARCH_QWEN2` reads only the shared
//! ones).

use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "qwen2",
    qkv_bias: true,
    rope_neox: true,
    ..Family::BASE
};
