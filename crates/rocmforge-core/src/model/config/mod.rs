//! Model hyperparameters read from GGUF metadata, with llama.cpp's defaults
//! and inference rules where a key is optional.
//!
//! Every value is checked as it is read, and then against the tensor shapes,
//! which are the ground truth: a file's header can claim anything, but its
//! tensors had to fit in the file. So a bad value is an error naming the key
//! before any size derived from it reaches an allocation.
//!
//! The reading is split by what it depends on:
//! - `keys.rs`: the one table of keys ([`ARCH_KEYS`], [`GENERAL_KEYS`]) and
//!   typed access to them; nothing reads a key the table lacks.
//! - `shapes.rs`: what the tensors say.
//! - `dims.rs` and `rope.rs`: the keys every family reads, with llama.cpp's
//!   defaults.
//! - `family/`: a module per architecture family with its graph traits and
//!   its own keys and rules (Gemma 3's sliding window and attention scale,
//!   gpt-oss's local layers, Mistral 3's YaRN and attention temperature,
//!   Mixtral's expert width), each citing its source in llama.cpp. A
//!   family's rule runs last and only replaces the defaults that do not
//!   hold for it, so [`ModelConfig::from_gguf`] has no family in it.

mod arch;
mod dims;
mod family;
mod keys;
mod rope;
mod shapes;

pub use arch::Arch;
pub(super) use keys::Keys;
pub use keys::{ARCH_KEYS, GENERAL_KEYS};
pub(super) use shapes::Shapes;

use crate::gguf::GgufFile;

use super::moe::MoeConfig;
use super::ModelError;
use dims::Dims;
use keys::{ARCH_KEY, FINITE, POSITIVE};
use rope::Rope;

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
    /// llama.cpp infers them when converters leave the keys out. The keys
    /// every family shares come first, then the family's own rules.
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
        let dims = Dims::read(file, &keys, arch)?;
        if let Some(cap) = keys.float("final_logit_softcapping", FINITE, |_| true)? {
            if cap != 0.0 {
                return Err(ModelError::Unsupported {
                    key: keys.name("final_logit_softcapping"),
                    value: cap.to_string(),
                    feature: "logit soft-capping (Gemma 2)".into(),
                });
            }
        }
        // Positions are 32-bit; no tensor bounds the context.
        let n_ctx_train = keys
            .ranged("context_length", 1, u32::MAX.into())?
            .unwrap_or(4096);
        let rms_eps = keys
            .float("attention.layer_norm_rms_epsilon", POSITIVE, |v| v > 0.0)?
            .unwrap_or(1e-5);
        let rope = Rope::read(&keys, n_ctx_train)?;
        let mut config = ModelConfig {
            arch,
            n_vocab: dims.n_vocab,
            n_embd: dims.n_embd,
            n_layer: dims.n_layer,
            n_head: dims.n_head,
            n_head_kv: dims.n_head_kv,
            head_dim: dims.head_dim,
            n_ff: dims.n_ff,
            n_ctx_train,
            rms_eps,
            rope_neox: arch.rope_neox(),
            n_rot: dims.n_rot,
            rope_freq_base: rope.freq_base,
            rope_freq_scale: rope.freq_scale,
            rope_yarn_orig_ctx: rope.yarn_orig_ctx,
            rope_attn_factor: rope.attn_factor,
            // llama.cpp's YaRN ramp defaults; Mistral 3 reads its own.
            rope_yarn_beta: (32.0, 1.0),
            rope_yarn_log_mul: None,
            attn_temperature: None,
            moe: dims.moe,
            // No family applies a window unless its module reads one.
            sliding_window: None,
            local_layers: Vec::new(),
            rope_freq_base_local: rope.freq_base_local,
            rope_freq_scale_local: rope.freq_scale_local,
            embed_scale: None,
            gelu_ffn: false,
            attention_scale: 1.0 / (dims.head_dim as f32).sqrt(),
        };
        (arch.family().read)(&keys, &mut config)?;
        Ok(config)
    }
}
