//! The sizes every family reads (layers, width, heads, head size, RoPE
//! dimensions, vocabulary, feed-forward width), each checked against the
//! tensors of the first block and the embedding table.
//!
//! Where a key is optional, the default is llama.cpp's: the head size is
//! `n_embd / n_head`, RoPE rotates the whole head, and the vocabulary and
//! feed-forward width are read off the tensors, as llama.cpp infers them
//! when converters leave the keys out.

use crate::gguf::{GgufFile, GgufValue};

use super::super::moe::MoeConfig;
use super::super::ModelError;
use super::keys::{Keys, TOKENS_KEY};
use super::shapes::Shapes;
use super::Arch;

/// The sizes of a model, agreed by its keys and tensors.
pub(super) struct Dims {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_rot: usize,
    pub n_vocab: usize,
    pub n_ff: usize,
    pub moe: Option<MoeConfig>,
}

impl Dims {
    pub(super) fn read(file: &GgufFile, keys: &Keys, arch: Arch) -> Result<Dims, ModelError> {
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
        let (n_head, n_head_kv, head_dim) = heads(keys, n_layer, n_embd)?;
        let rope_dims = keys.size("rope.dimension_count", 2)?;
        let n_rot = rope_dims.unwrap_or(head_dim);
        if !n_rot.is_multiple_of(2) || n_rot > head_dim {
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
        let head_count = keys.name("attention.head_count");
        let head_count_kv = keys.name("attention.head_count_kv");
        let q_what = || format!("{head_count} × head size ({n_head} × {head_dim})");
        shapes.expect_rows("blk.0.attn_q.weight", n_embd, n_head * head_dim, q_what)?;
        let kv_what = || format!("{head_count_kv} × head size ({n_head_kv} × {head_dim})");
        shapes.expect_rows("blk.0.attn_k.weight", n_embd, n_head_kv * head_dim, kv_what)?;
        let qkv_what = || {
            format!(
                "({head_count} + 2 × {head_count_kv}) × head size ({n_head} + 2 × {n_head_kv}) × {head_dim}",
            )
        };
        let qkv_rows = (n_head + 2 * n_head_kv) * head_dim;
        shapes.expect_rows("blk.0.attn_qkv.weight", n_embd, qkv_rows, qkv_what)?;

        let moe = MoeConfig::from_keys(keys, &shapes, arch, n_embd)?;
        let dense_ff = keys.per_layer_size("feed_forward_length", 1, n_layer)?;
        let ffn_up = "blk.0.ffn_up.weight";
        let parts = arch.ffn_up_parts();
        let n_ff = match (&moe, dense_ff) {
            // `feed_forward_length` of a MoE file is a family's business
            // (Mixtral's is the expert width, checked in `family/llama.rs`;
            // Qwen3-MoE's the checkpoint's dense width, which no tensor has).
            (Some(moe), _) => moe.n_ff_exp,
            (None, Some(v)) => {
                let what = || match parts {
                    1 => keys.name("feed_forward_length"),
                    _ => format!("{parts} × {}", keys.name("feed_forward_length")),
                };
                shapes.expect_rows(ffn_up, n_embd, v * parts, what)? / parts
            }
            (None, None) => shapes.dim(shapes.matrix(ffn_up)?, 1, "n_ff")? / parts,
        };
        Ok(Dims {
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            n_rot,
            n_vocab,
            n_ff,
            moe,
        })
    }
}

/// Query heads, KV heads (default: as many), and the head size of Q and K
/// (default: `n_embd / n_head`), which V must share.
fn heads(keys: &Keys, n_layer: usize, n_embd: usize) -> Result<(usize, usize, usize), ModelError> {
    let n_head = keys
        .per_layer_size("attention.head_count", 1, n_layer)?
        .ok_or(keys.missing("attention.head_count"))?;
    let n_head_kv = keys
        .per_layer_size("attention.head_count_kv", 1, n_layer)?
        .unwrap_or(n_head);
    if !n_head.is_multiple_of(n_head_kv) {
        return Err(ModelError::Contradiction(format!(
            "{} ({n_head}) is not a multiple of {} ({n_head_kv})",
            keys.name("attention.head_count"),
            keys.name("attention.head_count_kv")
        )));
    }
    let head_dim = match keys.size("attention.key_length", 1)? {
        Some(d) => d,
        None if n_embd.is_multiple_of(n_head) => n_embd / n_head,
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
    Ok((n_head, n_head_kv, head_dim))
}
