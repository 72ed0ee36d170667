//! The mixture-of-experts hyperparameters: how many experts each
//! feed-forward block has, how many a token uses, and how wide each is.
//!
//! These are read like every other key, then checked against the router and
//! expert tensors of the first block, since an expert count that disagrees
//! with them would make every expert offset wrong.

use super::config::{Keys, Shapes};
use super::{Arch, ModelError};

/// How a token's experts are chosen and weighted (llama.cpp's
/// `build_moe_ffn` with softmax gating, as Qwen3-MoE and Mixtral use).
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    pub n_expert: usize,
    /// Experts each token is routed to (top-k of the router's softmax).
    pub n_expert_used: usize,
    /// Width of one expert's feed-forward block.
    pub n_ff_exp: usize,
    /// The chosen experts' weights are divided by their sum
    /// (`norm_topk_prob` in the Hugging Face configs of these families).
    /// gpt-oss takes a softmax over the chosen experts' logits instead,
    /// which is the same quantity: the normalized softmax over all.
    pub normalize_weights: bool,
    pub activation: ExpertActivation,
    /// Width of the shared expert every token also runs (Qwen2-MoE), whose
    /// output is scaled by a sigmoid gate; `None` when there is none.
    pub n_ff_shared: Option<usize>,
}

/// The gate's activation inside each expert.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExpertActivation {
    /// silu(gate) * up.
    SwiGlu,
    /// gpt-oss's clamped form (see `Op::SwiGluOai`), with llama.cpp's
    /// constants.
    SwiGluOai { alpha: f32, limit: f32 },
}

/// gpt-oss's activation constants (llama.cpp's `LLM_FFN_SWIGLU_OAI_MOE`).
pub const OAI_ALPHA: f32 = 1.702;
pub const OAI_LIMIT: f32 = 7.0;

/// Most experts a token may use: every kernel keeps a token's choices in
/// registers or on the stack. Real models use 2 to 8.
pub const MAX_EXPERTS_USED: usize = 64;

/// The router: one row of `n_embd` weights per expert.
pub const ROUTER: &str = "ffn_gate_inp.weight";
/// Experts stacked along ggml's third dimension.
pub const GATE_EXPS: &str = "ffn_gate_exps.weight";
pub const UP_EXPS: &str = "ffn_up_exps.weight";
pub const DOWN_EXPS: &str = "ffn_down_exps.weight";
/// The shared expert (Qwen2-MoE) and its gate: one weight per `n_embd`.
pub const GATE_INP_SHEXP: &str = "ffn_gate_inp_shexp.weight";
pub const GATE_SHEXP: &str = "ffn_gate_shexp.weight";
pub const UP_SHEXP: &str = "ffn_up_shexp.weight";
pub const DOWN_SHEXP: &str = "ffn_down_shexp.weight";

/// The shared expert's width: `expert_shared_feed_forward_length`, checked
/// against its up projection, or that tensor's rows.
fn shared_width(keys: &Keys, shapes: &Shapes, n_embd: usize) -> Result<usize, ModelError> {
    let up = shapes.matrix(&format!("blk.0.{UP_SHEXP}"))?;
    let key = "expert_shared_feed_forward_length";
    match keys.size(key, 1)? {
        Some(v) if up.shape.first() == Some(&(n_embd as u64)) => {
            shapes.expect(up, 1, v, || keys.name(key))
        }
        Some(v) => Ok(v),
        None => shapes.dim(up, 1, "the shared expert width"),
    }
}

impl MoeConfig {
    /// `None` for a dense model. An architecture that is always a mixture
    /// must say how many experts it has.
    pub(super) fn from_keys(
        keys: &Keys,
        shapes: &Shapes,
        arch: Arch,
        n_embd: usize,
    ) -> Result<Option<MoeConfig>, ModelError> {
        let n_expert = keys.size("expert_count", 0)?.unwrap_or(0);
        let used = keys.size("expert_used_count", 0)?.unwrap_or(0);
        if n_expert == 0 {
            if arch.requires_experts() {
                return Err(keys.missing("expert_count"));
            }
            if used > 0 {
                return Err(ModelError::Contradiction(format!(
                    "{} is {used} but {} is 0",
                    keys.name("expert_used_count"),
                    keys.name("expert_count")
                )));
            }
            return Ok(None);
        }
        if used == 0 || used > n_expert {
            return Err(ModelError::BadValue {
                key: keys.name("expert_used_count"),
                value: used.to_string(),
                expected: format!("between 1 and {} ({n_expert})", keys.name("expert_count")),
            });
        }
        if used > MAX_EXPERTS_USED {
            return Err(ModelError::Unsupported {
                key: keys.name("expert_used_count"),
                value: used.to_string(),
                feature: format!("more than {MAX_EXPERTS_USED} experts per token"),
            });
        }
        let router = shapes.matrix(&format!("blk.0.{ROUTER}"))?;
        if router.shape.first() == Some(&(n_embd as u64)) {
            shapes.expect(router, 1, n_expert, || keys.name("expert_count"))?;
        }
        let up = shapes.experts(&format!("blk.0.{UP_EXPS}"))?;
        if up.shape.first() == Some(&(n_embd as u64)) {
            shapes.expect(up, 2, n_expert, || keys.name("expert_count"))?;
        }
        let n_ff_exp = match keys.size("expert_feed_forward_length", 1)? {
            Some(v) => shapes.expect(up, 1, v, || keys.name("expert_feed_forward_length"))?,
            None => shapes.dim(up, 1, "the expert width")?,
        };
        Ok(Some(MoeConfig {
            n_expert,
            n_expert_used: used,
            n_ff_exp,
            // llama.cpp's qwen2moe graph leaves the chosen weights as the
            // softmax gave them.
            normalize_weights: arch != Arch::Qwen2Moe,
            n_ff_shared: match arch {
                Arch::Qwen2Moe => Some(shared_width(keys, shapes, n_embd)?),
                _ => None,
            },
            activation: match arch {
                Arch::GptOss => ExpertActivation::SwiGluOai {
                    alpha: OAI_ALPHA,
                    limit: OAI_LIMIT,
                },
                _ => ExpertActivation::SwiGlu,
            },
        }))
    }
}
