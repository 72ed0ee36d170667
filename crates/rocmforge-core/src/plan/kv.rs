//! KV cache layout: one region holding K and V for every layer.
//!
//! A layer keeps `n_ctx` positions, except a sliding-window layer, which
//! keeps a ring of `window + n_batch - 1`: position `p` lives in slot
//! `p % capacity`. A step stores its own K and V rows before any of its
//! tokens attend, and its first token reaches back `window - 1` positions,
//! so a ring that size is never overwritten under a read. Gemma 3 at a
//! 32k context keeps 52 of its 62 layers in 1.5k slots instead of 32k,
//! as llama.cpp's default (non-`--swa-full`) cache does.
//!
//! Several sequences (a batched session's slots, `rocmforge serve -np`)
//! each keep a region of their own in every layer's block: sequence `s`'s
//! rows are `s * capacity .. (s + 1) * capacity`, so a sequence is laid out
//! exactly as a one-sequence cache and a kernel reaches it by offsetting
//! its block. We chose regions per sequence over llama.cpp's unified cache
//! of cells tagged by sequence because every attention kernel then reads
//! one contiguous run of rows (no per-cell mask), a slot's positions
//! are its rows (nothing to defragment), and `-c` split over the slots is
//! what llama-server's default (`--kv-unified` off) gives its users.
//!
//! K and V rows are stored as [`KvType`]: f16 (llama.cpp's default), or
//! ggml's Q8_0 / Q4_0 blocks of 32 values (`-ctk` / `-ctv`), a row of
//! `kv_dim` values being `kv_dim / 32` blocks back to back, so a head of
//! a multiple of 32 dimensions is whole blocks.

use crate::model::ModelConfig;
use crate::quant::QuantType;

/// Alignment of each layer's K and V block in the region, in bytes: the
/// GPU kernels read f16 rows in 16-byte units.
const BLOCK_ALIGN: usize = 16;

/// How K or V values are kept in the cache, as llama.cpp's
/// `--cache-type-k` / `--cache-type-v`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    #[default]
    F16,
    Q8_0,
    Q4_0,
}

impl KvType {
    pub const ALL: [KvType; 3] = [KvType::F16, KvType::Q8_0, KvType::Q4_0];

    /// The name llama.cpp's flags and llama-bench's `type_k` use.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    /// A cache type by llama.cpp's name (any case); the error lists those
    /// this build takes.
    pub fn parse(s: &str) -> Result<KvType, String> {
        KvType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = KvType::ALL.iter().map(|t| t.name()).collect();
                format!("unknown cache type '{s}' (expected {})", names.join(", "))
            })
    }

    /// The block format the values are stored in.
    pub fn quant_type(self) -> QuantType {
        match self {
            KvType::F16 => QuantType::F16,
            KvType::Q8_0 => QuantType::Q8_0,
            KvType::Q4_0 => QuantType::Q4_0,
        }
    }

    /// Values per block: 1 for f16, 32 for the quantized types.
    pub fn block(self) -> usize {
        self.quant_type().block_size()
    }

    /// Bytes of a row of `n` values (`n` a multiple of [`Self::block`]).
    pub fn row_bytes(self, n: usize) -> usize {
        n / self.block() * self.quant_type().type_size()
    }

    pub fn is_quantized(self) -> bool {
        self != KvType::F16
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The cache's K and V types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KvTypes {
    pub k: KvType,
    pub v: KvType,
}

impl KvTypes {
    /// Why a model with heads of `head_dim` values cannot keep these
    /// types: a quantized row must be whole blocks per head.
    pub fn check(self, head_dim: usize) -> Result<(), String> {
        for (flag, t) in [("--cache-type-k", self.k), ("--cache-type-v", self.v)] {
            if !head_dim.is_multiple_of(t.block()) {
                return Err(format!(
                    "{flag} {t} needs a head size that is a multiple of {}; this model's is {head_dim}",
                    t.block()
                ));
            }
        }
        Ok(())
    }
}

/// Layer `l`'s K and V blocks are `capacity(l)` rows of `kv_dim` values
/// each, stored as the [`KvTypes`]; all layers back to back in one
/// allocation, each block [`BLOCK_ALIGN`]-aligned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub n_layer: usize,
    /// Positions of one sequence.
    pub n_ctx: usize,
    /// Sequences, each with its own region of every layer's block.
    pub n_seq: usize,
    pub kv_dim: usize,
    pub types: KvTypes,
    /// Positions each layer keeps.
    capacity: Vec<usize>,
    /// Byte offset of each layer's K block; its V block follows it.
    offset: Vec<u128>,
    /// Bytes of the whole region (u128: absurd contexts are refused by
    /// size, not by overflow).
    total: u128,
}

impl KvLayout {
    /// The f16 layout for a context of `n_ctx` positions filled by steps
    /// of at most `n_batch` tokens.
    pub fn new(cfg: &ModelConfig, n_ctx: usize, n_batch: usize) -> KvLayout {
        KvLayout::typed(cfg, n_ctx, n_batch, KvTypes::default())
    }

    /// [`Self::new`] with K and V kept as `types`.
    pub fn typed(cfg: &ModelConfig, n_ctx: usize, n_batch: usize, types: KvTypes) -> KvLayout {
        KvLayout::sequences(cfg, n_ctx, n_batch, types, 1)
    }

    /// [`Self::typed`] for `n_seq` sequences of `n_ctx` positions each.
    pub fn sequences(
        cfg: &ModelConfig,
        n_ctx: usize,
        n_batch: usize,
        types: KvTypes,
        n_seq: usize,
    ) -> KvLayout {
        let n_seq = n_seq.max(1);
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
        let align = |b: u128| b.next_multiple_of(BLOCK_ALIGN as u128);
        let (k_row, v_row) = (
            types.k.row_bytes(kv_dim) as u128,
            types.v.row_bytes(kv_dim) as u128,
        );
        let mut offset = Vec::with_capacity(capacity.len());
        let mut at = 0u128;
        for &c in &capacity {
            let rows = c as u128 * n_seq as u128;
            offset.push(at);
            at += align(rows * k_row) + align(rows * v_row);
        }
        KvLayout {
            n_layer: cfg.n_layer,
            n_ctx,
            n_seq,
            kv_dim,
            types,
            capacity,
            offset,
            total: at,
        }
    }

    /// Positions layer `l` keeps per sequence: position `p` is in row
    /// `p % capacity` of the sequence's region.
    pub fn capacity(&self, layer: usize) -> usize {
        self.capacity[layer]
    }

    /// The row of layer `l`'s block that holds position `pos` of sequence
    /// `seq`.
    pub fn cell(&self, layer: usize, seq: usize, pos: usize) -> usize {
        seq * self.capacity[layer] + pos % self.capacity[layer]
    }

    /// Bytes of one sequence's region of layer `l`'s K block.
    pub fn k_seq_bytes(&self, layer: usize) -> usize {
        self.capacity[layer] * self.k_row_bytes()
    }

    /// Bytes of one sequence's region of layer `l`'s V block.
    pub fn v_seq_bytes(&self, layer: usize) -> usize {
        self.capacity[layer] * self.v_row_bytes()
    }

    /// Bytes of one K row (`kv_dim` values).
    pub fn k_row_bytes(&self) -> usize {
        self.types.k.row_bytes(self.kv_dim)
    }

    /// Bytes of one V row.
    pub fn v_row_bytes(&self) -> usize {
        self.types.v.row_bytes(self.kv_dim)
    }

    /// Bytes of layer `l`'s K block (every sequence's region).
    pub fn k_block_bytes(&self, layer: usize) -> usize {
        self.n_seq * self.k_seq_bytes(layer)
    }

    /// Bytes of layer `l`'s V block.
    pub fn v_block_bytes(&self, layer: usize) -> usize {
        self.n_seq * self.v_seq_bytes(layer)
    }

    /// Byte offset of layer `l`'s K block. Only a layout whose
    /// [`Self::bytes_u128`] fits memory is ever allocated, so offsets of
    /// a real cache fit `usize`.
    pub fn k_at(&self, layer: usize) -> usize {
        self.offset[layer] as usize
    }

    /// Byte offset of layer `l`'s V block, after its K block.
    pub fn v_at(&self, layer: usize) -> usize {
        (self.offset[layer]
            + (self.k_block_bytes(layer) as u128).next_multiple_of(BLOCK_ALIGN as u128))
            as usize
    }

    /// Bytes of the whole cache (saturating; see [`Self::bytes_u128`]).
    pub fn bytes(&self) -> usize {
        usize::try_from(self.total).unwrap_or(usize::MAX)
    }

    /// [`Self::bytes`] without overflow, for size checks of absurd contexts.
    pub fn bytes_u128(&self) -> u128 {
        self.total
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
        // 11 rows of 64 bytes: 704, already 16-aligned.
        assert_eq!(l.k_at(1), 2 * 11 * 64);
        assert_eq!(l.v_at(1), l.k_at(1) + 1000 * 64);
        assert_eq!(l.k_at(2), l.v_at(1) + 1000 * 64);
        assert_eq!(l.bytes(), 2 * (11 + 1000 + 11) * 64);
        assert_eq!(l.bytes_u128(), l.bytes() as u128);
        assert_eq!((l.cell(0, 0, 23), l.cell(1, 0, 23)), (1, 23));
    }

    #[test]
    fn a_ring_never_exceeds_the_context() {
        let l = KvLayout::new(&config(Some(1024), vec![true, false]), 256, 512);
        assert_eq!((l.capacity(0), l.capacity(1)), (256, 256));
        let none = KvLayout::new(&config(None, vec![false, false]), 256, 512);
        assert_eq!(none.bytes(), 2 * 2 * 256 * 32 * 2);
    }

    #[test]
    fn quantized_rows_are_whole_blocks() {
        let types = KvTypes {
            k: KvType::Q8_0,
            v: KvType::Q4_0,
        };
        let l = KvLayout::typed(&config(Some(8), vec![true, false]), 100, 4, types);
        // kv_dim 32: one block a row, 34 and 18 bytes.
        assert_eq!((l.k_row_bytes(), l.v_row_bytes()), (34, 18));
        // Layer 0: a ring of 11 rows, 374 bytes of K padded to 384.
        assert_eq!(l.v_at(0), 384);
        assert_eq!(l.k_at(1), 384 + (11 * 18usize).next_multiple_of(16));
        assert_eq!(l.v_at(1) - l.k_at(1), (100 * 34usize).next_multiple_of(16));
        assert!(l.k_at(1).is_multiple_of(16) && l.v_at(1).is_multiple_of(16));
        assert_eq!(l.bytes(), l.v_at(1) + (100 * 18usize).next_multiple_of(16));
        assert_eq!(KvTypes::default().check(80), Ok(()));
        assert!(types.check(80).unwrap_err().contains("--cache-type-k q8_0"));
        assert_eq!(types.check(64), Ok(()));
    }

    #[test]
    fn each_sequence_has_a_region_of_every_block() {
        let cfg = config(Some(8), vec![true, false]);
        let one = KvLayout::new(&cfg, 100, 4);
        let three = KvLayout::sequences(&cfg, 100, 4, KvTypes::default(), 3);
        assert_eq!(
            (three.n_seq, three.capacity(0), three.capacity(1)),
            (3, 11, 100)
        );
        assert_eq!(three.k_block_bytes(0), 3 * one.k_block_bytes(0));
        assert_eq!(three.k_seq_bytes(1), one.k_block_bytes(1));
        assert_eq!(three.v_at(0), three.k_at(0) + 3 * 11 * 64);
        assert_eq!(three.k_at(1), three.v_at(0) + 3 * 11 * 64);
        assert_eq!(three.bytes(), 3 * one.bytes());
        // Sequence 2's position 12 of the ring layer: row 2 * 11 + 1.
        assert_eq!((three.cell(0, 2, 12), three.cell(1, 2, 12)), (23, 212));
        assert_eq!(three.cell(1, 0, 5), one.cell(1, 0, 5));
    }

    #[test]
    fn cache_types_parse_by_llama_cpp_name() {
        assert_eq!(KvType::parse("q8_0"), Ok(KvType::Q8_0));
        assert_eq!(KvType::parse("F16"), Ok(KvType::F16));
        let e = KvType::parse("q5_1").unwrap_err();
        assert!(e.contains("f16, q8_0, q4_0"), "{e}");
    }
}
