//! The model shapes probes run: a tiny one for `--backend auto` (seconds on
//! any device), one layer of the real models people run (the sizes every
//! kernel meets in practice), and odd sizes that sit on tile and block
//! boundaries, where size-dependent driver and kernel bugs live (the gfx1010
//! MIOpen hangs appeared only above a size boundary).

use rocmforge_genmodel::presets::{Arch, Preset, Vocab};

#[derive(Debug)]
pub struct ProbeShape {
    pub name: &'static str,
    pub what: &'static str,
    pub preset: Preset,
    /// Prompt lengths `doctor --probe` runs: decode alone, tile edges
    /// (64/65, 128/129), a full 512-token batch and one past it (two
    /// steps), and for the tiny shape a context past 1024 positions.
    pub sweep_prompts: &'static [usize],
}

const fn shape(
    name: &'static str,
    arch: Arch,
    n_layer: u64,
    n_embd: u64,
    heads: (u64, u64, u64),
    n_ff: u64,
    n_vocab: u64,
) -> Preset {
    Preset {
        name,
        model: name,
        arch,
        n_layer,
        n_embd,
        n_head: heads.0,
        n_head_kv: heads.1,
        head_dim: heads.2,
        explicit_head_dim: heads.2 * heads.0 != n_embd,
        n_ff,
        n_vocab,
        n_ctx: 4096,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        tied_embeddings: false,
        // No tokenizer is written (probes run from token ids).
        vocab: Vocab::LlamaSpm,
        rope_scaling: None,
        moe: None,
        sliding_window: None,
        yarn: None,
    }
}

pub const SHAPES: &[ProbeShape] = &[
    ProbeShape {
        name: "tiny",
        what: "2 layers of 256, GQA 8/4 (the auto probe)",
        preset: shape("tiny", Arch::Llama, 2, 256, (8, 4, 32), 768, 1024),
        sweep_prompts: &[1, 7, 64, 65, 129, 513, 1100],
    },
    ProbeShape {
        name: "llama-7b-layer",
        what: "one Llama-2-7B layer: 4096 wide, 32 heads of 128, FFN 11008",
        preset: shape(
            "llama-7b-layer",
            Arch::Llama,
            1,
            4096,
            (32, 32, 128),
            11008,
            4096,
        ),
        sweep_prompts: &[1, 65, 512],
    },
    ProbeShape {
        name: "qwen2-0.5b-layer",
        what: "one Qwen2.5-0.5B layer: 896 wide (not a multiple of 256), GQA 14/2, q/k/v biases",
        preset: shape(
            "qwen2-0.5b-layer",
            Arch::Qwen2,
            1,
            896,
            (14, 2, 64),
            4864,
            4096,
        ),
        sweep_prompts: &[1, 65, 512],
    },
    ProbeShape {
        name: "qwen3-layer",
        what: "one Qwen3-0.6B layer: heads of 128 wider than the model, QK norm",
        preset: shape(
            "qwen3-layer",
            Arch::Qwen3,
            1,
            1024,
            (16, 8, 128),
            3072,
            4096,
        ),
        sweep_prompts: &[1, 65, 512],
    },
    ProbeShape {
        name: "odd",
        what: "boundary sizes: 320 wide, 5 heads of 64 on 1 KV head, FFN 864, vocab 1000",
        preset: shape("odd", Arch::Llama, 2, 320, (5, 1, 64), 864, 1000),
        sweep_prompts: &[1, 3, 33, 127, 129],
    },
];

pub fn find(name: &str) -> Option<&'static ProbeShape> {
    SHAPES.iter().find(|s| s.name == name)
}

/// The shape `--backend auto` probes with.
pub fn auto_shape() -> &'static ProbeShape {
    &SHAPES[0]
}
