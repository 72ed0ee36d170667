//! Gemma 3: embeddings scaled by sqrt(n_embd), Q/K norms, norms after
//! attention and after the feed-forward block, GeGLU, and five
//! sliding-window layers per global one, whose RoPE has its own base.
//!
//! The rules are llama.cpp's `LLM_ARCH_GEMMA3` hyperparameters
//! (`src/llama-model.cpp`, `load_hparams`):
//! - the window applies only when `attention.sliding_window` is present
//!   and non-zero, in five layers of six unless
//!   `attention.sliding_window_pattern` says otherwise;
//! - the local layers' RoPE is never scaled; their base is 10000 (this
//!   loader takes `rope.freq_base_swa` when a file has one, which Gemma 3's
//!   converter does not write);
//! - the attention scale is `1/sqrt(query_pre_attn_scalar)` (below).

use super::super::super::ModelError;
use super::super::keys::Keys;
use super::super::ModelConfig;
use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "gemma3",
    qk_norm: true,
    post_norms: true,
    rope_neox: true,
    read,
    ..Family::BASE
};

/// Period of the local layers when `attention.sliding_window_pattern` is
/// absent: five local, then one global (llama.cpp's `set_swa_pattern(6)`).
const SWA_PERIOD: usize = 6;

fn read(keys: &Keys, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.sliding_window = keys
        .ranged("attention.sliding_window", 0, u32::MAX.into())?
        .filter(|&w| w > 0);
    if c.sliding_window.is_some() {
        c.local_layers = keys.local_layers(c.n_layer, SWA_PERIOD)?;
    }
    // The shared reading already gave the local layers Gemma 3's RoPE:
    // `rope.freq_base_swa` or 10000, unscaled.
    c.embed_scale = Some((c.n_embd as f32).sqrt());
    c.gelu_ffn = true;
    c.attention_scale = 1.0 / (query_pre_attn_scalar(c) as f32).sqrt();
    Ok(())
}

/// The Gemma 3 sizes llama.cpp knows, by block count (its `llm_type`
/// switch for `LLM_ARCH_GEMMA3`: 18, 26, 34, 48 and 62 blocks).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Size {
    M270,
    B1,
    B4,
    B12,
    B27,
}

impl Size {
    fn of(n_layer: usize) -> Option<Size> {
        match n_layer {
            18 => Some(Size::M270),
            26 => Some(Size::B1),
            34 => Some(Size::B4),
            48 => Some(Size::B12),
            62 => Some(Size::B27),
            _ => None,
        }
    }
}

/// The checkpoint's `query_pre_attn_scalar`, which Q is scaled by the
/// inverse square root of. It is the head size (256) in every Gemma 3 but
/// the 27B, where it is `hidden_size / num_attention_heads` (5376 / 32 =
/// 168, its head size being 128). GGUF files do not carry it, so llama.cpp
/// recognises the 27B by its size and sets `f_attention_scale` from
/// `n_embd / n_head(0)` for it, `n_embd_head_k` otherwise (citing
/// gemma_pytorch's `gemma/config.py`); this does the same, so a file
/// shaped like another size follows the other sizes' rule, as there.
fn query_pre_attn_scalar(c: &ModelConfig) -> usize {
    match Size::of(c.n_layer) {
        Some(Size::B27) => c.n_embd / c.n_head,
        _ => c.head_dim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_llama_cpp_block_counts() {
        assert_eq!(Size::of(62), Some(Size::B27));
        assert_eq!(Size::of(26), Some(Size::B1));
        assert_eq!(Size::of(27), None);
    }
}
