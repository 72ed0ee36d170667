//! Llama 2, Llama 3 (with `rope_freqs` scaling), Mistral 7B and Mixtral:
//! the graph every other family is described against ([`Family::BASE`]).
//!
//! Mixtral is a llama file with experts (told by `expert_count`, read in
//! `moe.rs`). Its `feed_forward_length` is the experts' width, and
//! llama.cpp creates the expert tensors with it, so a file whose experts
//! are another width is refused here; other MoE families' converters write
//! the checkpoint's dense width there instead, which is ignored.
//!
//! Mistral 7B v0.1's files name an `attention.sliding_window` that
//! llama.cpp does not apply, so it is not read.

use super::super::super::ModelError;
use super::super::keys::Keys;
use super::super::ModelConfig;
use super::Family;

pub(super) const FAMILY: Family = Family {
    name: "llama",
    read,
    ..Family::BASE
};

fn read(keys: &Keys, c: &mut ModelConfig) -> Result<(), ModelError> {
    let Some(moe) = &c.moe else {
        return Ok(());
    };
    match keys.per_layer_size("feed_forward_length", 1, c.n_layer)? {
        Some(v) if v != moe.n_ff_exp => Err(ModelError::Contradiction(format!(
            "{} is {v} but the experts are {} wide",
            keys.name("feed_forward_length"),
            moe.n_ff_exp
        ))),
        _ => Ok(()),
    }
}
