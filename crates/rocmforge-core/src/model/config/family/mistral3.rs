//! Mistral 3 (Mistral Small 3.x, Ministral 3, Magistral as converted from
//! their multimodal checkpoints): llama's graph with YaRN's parameters from
//! the file and, for Ministral 3, Llama 4's attention temperature (Q scaled
//! by position beyond the original context).
//!
//! The rules are llama.cpp's `LLM_ARCH_MISTRAL3` hyperparameters
//! (`src/llama-model.cpp`, `load_hparams`), the one family here whose YaRN
//! ramp bounds and magnitude divisor come from the file rather than
//! llama.cpp's defaults (32, 1, none), and whose attention temperature
//! steps by YaRN's original context (the trained one without YaRN).

use super::super::super::ModelError;
use super::super::keys::{Keys, FINITE};
use super::super::{AttnTemperature, ModelConfig};
use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "mistral3",
    read,
    ..Family::BASE
};

fn read(keys: &Keys, c: &mut ModelConfig) -> Result<(), ModelError> {
    let (beta_fast, beta_slow) = c.rope_yarn_beta;
    c.rope_yarn_beta = (
        keys.float("rope.scaling.yarn_beta_fast", FINITE, |_| true)?
            .unwrap_or(beta_fast),
        keys.float("rope.scaling.yarn_beta_slow", FINITE, |_| true)?
            .unwrap_or(beta_slow),
    );
    c.rope_yarn_log_mul = keys
        .float("rope.scaling.yarn_log_multiplier", FINITE, |_| true)?
        .filter(|&v| v != 0.0);
    let floor = c.rope_yarn_orig_ctx.unwrap_or(c.n_ctx_train);
    c.attn_temperature = keys
        .float("attention.temperature_scale", FINITE, |_| true)?
        .filter(|&s| s != 0.0)
        .map(|scale| AttnTemperature { scale, floor });
    Ok(())
}
