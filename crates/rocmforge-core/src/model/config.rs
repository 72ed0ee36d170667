//! Model hyperparameters read from GGUF metadata, with llama.cpp's defaults and
//! inference rules where a key is optional.
//!
//! Every value is checked as it is read, and then against the tensor shapes,
//! which are the ground truth: a file's header can claim anything, but its
//! tensors had to fit in the file. So a bad value is an error naming the key
//! before any size derived from it reaches an allocation.

use crate::gguf::{GgufFile, GgufValue, TensorInfo};

use super::moe::MoeConfig;
use super::ModelError;

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
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            "qwen3moe" => Some(Arch::Qwen3Moe),
            "qwen2moe" => Some(Arch::Qwen2Moe),
            "phi3" => Some(Arch::Phi3),
            "gemma3" => Some(Arch::Gemma3),
            "gpt-oss" => Some(Arch::GptOss),
            "mistral3" => Some(Arch::Mistral3),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Phi3 => "phi3",
            Arch::Gemma3 => "gemma3",
            Arch::GptOss => "gpt-oss",
            Arch::Mistral3 => "mistral3",
        }
    }

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
        matches!(self, Arch::Qwen3 | Arch::Qwen3Moe | Arch::Gemma3)
    }

    /// RMSNorms after attention and after the feed-forward block, before
    /// each residual add.
    pub fn has_post_norms(self) -> bool {
        self == Arch::Gemma3
    }

    /// Every feed-forward block is a mixture of experts. Llama files may
    /// have experts too (Mixtral), told by `expert_count`.
    pub fn requires_experts(self) -> bool {
        matches!(self, Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::GptOss)
    }

    /// Biases on the Q, K and V projections (gpt-oss also on the output).
    pub fn has_qkv_bias(self) -> bool {
        matches!(self, Arch::Qwen2 | Arch::Qwen2Moe | Arch::GptOss)
    }

    /// How RoPE pairs dimensions: llama rotates adjacent pairs, the Qwen
    /// families rotate the two halves of each head against each other (NeoX).
    pub fn rope_neox(self) -> bool {
        matches!(
            self,
            Arch::Qwen2
                | Arch::Qwen3
                | Arch::Qwen3Moe
                | Arch::Qwen2Moe
                | Arch::Phi3
                | Arch::Gemma3
                | Arch::GptOss
        )
    }

    /// Rows of `ffn_up` per feed-forward row: Phi-3 stores gate and up in
    /// it, gate first.
    pub fn ffn_up_parts(self) -> usize {
        if self == Arch::Phi3 {
            2
        } else {
            1
        }
    }
}

/// The `{arch}.*` keys the loader reads, without the `{arch}.` prefix. Kept
/// in one list so that the metadata sweep test (`crates/rocmforge/tests/
/// metadata_sweep.rs`) can try bad values for each; reading a key missing
/// from it trips a debug assertion.
pub const ARCH_KEYS: &[&str] = &[
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.attn_factor",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "rope.scaling.yarn_log_multiplier",
    "attention.temperature_scale",
    "rope.scale_linear",
    "vocab_size",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_feed_forward_length",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "rope.freq_base_swa",
    "final_logit_softcapping",
];

/// Keys outside `{arch}.*` that loading a model reads: the architecture, and
/// the token list, whose length must match the embedding table.
pub const GENERAL_KEYS: &[&str] = &[ARCH_KEY, TOKENS_KEY];

const ARCH_KEY: &str = "general.architecture";
const TOKENS_KEY: &str = "tokenizer.ggml.tokens";

/// Largest size (embedding width, vocabulary, heads, ...) accepted. Far above
/// any real model, and low enough that products of two sizes cannot overflow.
const MAX_SIZE: u64 = 1 << 24;

/// Llama 4-style attention temperature tuning (Ministral 3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnTemperature {
    pub scale: f32,
    /// Positions per step of the logarithm (the original context).
    pub floor: usize,
}

/// Everything the graph builder needs to know about a model's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Size of one attention head (Q and K); Qwen3 sets it apart from n_embd/n_head.
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    pub rope_neox: bool,
    /// Dimensions of each head that RoPE rotates.
    pub n_rot: usize,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    /// YaRN RoPE scaling (`rope.scaling.type = yarn` with a factor other
    /// than 1): the original context it extends.
    pub rope_yarn_orig_ctx: Option<usize>,
    /// `rope.scaling.attn_factor`: a multiplier of RoPE's cos and sin.
    pub rope_attn_factor: f32,
    /// YaRN's ramp bounds and magnitude divisor from the file (Mistral 3
    /// only, as llama.cpp reads them; its defaults 32 / 1 / none
    /// elsewhere).
    pub rope_yarn_beta: (f32, f32),
    pub rope_yarn_log_mul: Option<f32>,
    /// Llama 4's attention temperature (Ministral 3): Q of the token at
    /// `pos` is multiplied by `ln(floor(pos / original context) + 1) *
    /// scale + 1`.
    pub attn_temperature: Option<AttnTemperature>,
    /// The experts of every feed-forward block, for mixture-of-experts
    /// models; `n_ff` is then one expert's width.
    pub moe: Option<MoeConfig>,
    /// Sliding-window attention over this many positions (Gemma 3's 1024)
    /// in the local layers: a token attends to itself and the `window - 1`
    /// positions before it.
    pub sliding_window: Option<usize>,
    /// Layers that use the sliding window and the local RoPE base (Gemma 3:
    /// five of every six); empty when none do.
    pub local_layers: Vec<bool>,
    /// RoPE base and position scale of the local layers: Gemma 3's
    /// `rope.freq_base_swa` (default 10000) never scaled; gpt-oss's the
    /// global ones unless `rope.freq_base_swa` says otherwise.
    pub rope_freq_base_local: f32,
    pub rope_freq_scale_local: f32,
    /// Multiplier of the token embeddings (Gemma: sqrt(n_embd)).
    pub embed_scale: Option<f32>,
    /// The feed-forward gate's activation: SiLU, or GELU for Gemma.
    pub gelu_ffn: bool,
    /// Softmax scale of attention: 1/sqrt(head size), except where a
    /// family says otherwise.
    pub attention_scale: f32,
}

impl ModelConfig {
    /// Width of the K and V rows of one position (all KV heads).
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Width of the Q row (all query heads).
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Every metadata key loading a model of architecture `arch` reads.
    pub fn metadata_keys(arch: &str) -> Vec<String> {
        let arch_keys = ARCH_KEYS.iter().map(|k| format!("{arch}.{k}"));
        GENERAL_KEYS
            .iter()
            .map(|k| k.to_string())
            .chain(arch_keys)
            .collect()
    }

    /// Reads the config; `n_vocab` and `n_ff` fall back to tensor shapes, as
    /// llama.cpp infers them when converters leave the keys out.
    pub fn from_gguf(file: &GgufFile) -> Result<ModelConfig, ModelError> {
        let arch_value = file
            .get(ARCH_KEY)
            .ok_or(ModelError::MissingKey(ARCH_KEY.into()))?;
        let arch_name = arch_value.as_str().ok_or_else(|| ModelError::BadKey {
            key: ARCH_KEY.into(),
            reason: format!("should be a string, found {}", arch_value.brief()),
        })?;
        let arch = Arch::from_name(arch_name)
            .ok_or_else(|| ModelError::UnsupportedArch(arch_name.to_string()))?;
        let keys = Keys {
            file,
            arch: arch_name,
        };
        let shapes = Shapes::of(file);

        let n_layer = keys
            .size("block_count", 1)?
            .ok_or(keys.missing("block_count"))?;
        if n_layer != shapes.n_blocks {
            return Err(ModelError::Contradiction(format!(
                "{} is {n_layer} but the file has tensors for {} blocks",
                keys.name("block_count"),
                shapes.n_blocks
            )));
        }
        let n_embd = keys
            .size("embedding_length", 1)?
            .ok_or(keys.missing("embedding_length"))?;
        let n_head = keys
            .per_layer_size("attention.head_count", 1, n_layer)?
            .ok_or(keys.missing("attention.head_count"))?;
        let n_head_kv = keys
            .per_layer_size("attention.head_count_kv", 1, n_layer)?
            .unwrap_or(n_head);
        if n_head % n_head_kv != 0 {
            return Err(ModelError::Contradiction(format!(
                "{} ({n_head}) is not a multiple of {} ({n_head_kv})",
                keys.name("attention.head_count"),
                keys.name("attention.head_count_kv")
            )));
        }
        let head_dim = match keys.size("attention.key_length", 1)? {
            Some(d) => d,
            None if n_embd % n_head == 0 => n_embd / n_head,
            None => {
                return Err(ModelError::Contradiction(format!(
                    "{} ({n_embd}) is not divisible by {} ({n_head}) and {} is missing",
                    keys.name("embedding_length"),
                    keys.name("attention.head_count"),
                    keys.name("attention.key_length")
                )))
            }
        };
        if let Some(v) = keys.size("attention.value_length", 1)? {
            if v != head_dim {
                return Err(ModelError::Unsupported {
                    key: keys.name("attention.value_length"),
                    value: v.to_string(),
                    feature: format!("a V head size other than the K head size {head_dim}"),
                });
            }
        }
        let rope_dims = keys.size("rope.dimension_count", 2)?;
        let n_rot = rope_dims.unwrap_or(head_dim);
        if n_rot % 2 != 0 || n_rot > head_dim {
            let value = match rope_dims {
                Some(_) => n_rot.to_string(),
                None => format!("absent, so the head size {n_rot}"),
            };
            return Err(ModelError::BadValue {
                key: keys.name("rope.dimension_count"),
                value,
                expected: format!("even, at least 2 and at most the head size {head_dim}"),
            });
        }

        let embd = shapes.matrix("token_embd.weight")?;
        shapes.expect(embd, 0, n_embd, || keys.name("embedding_length"))?;
        let n_vocab = match keys.size("vocab_size", 1)? {
            Some(v) => shapes.expect(embd, 1, v, || keys.name("vocab_size"))?,
            None => shapes.dim(embd, 1, "n_vocab")?,
        };
        if let Some(tokens) = file.get(TOKENS_KEY).and_then(GgufValue::as_array) {
            if tokens.len() != n_vocab {
                return Err(ModelError::Contradiction(format!(
                    "{TOKENS_KEY} has {} entries but token_embd.weight has {n_vocab} rows",
                    tokens.len()
                )));
            }
        }
        let q_what = || {
            format!(
                "{} × head size ({n_head} × {head_dim})",
                keys.name("attention.head_count")
            )
        };
        shapes.expect_rows("blk.0.attn_q.weight", n_embd, n_head * head_dim, q_what)?;
        let kv_what = || {
            format!(
                "{} × head size ({n_head_kv} × {head_dim})",
                keys.name("attention.head_count_kv")
            )
        };
        shapes.expect_rows("blk.0.attn_k.weight", n_embd, n_head_kv * head_dim, kv_what)?;
        let qkv_what = || {
            format!(
                "({} + 2 × {}) × head size ({n_head} + 2 × {n_head_kv}) × {head_dim}",
                keys.name("attention.head_count"),
                keys.name("attention.head_count_kv")
            )
        };
        let qkv_rows = (n_head + 2 * n_head_kv) * head_dim;
        shapes.expect_rows("blk.0.attn_qkv.weight", n_embd, qkv_rows, qkv_what)?;
        let ffn_up = "blk.0.ffn_up.weight";
        let moe = MoeConfig::from_keys(&keys, &shapes, arch, n_embd)?;
        let dense_ff = keys.per_layer_size("feed_forward_length", 1, n_layer)?;
        let n_ff = match (&moe, dense_ff) {
            // Llama files with experts (Mixtral) give the expert width
            // here, and llama.cpp checks the expert tensors against it.
            (Some(moe), Some(v)) if arch == Arch::Llama && v != moe.n_ff_exp => {
                return Err(ModelError::Contradiction(format!(
                    "{} is {v} but the experts are {} wide",
                    keys.name("feed_forward_length"),
                    moe.n_ff_exp
                )))
            }
            // Other converters still write the dense width of the
            // checkpoint's config (6144 for Qwen3-30B-A3B), which no tensor
            // has.
            (Some(moe), _) => moe.n_ff_exp,
            (None, Some(v)) => {
                let parts = arch.ffn_up_parts();
                let what = || match parts {
                    1 => keys.name("feed_forward_length"),
                    _ => format!("{parts} × {}", keys.name("feed_forward_length")),
                };
                shapes.expect_rows(ffn_up, n_embd, v * parts, what)? / parts
            }
            (None, None) => shapes.dim(shapes.matrix(ffn_up)?, 1, "n_ff")? / arch.ffn_up_parts(),
        };

        // Gemma 3 attends over a window in five layers of six. Other
        // families' files may name one that llama.cpp does not apply
        // (Phi-3's, which its converters write wrongly, llama.cpp says;
        // Mistral 7B v0.1's), so it is not read for them.
        let sliding_window = match arch {
            Arch::Gemma3 => keys
                .ranged("attention.sliding_window", 0, u32::MAX.into())?
                .filter(|&w| w > 0),
            // Every other gpt-oss layer is local; llama.cpp requires the key.
            Arch::GptOss => Some(
                keys.ranged("attention.sliding_window", 1, u32::MAX.into())?
                    .ok_or_else(|| keys.missing("attention.sliding_window"))?,
            ),
            _ => None,
        };
        let local_layers = match (arch, sliding_window) {
            (Arch::Gemma3, Some(_)) => keys.local_layers(n_layer, 6)?,
            (Arch::GptOss, Some(_)) => keys.local_layers(n_layer, 2)?,
            _ => Vec::new(),
        };
        if let Some(cap) = keys.float("final_logit_softcapping", "a finite number", |_| true)? {
            if cap != 0.0 {
                return Err(ModelError::Unsupported {
                    key: keys.name("final_logit_softcapping"),
                    value: cap.to_string(),
                    feature: "logit soft-capping (Gemma 2)".into(),
                });
            }
        }
        // llama.cpp's rule: Gemma 3 27B (62 layers) scales by the model
        // width per head, the others by the head size.
        let attention_scale = if arch == Arch::Gemma3 && n_layer == 62 {
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };
        // Positions are 32-bit; no tensor bounds the context.
        let n_ctx_train = keys
            .ranged("context_length", 1, u32::MAX.into())?
            .unwrap_or(4096);
        let positive = "a positive finite number";
        let rms_eps = keys
            .float("attention.layer_norm_rms_epsilon", positive, |v| v > 0.0)?
            .unwrap_or(1e-5);
        let rope_freq_base = keys
            .float("rope.freq_base", positive, |v| v > 0.0)?
            .unwrap_or(10000.0);
        let (rope_freq_scale, yarn) = keys.rope_scaling()?;
        // llama.cpp: the context YaRN extends defaults to the trained one.
        let rope_yarn_orig_ctx = match yarn {
            true => Some(
                keys.ranged("rope.scaling.original_context_length", 1, u32::MAX.into())?
                    .unwrap_or(n_ctx_train),
            ),
            false => None,
        };
        let rope_attn_factor = keys
            .float("rope.scaling.attn_factor", positive, |v| v > 0.0)?
            .unwrap_or(1.0);
        let mistral3 = arch == Arch::Mistral3;
        let finite = "a finite number";
        let (mut beta_fast, mut beta_slow, mut log_mul) = (32.0, 1.0, None);
        if mistral3 {
            beta_fast = keys
                .float("rope.scaling.yarn_beta_fast", finite, |_| true)?
                .unwrap_or(beta_fast);
            beta_slow = keys
                .float("rope.scaling.yarn_beta_slow", finite, |_| true)?
                .unwrap_or(beta_slow);
            log_mul = keys
                .float("rope.scaling.yarn_log_multiplier", finite, |_| true)?
                .filter(|&v| v != 0.0);
        }
        // llama.cpp: the temperature's step is YaRN's original context (the
        // trained one without YaRN).
        let attn_temperature = match mistral3 {
            true => keys
                .float("attention.temperature_scale", finite, |_| true)?
                .filter(|&s| s != 0.0)
                .map(|scale| AttnTemperature {
                    scale,
                    floor: rope_yarn_orig_ctx.unwrap_or(n_ctx_train),
                }),
            false => None,
        };
        // Gemma 3's local layers have their own base (default 10000) and
        // are never scaled; gpt-oss's share the global base and scale.
        let base_swa = keys.float("rope.freq_base_swa", positive, |v| v > 0.0)?;
        let (rope_freq_base_local, rope_freq_scale_local) = match arch {
            Arch::GptOss => (base_swa.unwrap_or(rope_freq_base), rope_freq_scale),
            _ => (base_swa.unwrap_or(10000.0), 1.0),
        };
        Ok(ModelConfig {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_ctx_train,
            rms_eps,
            rope_neox: arch.rope_neox(),
            n_rot,
            rope_freq_base,
            rope_freq_scale,
            rope_yarn_orig_ctx,
            rope_attn_factor,
            rope_yarn_beta: (beta_fast, beta_slow),
            rope_yarn_log_mul: log_mul,
            attn_temperature,
            moe,
            sliding_window,
            local_layers,
            rope_freq_base_local,
            rope_freq_scale_local,
            embed_scale: (arch == Arch::Gemma3).then(|| (n_embd as f32).sqrt()),
            gelu_ffn: arch == Arch::Gemma3,
            attention_scale,
        })
    }
}

/// Typed access to `{arch}.*` keys with errors that name the key.
pub(super) struct Keys<'a> {
    file: &'a GgufFile,
    arch: &'a str,
}

impl Keys<'_> {
    pub(super) fn name(&self, suffix: &str) -> String {
        format!("{}.{}", self.arch, suffix)
    }

    pub(super) fn missing(&self, suffix: &str) -> ModelError {
        ModelError::MissingKey(self.name(suffix))
    }

    fn value(&self, suffix: &str) -> (String, Option<&GgufValue>) {
        debug_assert!(
            ARCH_KEYS.contains(&suffix),
            "{suffix} is read but missing from ARCH_KEYS, so no test sweeps it"
        );
        let key = self.name(suffix);
        let v = self.file.get(&key);
        (key, v)
    }

    /// An integer in `min..=MAX_SIZE`, of any integer type.
    pub(super) fn size(&self, suffix: &str, min: u64) -> Result<Option<usize>, ModelError> {
        self.ranged(suffix, min, MAX_SIZE)
    }

    pub(super) fn ranged(
        &self,
        suffix: &str,
        min: u64,
        max: u64,
    ) -> Result<Option<usize>, ModelError> {
        match self.value(suffix) {
            (_, None) => Ok(None),
            (key, Some(v)) => int_value(&key, v, min, max).map(Some),
        }
    }

    /// Like [`Self::size`], or an array of one such value per layer, which
    /// llama.cpp accepts for head counts and feed-forward sizes. This graph
    /// has one shape for every layer, so the values must all be equal.
    pub(super) fn per_layer_size(
        &self,
        suffix: &str,
        min: u64,
        n_layer: usize,
    ) -> Result<Option<usize>, ModelError> {
        let (key, items) = match self.value(suffix) {
            (_, None) => return Ok(None),
            (key, Some(GgufValue::Array(items))) => (key, items),
            (key, Some(v)) => return int_value(&key, v, min, MAX_SIZE).map(Some),
        };
        if items.len() != n_layer {
            return Err(ModelError::BadKey {
                reason: format!(
                    "is an array of {} values, but a per-layer array needs one per block ({n_layer})",
                    items.len()
                ),
                key,
            });
        }
        let sizes = items
            .iter()
            .map(|v| int_value(&key, v, min, MAX_SIZE))
            .collect::<Result<Vec<_>, _>>()?;
        if sizes.iter().any(|&s| s != sizes[0]) {
            return Err(ModelError::Unsupported {
                key,
                value: format!("{sizes:?}"),
                feature: "layers of different sizes".into(),
            });
        }
        Ok(sizes.first().copied())
    }

    /// Which layers use the sliding window: `attention.sliding_window_pattern`
    /// as one period `n` (layer `i` is local unless `i % n == n - 1`), or
    /// as an array of one bool per layer; `default` period when absent.
    fn local_layers(&self, n_layer: usize, default: usize) -> Result<Vec<bool>, ModelError> {
        let period = match self.value("attention.sliding_window_pattern") {
            (_, None) => default,
            (key, Some(GgufValue::Array(items))) => {
                let flags: Option<Vec<bool>> = items.iter().map(GgufValue::as_bool).collect();
                return match flags {
                    Some(f) if f.len() == n_layer => Ok(f),
                    _ => Err(ModelError::BadKey {
                        key,
                        reason: format!("should be one bool per block ({n_layer})"),
                    }),
                };
            }
            (key, Some(v)) => int_value(&key, v, 0, MAX_SIZE)?,
        };
        // llama.cpp: a period of 0 makes every layer local.
        Ok((0..n_layer)
            .map(|i| period == 0 || i % period < period - 1)
            .collect())
    }

    /// A finite number (f32, f64, or an integer, which some converters
    /// write) for which `valid` holds; `expected` says what that is.
    fn float(
        &self,
        suffix: &str,
        expected: &str,
        valid: impl Fn(f32) -> bool,
    ) -> Result<Option<f32>, ModelError> {
        let (key, v) = match self.value(suffix) {
            (_, None) => return Ok(None),
            (key, Some(v)) => (key, v),
        };
        let f = v.as_f32().ok_or_else(|| ModelError::BadKey {
            key: key.clone(),
            reason: format!("should be a number, found {}", v.brief()),
        })?;
        // An f64 or u64 beyond f32's range converts to infinity.
        if f.is_finite() && valid(f) {
            Ok(Some(f))
        } else {
            Err(ModelError::BadValue {
                key,
                value: v.brief(),
                expected: expected.into(),
            })
        }
    }

    /// llama.cpp's rule: the scale is 1 / `rope.scaling.factor` (or the
    /// older `rope.scale_linear`), a factor of 0 meaning none, and a scaling
    /// type of `none` turning it off. Returns the scale and whether YaRN
    /// applies. Linear and YaRN scaling are computed here; LongRoPE with a
    /// real factor would silently give wrong output, so it is refused.
    fn rope_scaling(&self) -> Result<(f32, bool), ModelError> {
        let kind = match self.value("rope.scaling.type") {
            (_, None) => "linear",
            (key, Some(v)) => v.as_str().ok_or_else(|| ModelError::BadKey {
                key,
                reason: format!("should be a string, found {}", v.brief()),
            })?,
        };
        if !matches!(kind, "none" | "linear" | "yarn" | "longrope") {
            return Err(ModelError::BadValue {
                key: self.name("rope.scaling.type"),
                value: format!("{kind:?}"),
                expected: "one of none, linear, yarn or longrope".into(),
            });
        }
        let factor_ok = "zero (no scaling) or a positive finite number";
        let factor = match self.float("rope.scaling.factor", factor_ok, |v| v >= 0.0)? {
            Some(f) => Some(("rope.scaling.factor", f)),
            None => self
                .float("rope.scale_linear", factor_ok, |v| v >= 0.0)?
                .map(|f| ("rope.scale_linear", f)),
        };
        let Some((factor_key, factor)) = factor.filter(|&(_, f)| f != 0.0) else {
            return Ok((1.0, false));
        };
        let scale = 1.0 / factor;
        if kind == "none" || scale == 1.0 {
            // A factor of 1 scales nothing, whatever the method (YaRN's
            // mixing and magnitude both reduce to nothing at scale 1).
            return Ok((1.0, false));
        }
        if !scale.is_finite() {
            return Err(ModelError::BadValue {
                key: self.name(factor_key),
                value: format!("{factor:?}"),
                expected: "large enough that its inverse is a finite f32".into(),
            });
        }
        if kind == "longrope" {
            return Err(ModelError::Unsupported {
                key: self.name("rope.scaling.type"),
                value: format!("{kind:?}"),
                feature: "LongRoPE scaling".into(),
            });
        }
        Ok((scale, kind == "yarn"))
    }
}

/// `v` as an integer in `min..=max`; any integer type is accepted, since
/// converters disagree on u32, i32 and u64.
fn int_value(key: &str, v: &GgufValue, min: u64, max: u64) -> Result<usize, ModelError> {
    let bad = |value: String, expected: String| ModelError::BadValue {
        key: key.to_string(),
        value,
        expected,
    };
    match (v.as_u64(), v.as_i64()) {
        (Some(n), _) if n < min => Err(bad(n.to_string(), format!("at least {min}"))),
        (Some(n), _) if n > max => Err(bad(n.to_string(), format!("at most {max}"))),
        (Some(n), _) => Ok(n as usize),
        // Negative: a converter's -1 for "unset", or a u32 read as i32.
        (None, Some(n)) => Err(bad(n.to_string(), format!("at least {min}"))),
        (None, None) => Err(ModelError::BadKey {
            key: key.to_string(),
            reason: format!("should be an integer, found {}", v.brief()),
        }),
    }
}

/// What the tensors say about the model's shape.
pub(super) struct Shapes<'a> {
    file: &'a GgufFile,
    /// One more than the highest `N` of the `blk.N.*` tensors.
    n_blocks: usize,
}

impl<'a> Shapes<'a> {
    fn of(file: &'a GgufFile) -> Shapes<'a> {
        let n_blocks = file
            .tensors()
            .iter()
            .filter_map(|t| {
                t.name
                    .strip_prefix("blk.")?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .map(|i| i.saturating_add(1))
            .max()
            .unwrap_or(0);
        Shapes { file, n_blocks }
    }

    /// A 2-D tensor (a trailing unit dimension allowed, as for any weight).
    pub(super) fn matrix(&self, name: &str) -> Result<&'a TensorInfo, ModelError> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let extra = t.shape.get(2..).unwrap_or(&[]);
        if t.shape.len() < 2 || extra.iter().any(|&d| d != 1) {
            return Err(ModelError::Contradiction(format!(
                "{name} has shape {:?}; a matrix has two dimensions",
                t.shape
            )));
        }
        Ok(t)
    }

    /// A stack of expert matrices: three dimensions (`[cols, rows, experts]`).
    pub(super) fn experts(&self, name: &str) -> Result<&'a TensorInfo, ModelError> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if t.shape.len() != 3 {
            return Err(ModelError::Contradiction(format!(
                "{name} has shape {:?}; a stack of experts has three dimensions",
                t.shape
            )));
        }
        Ok(t)
    }

    /// Dimension `axis` of `t` as a size; `what` names it in the error.
    pub(super) fn dim(&self, t: &TensorInfo, axis: usize, what: &str) -> Result<usize, ModelError> {
        let d = t.shape.get(axis).copied().unwrap_or(1);
        if d > MAX_SIZE {
            return Err(ModelError::Contradiction(format!(
                "{what} taken from {} shape {:?} is more than {MAX_SIZE}",
                t.name, t.shape
            )));
        }
        Ok(d as usize)
    }

    /// `value` (named by `what`) when dimension `axis` of `t` agrees.
    pub(super) fn expect(
        &self,
        t: &TensorInfo,
        axis: usize,
        value: usize,
        what: impl FnOnce() -> String,
    ) -> Result<usize, ModelError> {
        if t.shape.get(axis) == Some(&(value as u64)) {
            return Ok(value);
        }
        Err(ModelError::Contradiction(format!(
            "{} is {value} but {} has shape {:?}",
            what(),
            t.name,
            t.shape
        )))
    }

    /// The row count of first-layer weight `name`, which reads rows of
    /// `n_embd` values, checked against `value` (named by `what`). The key
    /// is blamed only when the tensor is otherwise sound: a missing tensor,
    /// or one whose rows are not `n_embd` long, is the weights loader's to
    /// report, by the tensor's name.
    pub(super) fn expect_rows(
        &self,
        name: &str,
        n_embd: usize,
        value: usize,
        what: impl FnOnce() -> String,
    ) -> Result<usize, ModelError> {
        match self.file.tensor(name) {
            Some(t) if t.shape.first() == Some(&(n_embd as u64)) => self.expect(t, 1, value, what),
            _ => Ok(value),
        }
    }
}
