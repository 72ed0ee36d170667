//! Qwen3: per-head RMSNorm on Q and K, NeoX RoPE, and a head size set apart
//! from `n_embd / n_head` by `attention.key_length` (read by `dims`, as for
//! every family). No keys of its own.

use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "qwen3",
    qk_norm: true,
    rope_neox: true,
    ..Family::BASE
};
