//! KV cache layout: one region holding K and V for every layer.
//!
//! A layer keeps `n_ctx` positions, except a sliding-window layer, which
//! keeps a ring of `window + n_batch - 1`: position `p` lives in slot
//! `p % capacity`. A step stores its own K and V rows before any of its
//! tokens attend, and its first token reaches back `window - 1` positions,
//! so a ring that size is never overwritten under a read. Gemma 3 at a
//! 32k context keeps 52 of its 62 layers in 1.5k slots instead of 32k,
//! as llama.cpp's default (non-`--swa-full`) cache does.

use crate::model::ModelConfig;

/// K and V of layer `l` are `capacity(l)` rows of `kv_dim` f16 values each;
/// all layers back to back in one allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub n_layer: usize,
    pub n_ctx: usize,
    pub kv_dim: usize,
    /// Positions each layer keeps.
    capacity: Vec<usize>,
    /// Element offset of each layer's K block.
    offset: Vec<usize>,
}

impl KvLayout {
    /// The layout for a context of `n_ctx` positions filled by steps of at
    /// most `n_batch` tokens.
    pub fn new(cfg: &ModelConfig, n_ctx: usize, n_batch: usize) -> KvLayout {
        let ring = cfg
            .sliding_window
            .map(|w| w.saturating_add(n_batch.max(1) - 1).min(n_ctx));
        let capacity: Vec<usize> = (0..cfg.n_layer)
            .map(|l| match (ring, cfg.local_layers.get(l)) {
                (Some(r), Some(true)) => r,
                _ => n_ctx,
            })
            .collect();
        let kv_dim = cfg.kv_dim();
        let mut offset = Vec::with_capacity(capacity.len());
        let mut at = 0usize;
        for &c in &capacity {
            offset.push(at);
            at = at.saturating_add(c.saturating_mul(kv_dim).saturating_mul(2));
        }
        KvLayout {
            n_layer: cfg.n_layer,
            n_ctx,
            kv_dim,
            capacity,
            offset,
        }
    }

    /// Positions layer `l` keeps: position `p` is in row `p % capacity`.
    pub fn capacity(&self, layer: usize) -> usize {
        self.capacity[layer]
    }

    /// The row of layer `l`'s block that holds position `pos`.
    pub fn slot(&self, layer: usize, pos: usize) -> usize {
        pos % self.capacity[layer]
    }

    /// Elements in layer `l`'s K (or V) block.
    pub fn block_elems(&self, layer: usize) -> usize {
        self.capacity[layer] * self.kv_dim
    }

    /// Element offset of layer `l`'s K block; its V block follows it.
    pub fn k_offset(&self, layer: usize) -> usize {
        self.offset[layer]
    }

    pub fn v_offset(&self, layer: usize) -> usize {
        self.k_offset(layer) + self.block_elems(layer)
    }

    pub fn total_elems(&self) -> usize {
        self.capacity
            .iter()
            .fold(0usize, |t, &c| t.saturating_add(2 * c * self.kv_dim))
    }

    /// Bytes with f16 elements, as the reference keeps its cache.
    pub fn bytes(&self) -> usize {
        self.total_elems().saturating_mul(2)
    }

    /// [`Self::bytes`] without overflow, for size checks of absurd contexts.
    pub fn bytes_u128(&self) -> u128 {
        self.capacity
            .iter()
            .map(|&c| 2 * 2 * c as u128 * self.kv_dim as u128)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Arch, ModelConfig};

    fn config(window: Option<usize>, local: Vec<bool>) -> ModelConfig {
        ModelConfig {
            arch: Arch::Gemma3,
            n_vocab: 16,
            n_embd: 64,
            n_layer: local.len(),
            n_head: 2,
            n_head_kv: 1,
            head_dim: 32,
            n_ff: 64,
            n_ctx_train: 4096,
            rms_eps: 1e-6,
            rope_neox: true,
            n_rot: 32,
            rope_freq_base: 1e4,
            rope_freq_scale: 1.0,
            rope_yarn_orig_ctx: None,
            rope_attn_factor: 1.0,
            rope_yarn_beta: (32.0, 1.0),
            rope_yarn_log_mul: None,
            attn_temperature: None,
            moe: None,
            sliding_window: window,
            local_layers: local,
            rope_freq_base_local: 1e4,
            rope_freq_scale_local: 1.0,
            embed_scale: None,
            gelu_ffn: false,
            attention_scale: 1.0,
        }
    }

    #[test]
    fn window_layers_keep_a_ring() {
        let l = KvLayout::new(&config(Some(8), vec![true, false, true]), 1000, 4);
        assert_eq!(
            (l.capacity(0), l.capacity(1), l.capacity(2)),
            (11, 1000, 11)
        );
        assert_eq!(l.k_offset(1), 2 * 11 * 32);
        assert_eq!(l.v_offset(1), l.k_offset(1) + 1000 * 32);
        assert_eq!(l.k_offset(2), l.v_offset(1) + 1000 * 32);
        assert_eq!(l.total_elems(), 2 * (11 + 1000 + 11) * 32);
        assert_eq!(l.bytes_u128(), l.bytes() as u128);
        assert_eq!((l.slot(0, 23), l.slot(1, 23)), (1, 23));
    }

    #[test]
    fn a_ring_never_exceeds_the_context() {
        let l = KvLayout::new(&config(Some(1024), vec![true, false]), 256, 512);
        assert_eq!((l.capacity(0), l.capacity(1)), (256, 256));
        let none = KvLayout::new(&config(None, vec![false, false]), 256, 512);
        assert_eq!(none.total_elems(), 2 * 2 * 256 * 32);
    }
}
