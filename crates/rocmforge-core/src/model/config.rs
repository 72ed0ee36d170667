//! Model hyperparameters read from GGUF metadata, with llama.cpp's defaults and
//! inference rules where a key is optional.

use crate::gguf::{GgufFile, GgufValue};

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
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    /// How RoPE pairs dimensions: llama rotates adjacent pairs, the Qwen
    /// families rotate the two halves of each head against each other (NeoX).
    pub fn rope_neox(self) -> bool {
        matches!(self, Arch::Qwen2 | Arch::Qwen3)
    }
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

    /// Reads the config; `n_vocab` and `n_ff` fall back to tensor shapes, as
    /// llama.cpp infers them when converters leave the keys out.
    pub fn from_gguf(file: &GgufFile) -> Result<ModelConfig, ModelError> {
        let arch_name = file
            .get("general.architecture")
            .ok_or(ModelError::MissingKey("general.architecture".into()))?
            .as_str()
            .ok_or_else(|| ModelError::BadKey {
                key: "general.architecture".into(),
                reason: "is not a string".into(),
            })?;
        let arch = Arch::from_name(arch_name)
            .ok_or_else(|| ModelError::UnsupportedArch(arch_name.to_string()))?;
        let keys = Keys {
            file,
            arch: arch_name,
        };

        let n_embd = keys.required_usize("embedding_length")?;
        let n_layer = keys.required_usize("block_count")?;
        let n_head = keys.required_usize("attention.head_count")?;
        let n_head_kv = keys
            .optional_usize("attention.head_count_kv")?
            .unwrap_or(n_head);
        if n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(ModelError::Contradiction(format!(
                "{arch_name}.attention.head_count ({n_head}) is not a multiple of head_count_kv ({n_head_kv})"
            )));
        }
        let head_dim = match keys.optional_usize("attention.key_length")? {
            Some(d) => d,
            None if n_embd % n_head == 0 => n_embd / n_head,
            None => {
                return Err(ModelError::Contradiction(format!(
                    "embedding_length {n_embd} is not divisible by head_count {n_head} and attention.key_length is missing"
                )))
            }
        };
        if let Some(v) = keys.optional_usize("attention.value_length")? {
            if v != head_dim {
                return Err(ModelError::Contradiction(format!(
                    "attention.value_length {v} differs from key_length {head_dim}; not supported"
                )));
            }
        }
        let n_rot = keys
            .optional_usize("rope.dimension_count")?
            .unwrap_or(head_dim);
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(ModelError::Contradiction(format!(
                "rope.dimension_count {n_rot} must be even and at most the head size {head_dim}"
            )));
        }

        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let n_vocab = match keys.optional_usize("vocab_size")? {
            Some(v) => v,
            None => *embd.shape.get(1).unwrap_or(&0) as usize,
        };
        let n_ff = match keys.optional_usize("feed_forward_length")? {
            Some(v) => v,
            None => file
                .tensor("blk.0.ffn_up.weight")
                .and_then(|t| t.shape.get(1).copied())
                .ok_or_else(|| ModelError::MissingKey(format!("{arch_name}.feed_forward_length")))?
                as usize,
        };
        let rope_freq_scale = match keys.optional_f32("rope.scaling.factor")? {
            Some(f) if f > 0.0 && keys.rope_scaling_is_linear() => 1.0 / f,
            _ => keys
                .optional_f32("rope.scale_linear")?
                .map_or(1.0, |f| 1.0 / f),
        };
        let cfg = ModelConfig {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_ctx_train: keys.optional_usize("context_length")?.unwrap_or(4096),
            rms_eps: keys
                .optional_f32("attention.layer_norm_rms_epsilon")?
                .unwrap_or(1e-5),
            rope_neox: arch.rope_neox(),
            n_rot,
            rope_freq_base: keys.optional_f32("rope.freq_base")?.unwrap_or(10000.0),
            rope_freq_scale,
        };
        for (name, v) in [
            ("n_vocab", cfg.n_vocab),
            ("n_embd", cfg.n_embd),
            ("n_layer", cfg.n_layer),
            ("n_head", cfg.n_head),
            ("head_dim", cfg.head_dim),
            ("n_ff", cfg.n_ff),
        ] {
            if v == 0 || v > 1 << 24 {
                return Err(ModelError::Contradiction(format!(
                    "{name} = {v} is out of range"
                )));
            }
        }
        Ok(cfg)
    }
}

/// Typed access to `{arch}.*` keys with errors that name the key.
struct Keys<'a> {
    file: &'a GgufFile,
    arch: &'a str,
}

impl Keys<'_> {
    fn value(&self, suffix: &str) -> (String, Option<&GgufValue>) {
        let key = format!("{}.{}", self.arch, suffix);
        let v = self.file.get(&key);
        (key, v)
    }

    fn optional_usize(&self, suffix: &str) -> Result<Option<usize>, ModelError> {
        match self.value(suffix) {
            (_, None) => Ok(None),
            (key, Some(v)) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or(ModelError::BadKey {
                    key,
                    reason: format!("expected a non-negative integer, found {}", v.type_name()),
                }),
        }
    }

    fn required_usize(&self, suffix: &str) -> Result<usize, ModelError> {
        self.optional_usize(suffix)?
            .ok_or_else(|| ModelError::MissingKey(format!("{}.{}", self.arch, suffix)))
    }

    fn optional_f32(&self, suffix: &str) -> Result<Option<f32>, ModelError> {
        match self.value(suffix) {
            (_, None) => Ok(None),
            (key, Some(v)) => match v.as_f32() {
                Some(f) if f.is_finite() => Ok(Some(f)),
                _ => Err(ModelError::BadKey {
                    key,
                    reason: format!("expected a finite number, found {}", v.type_name()),
                }),
            },
        }
    }

    fn rope_scaling_is_linear(&self) -> bool {
        matches!(
            self.value("rope.scaling.type").1.and_then(|v| v.as_str()),
            Some("linear")
        )
    }
}
