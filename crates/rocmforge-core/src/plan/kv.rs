//! KV cache layout: one region holding K and V for every layer.

use crate::model::ModelConfig;

/// K and V of layer `l` are `n_ctx` rows of `kv_dim` f16 values each; all
/// layers back to back in one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub n_layer: usize,
    pub n_ctx: usize,
    pub kv_dim: usize,
}

impl KvLayout {
    pub fn new(cfg: &ModelConfig, n_ctx: usize) -> KvLayout {
        KvLayout {
            n_layer: cfg.n_layer,
            n_ctx,
            kv_dim: cfg.kv_dim(),
        }
    }

    /// Elements in one layer's K (or V) block.
    pub fn block_elems(&self) -> usize {
        self.n_ctx * self.kv_dim
    }

    /// Element offset of layer `l`'s K block; its V block follows it.
    pub fn k_offset(&self, layer: usize) -> usize {
        2 * layer * self.block_elems()
    }

    pub fn v_offset(&self, layer: usize) -> usize {
        self.k_offset(layer) + self.block_elems()
    }

    pub fn total_elems(&self) -> usize {
        2 * self.n_layer * self.block_elems()
    }

    /// Bytes with f16 elements, as the reference keeps its cache.
    pub fn bytes(&self) -> usize {
        self.total_elems() * 2
    }
}
