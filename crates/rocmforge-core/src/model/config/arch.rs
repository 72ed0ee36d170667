//! The architectures this project builds, named as `general.architecture`
//! names them. What each one is lives in its module under `family/`; the
//! questions the graph and the weights loader ask of an [`Arch`] are
//! answered from there.

use super::family::{self, Family};

/// Architectures whose forward pass this project builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2, Llama 3 (with `rope_freqs` scaling) and Mistral share this graph.
    Llama,
    /// Qwen2 / Qwen2.5: biases on Q, K and V.
    Qwen2,
    /// Qwen3: per-head RMSNorm on Q and K, head size set explicitly.
    Qwen3,
    /// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder): Qwen3's attention, a routed
    /// mixture of experts in place of every feed-forward block.
    Qwen3Moe,
    /// Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Qwen2's attention,
    /// routed experts whose weights are not renormalised, plus a shared
    /// expert scaled by a sigmoid gate.
    Qwen2Moe,
    /// Phi-3 / Phi-3.5 / Phi-4-mini: Q, K and V in one fused matrix, gate
    /// and up in another (split at load; the graph is llama's with NeoX
    /// RoPE).
    Phi3,
    /// Gemma 3: embeddings scaled by sqrt(n_embd), Q/K norms, norms after
    /// attention and after the feed-forward block, GeGLU, and five
    /// sliding-window layers (with their own RoPE base) per global one.
    Gemma3,
    /// Mistral 3 (Mistral Small 3.x, Ministral 3, Magistral as converted
    /// from their multimodal checkpoints): llama's graph with YaRN's
    /// parameters from the file and, for Ministral 3, Llama 4's attention
    /// temperature (Q scaled by position beyond the original context).
    Mistral3,
    /// gpt-oss (OpenAI's open-weight MoE): biases on Q, K, V and the
    /// attention output, attention sinks, sliding-window layers alternating
    /// with full ones, YaRN RoPE, and experts with biases and a clamped
    /// SwiGLU, routed by a softmax over the chosen experts' logits.
    GptOss,
}

impl Arch {
    /// Every architecture this project builds.
    pub const ALL: &'static [Arch] = &[
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Qwen3Moe,
        Arch::Qwen2Moe,
        Arch::Phi3,
        Arch::Gemma3,
        Arch::GptOss,
        Arch::Mistral3,
    ];

    pub(super) fn family(self) -> &'static Family {
        family::of(self)
    }

    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.iter().copied().find(|a| a.name() == name)
    }

    pub fn name(self) -> &'static str {
        self.family().name
    }

    /// The names of [`Arch::ALL`], comma-separated, for error messages.
    pub fn supported_names() -> String {
        Arch::ALL
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Per-head RMSNorm on Q and K before RoPE.
    pub fn has_qk_norm(self) -> bool {
        self.family().qk_norm
    }

    /// RMSNorms after attention and after the feed-forward block, before
    /// each residual add.
    pub fn has_post_norms(self) -> bool {
        self.family().post_norms
    }

    /// Every feed-forward block is a mixture of experts. Llama files may
    /// have experts too (Mixtral), told by `expert_count`.
    pub fn requires_experts(self) -> bool {
        self.family().requires_experts
    }

    /// Biases on the Q, K and V projections (gpt-oss also on the output).
    pub fn has_qkv_bias(self) -> bool {
        self.family().qkv_bias
    }

    /// How RoPE pairs dimensions: llama rotates adjacent pairs, the Qwen
    /// families rotate the two halves of each head against each other (NeoX).
    pub fn rope_neox(self) -> bool {
        self.family().rope_neox
    }

    /// Rows of `ffn_up` per feed-forward row: Phi-3 stores gate and up in
    /// it, gate first.
    pub fn ffn_up_parts(self) -> usize {
        self.family().ffn_up_parts
    }
}

#[cfg(test)]
mod tests {
    use super::Arch;

    #[test]
    fn names_round_trip() {
        for &arch in Arch::ALL {
            assert_eq!(Arch::from_name(arch.name()), Some(arch));
        }
        assert_eq!(Arch::from_name(""), None);
        assert_eq!(Arch::from_name("gemma2"), None);
    }
}
