//! Which tensors a model has, their ggml shapes and storage types: the layout
//! llama.cpp's converter writes, with the type choices of `llama-quantize`.

use rocmforge_core::quant::QuantType;

use super::rope_scaling::llama3_rope_factors;
use crate::presets::{Arch, Preset};

/// How a tensor's values are produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Fill {
    /// Weight matrices and embeddings: zero-mean noise.
    Matrix,
    /// RMSNorm scales: 1 plus noise.
    Norm,
    /// Projection biases: small noise.
    Bias,
    /// Mixture-of-experts routers: wide noise (see `ROUTER_STD`).
    Router,
    /// gpt-oss's biases: noise wide enough to change the outputs
    /// measurably (see `WIDE_BIAS_STD`), so a bias applied to the wrong row
    /// or not at all fails the reference tests.
    WideBias,
    /// gpt-oss's attention sinks: logits on the scale of attention scores.
    Sink,
    /// Values computed from the config, not random (`rope_freqs.weight`).
    Fixed(Vec<f32>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    /// ggml order: `shape[0]` is the contiguous row length.
    pub shape: Vec<u64>,
    pub ty: QuantType,
    pub fill: Fill,
    /// The type asked for, when the row length forced `ty` instead.
    pub fallback_from: Option<QuantType>,
}

impl TensorSpec {
    pub fn row_len(&self) -> u64 {
        self.shape[0]
    }

    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    pub fn n_bytes(&self) -> u64 {
        self.ty
            .bytes_for(self.n_elements())
            .expect("types are chosen so that rows are whole blocks")
    }
}

/// The type a tensor with rows of `row_len` elements gets when `requested`
/// was asked for: `requested` if the rows are whole blocks, else the
/// replacement `llama-quantize` picks (a 32-element format close in size),
/// else F16. Requested 32-element formats go straight to F16, as the converter
/// does for them.
pub fn compatible_type(requested: QuantType, row_len: u64) -> QuantType {
    let fits = |ty: QuantType| row_len.is_multiple_of(ty.block_size() as u64);
    if fits(requested) {
        return requested;
    }
    use QuantType as T;
    let replacement = match requested {
        T::IQ4XS | T::IQ1S | T::IQ1M | T::IQ2XXS | T::IQ2XS | T::IQ2S | T::IQ3XXS | T::IQ3S => {
            T::IQ4NL
        }
        T::Q2K | T::Q3K | T::TQ1_0 | T::TQ2_0 => T::Q4_0,
        T::Q4K => T::Q5_0,
        T::Q5K => T::Q5_1,
        T::Q6K => T::Q8_0,
        _ => T::F16,
    };
    if fits(replacement) {
        replacement
    } else {
        T::F16
    }
}

/// `general.file_type`: llama.cpp's `llama_ftype` for a file that is mostly
/// `ty`. A single K-quant type is the "_S" (small, uniform) variant.
pub fn file_type(ty: QuantType) -> u32 {
    use QuantType as T;
    match ty {
        T::F32 => 0,
        T::F16 => 1,
        T::Q4_0 => 2,
        T::Q4_1 => 3,
        T::Q8_0 => 7,
        T::Q5_0 => 8,
        T::Q5_1 => 9,
        T::Q2K => 10,
        T::Q3K => 11,
        T::Q4K => 14,
        T::Q5K => 16,
        T::Q6K => 18,
        T::IQ2XXS => 19,
        T::IQ2XS => 20,
        T::IQ3XXS => 23,
        T::IQ1S => 24,
        T::IQ4NL => 25,
        T::IQ3S => 26,
        T::IQ2S => 28,
        T::IQ4XS => 30,
        T::IQ1M => 31,
        T::BF16 => 32,
        // MXFP4_MOE: llama-quantize's only MXFP4 file type (see `tensors`
        // for its mix).
        T::MXFP4 => 38,
        T::TQ1_0 => 36,
        T::TQ2_0 => 37,
        // Not offered on the command line; "guessed" is what llama.cpp writes
        // when it cannot tell.
        _ => 1024,
    }
}

/// The types `--type` accepts: those the engine computes with.
pub fn parse_weight_type(name: &str) -> Result<QuantType, String> {
    match QuantType::from_name(name) {
        Some(ty) if ty.is_supported() => Ok(ty),
        _ => {
            let known: Vec<&str> = QuantType::all()
                .filter(|t| t.is_supported())
                .map(|t| t.name())
                .collect();
            Err(format!(
                "unknown weight type '{name}' (known: {})",
                known.join(", ")
            ))
        }
    }
}

/// Every tensor of the model in file order, with 2-D weights stored as
/// `requested` where their rows allow it. 1-D tensors stay F32, as llama.cpp
/// never quantizes them.
pub fn tensors(p: &Preset, requested: QuantType) -> Vec<TensorSpec> {
    // MXFP4 with experts is llama-quantize's MXFP4_MOE: the expert stacks
    // MXFP4, every other matrix Q8_0 (gpt-oss files are made so). Without
    // experts every matrix is MXFP4, as `--pure` would make it.
    let dense_type = match (requested, &p.moe) {
        (QuantType::MXFP4, Some(_)) => QuantType::Q8_0,
        _ => requested,
    };
    let typed = |ty_wanted: QuantType, name: String, n_in: u64, n_out: u64| {
        let ty = compatible_type(ty_wanted, n_in);
        TensorSpec {
            name,
            shape: vec![n_in, n_out],
            ty,
            fill: Fill::Matrix,
            fallback_from: (ty != ty_wanted).then_some(ty_wanted),
        }
    };
    let matrix = |name: String, n_in: u64, n_out: u64| typed(dense_type, name, n_in, n_out);
    let vector = |name: String, len: u64, fill: Fill| TensorSpec {
        name,
        shape: vec![len],
        ty: QuantType::F32,
        fill,
        fallback_from: None,
    };
    let q_dim = p.n_head * p.head_dim;
    let kv_dim = p.n_head_kv * p.head_dim;
    let mut out = Vec::new();

    // The converter emits generated tensors before the checkpoint's own.
    if let Some(scaling) = &p.rope_scaling {
        let factors = llama3_rope_factors(scaling, p.rope_base.into(), p.head_dim);
        let len = factors.len() as u64;
        out.push(vector(
            "rope_freqs.weight".into(),
            len,
            Fill::Fixed(factors),
        ));
    }
    out.push(matrix("token_embd.weight".into(), p.n_embd, p.n_vocab));
    for i in 0..p.n_layer {
        let blk = |t: &str| format!("blk.{i}.{t}");
        out.push(vector(blk("attn_norm.weight"), p.n_embd, Fill::Norm));
        if p.arch == Arch::Phi3 {
            out.push(matrix(blk("attn_qkv.weight"), p.n_embd, q_dim + 2 * kv_dim));
        } else {
            out.push(matrix(blk("attn_q.weight"), p.n_embd, q_dim));
            out.push(matrix(blk("attn_k.weight"), p.n_embd, kv_dim));
            out.push(matrix(blk("attn_v.weight"), p.n_embd, kv_dim));
        }
        let gpt_oss = p.arch == Arch::GptOss;
        let bias = if gpt_oss { Fill::WideBias } else { Fill::Bias };
        if p.arch.has_qkv_bias() {
            out.push(vector(blk("attn_q.bias"), q_dim, bias.clone()));
            out.push(vector(blk("attn_k.bias"), kv_dim, bias.clone()));
            out.push(vector(blk("attn_v.bias"), kv_dim, bias.clone()));
        }
        if p.arch.has_qk_norm() {
            out.push(vector(blk("attn_q_norm.weight"), p.head_dim, Fill::Norm));
            out.push(vector(blk("attn_k_norm.weight"), p.head_dim, Fill::Norm));
        }
        out.push(matrix(blk("attn_output.weight"), q_dim, p.n_embd));
        if gpt_oss {
            out.push(vector(blk("attn_output.bias"), p.n_embd, bias.clone()));
            out.push(vector(blk("attn_sinks.weight"), p.n_head, Fill::Sink));
        }
        if p.arch == Arch::Gemma3 {
            out.push(vector(
                blk("post_attention_norm.weight"),
                p.n_embd,
                Fill::Norm,
            ));
        }
        // gpt-oss's only norm before the experts has this name.
        let ffn_norm = if gpt_oss {
            "post_attention_norm.weight"
        } else {
            "ffn_norm.weight"
        };
        out.push(vector(blk(ffn_norm), p.n_embd, Fill::Norm));
        match &p.moe {
            // Gate and up in one matrix, gate first.
            None if p.arch == Arch::Phi3 => {
                out.push(matrix(blk("ffn_up.weight"), p.n_embd, 2 * p.n_ff));
                out.push(matrix(blk("ffn_down.weight"), p.n_ff, p.n_embd));
            }
            None => {
                out.push(matrix(blk("ffn_gate.weight"), p.n_embd, p.n_ff));
                out.push(matrix(blk("ffn_up.weight"), p.n_embd, p.n_ff));
                out.push(matrix(blk("ffn_down.weight"), p.n_ff, p.n_embd));
            }
            Some(moe) => {
                // The converter keeps the router in F32 and llama-quantize
                // leaves it so.
                out.push(TensorSpec {
                    name: blk("ffn_gate_inp.weight"),
                    shape: vec![p.n_embd, moe.n_expert],
                    ty: QuantType::F32,
                    fill: Fill::Router,
                    fallback_from: None,
                });
                let experts = |name: String, n_in: u64, n_out: u64| {
                    let mut t = typed(requested, name, n_in, n_out);
                    t.shape.push(moe.n_expert);
                    t
                };
                out.push(experts(blk("ffn_gate_exps.weight"), p.n_embd, moe.n_ff_exp));
                out.push(experts(blk("ffn_down_exps.weight"), moe.n_ff_exp, p.n_embd));
                out.push(experts(blk("ffn_up_exps.weight"), p.n_embd, moe.n_ff_exp));
                if let Some(n_sh) = moe.n_ff_shared {
                    out.push(vector(
                        blk("ffn_gate_inp_shexp.weight"),
                        p.n_embd,
                        Fill::Matrix,
                    ));
                    out.push(matrix(blk("ffn_gate_shexp.weight"), p.n_embd, n_sh));
                    out.push(matrix(blk("ffn_up_shexp.weight"), p.n_embd, n_sh));
                    out.push(matrix(blk("ffn_down_shexp.weight"), n_sh, p.n_embd));
                }
                if gpt_oss {
                    // One f32 row per expert (per router output).
                    let biases = |name: String, len: u64, n: u64| TensorSpec {
                        name,
                        shape: if n == 1 { vec![len] } else { vec![len, n] },
                        ty: QuantType::F32,
                        fill: if n == 1 { Fill::Router } else { Fill::WideBias },
                        fallback_from: None,
                    };
                    out.push(biases(blk("ffn_gate_inp.bias"), moe.n_expert, 1));
                    out.push(biases(
                        blk("ffn_gate_exps.bias"),
                        moe.n_ff_exp,
                        moe.n_expert,
                    ));
                    out.push(biases(blk("ffn_down_exps.bias"), p.n_embd, moe.n_expert));
                    out.push(biases(blk("ffn_up_exps.bias"), moe.n_ff_exp, moe.n_expert));
                }
            }
        }
        if p.arch == Arch::Gemma3 {
            out.push(vector(blk("post_ffw_norm.weight"), p.n_embd, Fill::Norm));
        }
    }
    out.push(vector("output_norm.weight".into(), p.n_embd, Fill::Norm));
    if !p.tied_embeddings {
        out.push(matrix("output.weight".into(), p.n_embd, p.n_vocab));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::find;

    /// Parameter counts published for the real models (tied embeddings counted
    /// once), computed from their shapes by their authors, not by this code.
    #[test]
    fn parameter_counts_match_the_real_models() {
        for (preset, published) in [
            ("qwen2-0.5b", 494_032_768u64),
            ("qwen3-0.6b", 596_049_920),
            ("llama3-1b", 1_235_814_400),
            ("llama2-7b", 6_738_415_616),
            ("qwen3-30b-a3b", 30_532_122_624),
            ("phi3-mini", 3_821_079_552),
        ] {
            let total: u64 = tensors(find(preset).unwrap(), QuantType::F16)
                .iter()
                .filter(|t| t.name != "rope_freqs.weight")
                .map(TensorSpec::n_elements)
                .sum();
            assert_eq!(total, published, "{preset}");
        }
    }

    #[test]
    fn fallbacks_follow_llama_quantize() {
        use QuantType as T;
        assert_eq!(compatible_type(T::Q4K, 896), T::Q5_0);
        assert_eq!(compatible_type(T::Q4K, 4864), T::Q4K);
        assert_eq!(compatible_type(T::Q5K, 896), T::Q5_1);
        assert_eq!(compatible_type(T::Q6K, 896), T::Q8_0);
        assert_eq!(compatible_type(T::Q3K, 64), T::Q4_0);
        assert_eq!(compatible_type(T::IQ4XS, 64), T::IQ4NL);
        assert_eq!(compatible_type(T::IQ2XXS, 896), T::IQ4NL);
        assert_eq!(compatible_type(T::IQ1M, 64), T::IQ4NL);
        assert_eq!(compatible_type(T::IQ3S, 176), T::F16);
        assert_eq!(compatible_type(T::TQ1_0, 896), T::Q4_0);
        assert_eq!(compatible_type(T::TQ2_0, 4864), T::TQ2_0);
        assert_eq!(compatible_type(T::Q8_0, 176), T::F16);
        assert_eq!(compatible_type(T::Q4K, 176), T::F16);
        assert_eq!(compatible_type(T::BF16, 176), T::BF16);
        // A 32-element type with nothing smaller to fall to: F16.
        assert_eq!(compatible_type(T::MXFP4, 2880), T::MXFP4);
        assert_eq!(compatible_type(T::MXFP4, 176), T::F16);
    }

    #[test]
    fn qwen2_k_quant_falls_back_only_where_rows_are_n_embd() {
        let specs = tensors(find("qwen2-0.5b").unwrap(), QuantType::Q4K);
        let down = specs
            .iter()
            .find(|t| t.name == "blk.0.ffn_down.weight")
            .unwrap();
        assert_eq!((down.ty, down.fallback_from), (QuantType::Q4K, None));
        let q = specs
            .iter()
            .find(|t| t.name == "blk.0.attn_q.weight")
            .unwrap();
        assert_eq!(
            (q.ty, q.fallback_from),
            (QuantType::Q5_0, Some(QuantType::Q4K))
        );
        let bias = specs
            .iter()
            .find(|t| t.name == "blk.0.attn_q.bias")
            .unwrap();
        assert_eq!(
            (bias.ty, bias.shape.as_slice()),
            (QuantType::F32, &[896u64][..])
        );
    }

    /// MXFP4 in a model with experts is llama-quantize's MXFP4_MOE.
    #[test]
    fn mxfp4_with_experts_is_mxfp4_moe() {
        let specs = tensors(find("tiny-gpt-oss").unwrap(), QuantType::MXFP4);
        let ty = |name: &str| specs.iter().find(|t| t.name == name).unwrap().ty;
        assert_eq!(ty("blk.0.ffn_up_exps.weight"), QuantType::MXFP4);
        assert_eq!(ty("blk.0.ffn_down_exps.weight"), QuantType::MXFP4);
        assert_eq!(ty("blk.0.attn_q.weight"), QuantType::Q8_0);
        assert_eq!(ty("output.weight"), QuantType::Q8_0);
        assert_eq!(ty("blk.0.ffn_gate_inp.weight"), QuantType::F32);
        let dense = tensors(find("tiny-llama").unwrap(), QuantType::MXFP4);
        assert!(dense
            .iter()
            .filter(|t| t.shape.len() == 2)
            .all(|t| t.ty == QuantType::MXFP4));
    }

    #[test]
    fn weight_type_names() {
        assert_eq!(parse_weight_type("q4_k"), Ok(QuantType::Q4K));
        assert_eq!(parse_weight_type("IQ4_XS"), Ok(QuantType::IQ4XS));
        assert_eq!(parse_weight_type("iq2_xxs"), Ok(QuantType::IQ2XXS));
        assert_eq!(parse_weight_type("TQ1_0"), Ok(QuantType::TQ1_0));
        assert_eq!(parse_weight_type("mxfp4"), Ok(QuantType::MXFP4));
        assert!(parse_weight_type("I8").is_err(), "not a weight type here");
        assert!(parse_weight_type("Q9_9").unwrap_err().contains("Q4_K"));
    }
}
