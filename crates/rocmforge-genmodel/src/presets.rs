//! Model shapes for `gen-model`, one row per preset.
//!
//! The real-shape presets copy the numbers from the published Hugging Face
//! `config.json` of each model (the same fields llama.cpp's converter reads);
//! the tiny ones copy the shapes of `testdata/reference/*.gguf`, so a generated
//! tiny model and the reference fixture of the same name differ only in weights.

/// Architectures as llama.cpp names them (`general.architecture`): core's,
/// so a preset names only what the loader builds.
pub use rocmforge_core::model::Arch;

/// Where the `tokenizer.*` metadata comes from (files in `testdata/tokenizer/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vocab {
    /// `ggml-vocab-llama-spm.gguf`: the Llama 1/2 SentencePiece vocab, 32000 tokens.
    LlamaSpm,
    /// `ggml-vocab-qwen2.gguf`: Qwen2/2.5/3 byte-level BPE, 151936 entries.
    Qwen2,
    /// No Llama 3 vocab is available offline: the GPT-2 BPE vocab
    /// (`ggml-vocab-gpt-2.gguf`, 50257 tokens) padded with CONTROL tokens up to
    /// the preset's vocab size, with Llama 3's special tokens at their real ids
    /// (128000..) and `tokenizer.ggml.pre = "llama-bpe"`. Token ids below 50257
    /// therefore do not mean what they mean in a real Llama 3 file.
    Llama3FromGpt2,
    /// `ggml-vocab-phi-3.gguf`: Phi-3's SentencePiece vocab, 32064 tokens.
    Phi3,
    /// No Gemma 3 vocab is available offline: the Llama SPM vocab padded
    /// with CONTROL tokens `<unused{N}>` up to the preset's size.
    GemmaFromLlamaSpm,
    /// No o200k vocab is available offline: the GPT-2 BPE vocab split by
    /// o200k's pre-tokenizer (`tokenizer.ggml.pre = "gpt-4o"`), padded with
    /// CONTROL tokens up to the preset's size with the harmony format's
    /// special tokens at their real ids (199998..), and no BOS, as
    /// gpt-oss files have.
    GptOssFromGpt2,
}

impl Vocab {
    pub fn file_name(self) -> &'static str {
        match self {
            Vocab::LlamaSpm => "ggml-vocab-llama-spm.gguf",
            Vocab::Qwen2 => "ggml-vocab-qwen2.gguf",
            Vocab::Llama3FromGpt2 => "ggml-vocab-gpt-2.gguf",
            Vocab::Phi3 => "ggml-vocab-phi-3.gguf",
            Vocab::GemmaFromLlamaSpm => "ggml-vocab-llama-spm.gguf",
            Vocab::GptOssFromGpt2 => "ggml-vocab-gpt-2.gguf",
        }
    }
}

/// Llama 3.1-style RoPE frequency scaling (`rope_scaling.rope_type = "llama3"`),
/// which the converter bakes into a `rope_freqs.weight` tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3RopeScaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_context: f64,
}

/// YaRN RoPE scaling as the converter writes it (`rope.scaling.type =
/// yarn`, `rope.scaling.factor`, `rope.scaling.original_context_length`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YarnScaling {
    pub factor: f32,
    pub original_context: u64,
    /// Mistral's converter adds `yarn_beta_fast` / `yarn_beta_slow`,
    /// `yarn_log_multiplier` and Ministral 3's
    /// `attention.temperature_scale`.
    pub mistral: Option<MistralYarn>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MistralYarn {
    pub beta_fast: f32,
    pub beta_slow: f32,
    pub log_mul: f32,
    pub temperature_scale: f32,
}

/// The experts of a mixture-of-experts preset (`num_experts`,
/// `num_experts_per_tok`, `moe_intermediate_size` in the configs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeShape {
    pub n_expert: u64,
    pub n_expert_used: u64,
    pub n_ff_exp: u64,
    /// Qwen2-MoE's shared expert width (`shared_expert_intermediate_size`).
    pub n_ff_shared: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    /// The model this imitates, for `general.name` and `--help`.
    pub model: &'static str,
    pub arch: Arch,
    pub n_layer: u64,
    pub n_embd: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    /// The config names `head_dim` explicitly, so the converter writes
    /// `attention.key_length` / `value_length`.
    pub explicit_head_dim: bool,
    pub n_ff: u64,
    pub n_vocab: u64,
    pub n_ctx: u64,
    pub rope_base: f32,
    pub rms_eps: f32,
    /// `output.weight` is absent; the logits reuse `token_embd.weight`.
    pub tied_embeddings: bool,
    pub vocab: Vocab,
    pub rope_scaling: Option<Llama3RopeScaling>,
    /// Experts in place of the dense feed-forward blocks (`n_ff` is then
    /// only written as metadata, as the converter does).
    pub moe: Option<MoeShape>,
    /// `attention.sliding_window` as the converter writes it (Phi-3).
    pub sliding_window: Option<u64>,
    pub yarn: Option<YarnScaling>,
}

pub const PRESETS: &[Preset] = &[
    // Shape of testdata/reference/tiny-llama-Q4_K_M.gguf. Every row length is a
    // multiple of 256, so the K-quants apply without fallback.
    Preset {
        name: "tiny-llama",
        model: "tiny-llama",
        arch: Arch::Llama,
        n_layer: 4,
        n_embd: 256,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 32,
        explicit_head_dim: false,
        n_ff: 768,
        n_vocab: 32000,
        n_ctx: 4096,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::LlamaSpm,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: None,
    },
    // Shape of testdata/reference/tiny-qwen2-Q8_0.gguf; n_ff = 176 is not a
    // multiple of 32, so ffn_down falls back to F16 as it does there.
    Preset {
        name: "tiny-qwen2",
        model: "tiny-qwen2",
        arch: Arch::Qwen2,
        n_layer: 3,
        n_embd: 64,
        n_head: 2,
        n_head_kv: 1,
        head_dim: 32,
        explicit_head_dim: false,
        n_ff: 176,
        n_vocab: 151936,
        n_ctx: 4096,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: None,
    },
    // Shape of testdata/reference/tiny-qwen3-Q8_0.gguf: head_dim 32 while
    // n_embd / n_head = 16.
    Preset {
        name: "tiny-qwen3",
        model: "tiny-qwen3",
        arch: Arch::Qwen3,
        n_layer: 3,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 32,
        explicit_head_dim: true,
        n_ff: 192,
        n_vocab: 151936,
        n_ctx: 4096,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: None,
    },
    // Qwen/Qwen2.5-0.5B. n_embd 896 is not a multiple of 256: K-quant types
    // fall back on every tensor whose rows are n_embd long, as in the real
    // K-quant files.
    Preset {
        name: "qwen2-0.5b",
        model: "Qwen2.5-0.5B",
        arch: Arch::Qwen2,
        n_layer: 24,
        n_embd: 896,
        n_head: 14,
        n_head_kv: 2,
        head_dim: 64,
        explicit_head_dim: false,
        n_ff: 4864,
        n_vocab: 151936,
        n_ctx: 32768,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: None,
    },
    // Qwen/Qwen3-0.6B: head_dim 128 while n_embd / n_head = 64.
    Preset {
        name: "qwen3-0.6b",
        model: "Qwen3-0.6B",
        arch: Arch::Qwen3,
        n_layer: 28,
        n_embd: 1024,
        n_head: 16,
        n_head_kv: 8,
        head_dim: 128,
        explicit_head_dim: true,
        n_ff: 3072,
        n_vocab: 151936,
        n_ctx: 40960,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: None,
    },
    // meta-llama/Llama-3.2-1B. The tokenizer is a stand-in, see Vocab::Llama3FromGpt2.
    Preset {
        name: "llama3-1b",
        model: "Llama-3.2-1B",
        arch: Arch::Llama,
        n_layer: 16,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 64,
        explicit_head_dim: true,
        n_ff: 8192,
        n_vocab: 128256,
        n_ctx: 131072,
        rope_base: 500000.0,
        rms_eps: 1e-5,
        tied_embeddings: true,
        vocab: Vocab::Llama3FromGpt2,
        rope_scaling: Some(Llama3RopeScaling {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192.0,
        }),
        moe: None,
        sliding_window: None,
        yarn: None,
    },
    // meta-llama/Llama-2-7b-hf.
    Preset {
        name: "llama2-7b",
        model: "Llama-2-7B",
        arch: Arch::Llama,
        n_layer: 32,
        n_embd: 4096,
        n_head: 32,
        n_head_kv: 32,
        head_dim: 128,
        explicit_head_dim: false,
        n_ff: 11008,
        n_vocab: 32000,
        n_ctx: 4096,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::LlamaSpm,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: None,
    },
    // The shape of tiny-qwen3 with 8 experts of 64, 2 per token; rows of
    // 64 take Q8_0 and the legacy quants, K-quants fall back as in
    // tiny-qwen2.
    Preset {
        name: "tiny-qwen3moe",
        model: "tiny-qwen3moe",
        arch: Arch::Qwen3Moe,
        n_layer: 2,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 32,
        explicit_head_dim: true,
        n_ff: 192,
        n_vocab: 151936,
        n_ctx: 4096,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: Some(MoeShape {
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 64,
            n_ff_shared: None,
        }),
        sliding_window: None,
        yarn: None,
    },
    // Issue 26's shape: tiny-qwen3moe with 3 layers and experts of 96, so
    // the expert rows hold 2 (gate/up, 64 values) and 3 (down, 96 values)
    // blocks of 32: fewer blocks than a subgroup has lanes, and a count
    // that is not a power of two. Every non-K type applies to the experts;
    // the K-quants fall back (64 and 96 are not multiples of 256).
    Preset {
        name: "tiny-qwen3moe-ragged",
        model: "tiny-qwen3moe-ragged",
        arch: Arch::Qwen3Moe,
        n_layer: 3,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 32,
        explicit_head_dim: true,
        n_ff: 192,
        n_vocab: 151936,
        n_ctx: 4096,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: Some(MoeShape {
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 96,
            n_ff_shared: None,
        }),
        sliding_window: None,
        yarn: None,
    },
    // A Mixtral-style llama with experts (Mixtral and its descendants are
    // `llama` files with `expert_count` set): rows of 256 everywhere, so
    // every weight type applies to the experts without fallback.
    Preset {
        name: "tiny-mixtral",
        model: "tiny-mixtral",
        arch: Arch::Llama,
        n_layer: 2,
        n_embd: 256,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 32,
        explicit_head_dim: false,
        // Mixtral's converter writes the expert width here.
        n_ff: 256,
        n_vocab: 32000,
        n_ctx: 4096,
        rope_base: 1e6,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::LlamaSpm,
        rope_scaling: None,
        moe: Some(MoeShape {
            n_expert: 4,
            n_expert_used: 2,
            n_ff_exp: 256,
            n_ff_shared: None,
        }),
        sliding_window: None,
        yarn: None,
    },
    // The shape of Phi-3-mini scaled down: fused QKV and gate/up, 32064
    // tokens, the checkpoint's sliding window.
    Preset {
        name: "tiny-phi3",
        model: "tiny-phi3",
        arch: Arch::Phi3,
        n_layer: 2,
        n_embd: 256,
        n_head: 8,
        n_head_kv: 8,
        head_dim: 32,
        explicit_head_dim: false,
        n_ff: 512,
        n_vocab: 32064,
        n_ctx: 4096,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::Phi3,
        rope_scaling: None,
        moe: None,
        sliding_window: Some(2047),
        yarn: None,
    },
    // microsoft/Phi-3-mini-4k-instruct.
    Preset {
        name: "phi3-mini",
        model: "Phi-3-mini-4k-instruct",
        arch: Arch::Phi3,
        n_layer: 32,
        n_embd: 3072,
        n_head: 32,
        n_head_kv: 32,
        head_dim: 96,
        explicit_head_dim: false,
        n_ff: 8192,
        n_vocab: 32064,
        n_ctx: 4096,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::Phi3,
        rope_scaling: None,
        moe: None,
        sliding_window: Some(2047),
        yarn: None,
    },
    // Gemma 3's layout at test size: six layers, so five local (RoPE base
    // 10000, a window of 8 positions, shorter than the reference prompt so
    // the tests cross it) and one global (base 1e6); the Llama SPM vocab
    // stands in for Gemma's.
    Preset {
        name: "tiny-gemma3",
        model: "tiny-gemma3",
        arch: Arch::Gemma3,
        n_layer: 6,
        n_embd: 256,
        n_head: 4,
        n_head_kv: 1,
        head_dim: 64,
        explicit_head_dim: true,
        n_ff: 512,
        n_vocab: 32000,
        n_ctx: 32768,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        vocab: Vocab::LlamaSpm,
        rope_scaling: None,
        moe: None,
        sliding_window: Some(8),
        yarn: None,
    },
    // google/gemma-3-4b-it's text model (its global layers' linear RoPE
    // scaling by 8 is left out: it changes no speed). The tokenizer is a
    // stand-in, see Vocab::GemmaFromLlamaSpm.
    Preset {
        name: "gemma3-4b",
        model: "gemma-3-4b",
        arch: Arch::Gemma3,
        n_layer: 34,
        n_embd: 2560,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 256,
        explicit_head_dim: true,
        n_ff: 10240,
        n_vocab: 262144,
        n_ctx: 131072,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        vocab: Vocab::GemmaFromLlamaSpm,
        rope_scaling: None,
        moe: None,
        sliding_window: Some(1024),
        yarn: None,
    },
    // Qwen/Qwen3-30B-A3B: 128 experts of 768, 8 per token (3.3B active).
    Preset {
        name: "qwen3-30b-a3b",
        model: "Qwen3-30B-A3B",
        arch: Arch::Qwen3Moe,
        n_layer: 48,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 4,
        head_dim: 128,
        explicit_head_dim: true,
        n_ff: 6144,
        n_vocab: 151936,
        n_ctx: 40960,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: false,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: Some(MoeShape {
            n_expert: 128,
            n_expert_used: 8,
            n_ff_exp: 768,
            n_ff_shared: None,
        }),
        sliding_window: None,
        yarn: None,
    },
    // Qwen2-MoE at test size: 8 experts of 256 (2 per token) and a shared
    // expert of 512, Qwen2's biased attention and vocab.
    Preset {
        name: "tiny-qwen2moe",
        model: "tiny-qwen2moe",
        arch: Arch::Qwen2Moe,
        n_layer: 2,
        n_embd: 256,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 32,
        explicit_head_dim: false,
        n_ff: 512,
        n_vocab: 151936,
        n_ctx: 8192,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: false,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: Some(MoeShape {
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 256,
            n_ff_shared: Some(512),
        }),
        sliding_window: None,
        yarn: None,
    },
    // Qwen/Qwen1.5-MoE-A2.7B: 60 experts of 1408 (4 per token) and a
    // shared expert of 5632.
    Preset {
        name: "qwen1.5-moe-a2.7b",
        model: "Qwen1.5-MoE-A2.7B",
        arch: Arch::Qwen2Moe,
        n_layer: 24,
        n_embd: 2048,
        n_head: 16,
        n_head_kv: 16,
        head_dim: 128,
        explicit_head_dim: false,
        n_ff: 5632,
        n_vocab: 151936,
        n_ctx: 8192,
        rope_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: false,
        vocab: Vocab::Qwen2,
        rope_scaling: None,
        moe: Some(MoeShape {
            n_expert: 60,
            n_expert_used: 4,
            n_ff_exp: 1408,
            n_ff_shared: Some(5632),
        }),
        sliding_window: None,
        yarn: None,
    },
    // Ministral 3's layout at test size: the llama graph under `mistral3`
    // with YaRN's parameters from the file and Llama 4's attention
    // temperature. An original context of 4 positions makes the 14-token
    // prompt cross three temperature steps (the real one, 16384, would
    // need a prompt that long).
    Preset {
        name: "tiny-ministral3",
        model: "tiny-ministral3",
        arch: Arch::Mistral3,
        n_layer: 2,
        n_embd: 256,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 32,
        explicit_head_dim: false,
        n_ff: 512,
        n_vocab: 32000,
        n_ctx: 4096,
        rope_base: 1e6,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::LlamaSpm,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: Some(YarnScaling {
            factor: 16.0,
            original_context: 4,
            mistral: Some(MistralYarn {
                beta_fast: 32.0,
                beta_slow: 1.0,
                log_mul: 1.0,
                temperature_scale: 1.0,
            }),
        }),
    },
    // mistralai/Mistral-Small-3.2-24B-Instruct-2506's text model, as the
    // converter writes its multimodal checkpoint (`mistral3`, no YaRN);
    // the Llama SPM vocab stands in for tekken.
    Preset {
        name: "mistral-small-24b",
        model: "Mistral-Small-3.2-24B",
        arch: Arch::Mistral3,
        n_layer: 40,
        n_embd: 5120,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        explicit_head_dim: true,
        n_ff: 32768,
        n_vocab: 131072,
        n_ctx: 131072,
        rope_base: 1e9,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::GemmaFromLlamaSpm,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: None,
    },
    // gpt-oss at test size: four layers alternating sliding-window (a
    // window of 8 positions, shorter than the reference prompt) and full,
    // heads of 64 whose total (512) differs from the width as in the real
    // model, YaRN as gpt-oss-20b has it, 8 experts of which 4 are used.
    Preset {
        name: "tiny-gpt-oss",
        model: "tiny-gpt-oss",
        arch: Arch::GptOss,
        n_layer: 4,
        n_embd: 256,
        n_head: 8,
        n_head_kv: 2,
        head_dim: 64,
        explicit_head_dim: true,
        n_ff: 256,
        n_vocab: 50257,
        n_ctx: 131072,
        rope_base: 150000.0,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::GptOssFromGpt2,
        rope_scaling: None,
        moe: Some(MoeShape {
            n_expert: 8,
            n_expert_used: 4,
            n_ff_exp: 256,
            n_ff_shared: None,
        }),
        sliding_window: Some(8),
        yarn: Some(YarnScaling {
            factor: 32.0,
            original_context: 4096,
            mistral: None,
        }),
    },
    // openai/gpt-oss-20b: 32 experts of 2880, 4 per token (3.6B active);
    // the o200k tokenizer is a stand-in, see Vocab::GptOssFromGpt2.
    Preset {
        name: "gpt-oss-20b",
        model: "gpt-oss-20b",
        arch: Arch::GptOss,
        n_layer: 24,
        n_embd: 2880,
        n_head: 64,
        n_head_kv: 8,
        head_dim: 64,
        explicit_head_dim: true,
        n_ff: 2880,
        n_vocab: 201088,
        n_ctx: 131072,
        rope_base: 150000.0,
        rms_eps: 1e-5,
        tied_embeddings: false,
        vocab: Vocab::GptOssFromGpt2,
        rope_scaling: None,
        moe: Some(MoeShape {
            n_expert: 32,
            n_expert_used: 4,
            n_ff_exp: 2880,
            n_ff_shared: None,
        }),
        sliding_window: Some(128),
        yarn: Some(YarnScaling {
            factor: 32.0,
            original_context: 4096,
            mistral: None,
        }),
    },
];

pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

/// clap value parser for `--preset`.
pub fn parse_preset(name: &str) -> Result<&'static Preset, String> {
    find(name).ok_or_else(|| {
        let known: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        format!("unknown preset '{name}' (known: {})", known.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for p in PRESETS {
            assert_eq!(find(p.name), Some(p));
            assert_eq!(PRESETS.iter().filter(|q| q.name == p.name).count(), 1);
        }
        assert!(parse_preset("llama-9000")
            .unwrap_err()
            .contains("tiny-llama"));
    }

    #[test]
    fn shapes_are_consistent() {
        for p in PRESETS {
            assert_eq!(p.n_head % p.n_head_kv, 0, "{}: GQA groups", p.name);
            assert_eq!(p.head_dim % 2, 0, "{}: RoPE pairs", p.name);
            if !p.explicit_head_dim {
                assert_eq!(p.head_dim * p.n_head, p.n_embd, "{}", p.name);
            }
        }
    }
}
