//! The model's weight tensors, located in the GGUF file and checked against the
//! config before any backend sees them.

use crate::gguf::GgufFile;
use crate::quant::QuantType;

use super::{moe, Arch, ModelConfig, ModelError};

/// Index into [`ModelWeights::table`].
pub type WeightId = usize;

/// Region offsets are aligned so every weight starts on a boundary any device
/// load instruction accepts.
pub const WEIGHT_ALIGN: u64 = 256;

/// One weight tensor: where it is in the file and where it goes in the single
/// device weight region.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightRef {
    pub name: String,
    pub ty: QuantType,
    /// Elements per row (ggml ne0: the contiguous dimension).
    pub cols: usize,
    /// Number of rows (1 for vectors), of all experts together for a stack
    /// of experts.
    pub rows: usize,
    /// Matrices stacked along ggml's third dimension (experts), 1 for a
    /// plain weight. Expert `e` is rows `e * rows / experts..`, contiguous,
    /// since every quant block lies within one row.
    pub experts: usize,
    /// Absolute byte offset of the data in the file.
    pub file_offset: u64,
    pub n_bytes: u64,
    /// Byte offset in the backend's weight region.
    pub region_offset: u64,
}

impl WeightRef {
    pub fn row_bytes(&self) -> usize {
        (self.n_bytes / self.rows as u64) as usize
    }

    /// Rows of one expert (all rows for a plain weight).
    pub fn expert_rows(&self) -> usize {
        self.rows / self.experts
    }
}

/// Weights of one transformer block.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub attn_norm: WeightId,
    pub wq: WeightId,
    pub wk: WeightId,
    pub wv: WeightId,
    pub wo: WeightId,
    pub bq: Option<WeightId>,
    pub bk: Option<WeightId>,
    pub bv: Option<WeightId>,
    pub q_norm: Option<WeightId>,
    pub k_norm: Option<WeightId>,
    pub ffn_norm: WeightId,
    pub ffn: FfnWeights,
    /// gpt-oss's attention-output bias and per-head attention sinks.
    pub bo: Option<WeightId>,
    pub attn_sinks: Option<WeightId>,
    /// Gemma's norms of the attention output and of the feed-forward
    /// output, before each residual add.
    pub attn_post_norm: Option<WeightId>,
    pub ffn_post_norm: Option<WeightId>,
}

/// A block's feed-forward weights: one SwiGLU, or a routed mixture of them.
#[derive(Clone, Debug)]
pub enum FfnWeights {
    Dense {
        gate: WeightId,
        up: WeightId,
        down: WeightId,
    },
    Moe {
        /// `n_expert` rows of `n_embd`: the router's logits.
        router: WeightId,
        /// Stacks of `n_expert` matrices (see [`WeightRef::experts`]).
        gate_exps: WeightId,
        up_exps: WeightId,
        down_exps: WeightId,
        /// gpt-oss's biases of the router and of each expert.
        biases: Option<ExpertBiases>,
        shared: Option<SharedExpert>,
    },
}

/// Qwen2-MoE's shared expert: a SwiGLU block every token runs, scaled by
/// `sigmoid(gate_inp · x)`.
#[derive(Clone, Copy, Debug)]
pub struct SharedExpert {
    /// One row of `n_embd` (f32): the gate's logit.
    pub gate_inp: WeightId,
    pub gate: WeightId,
    pub up: WeightId,
    pub down: WeightId,
}

/// Biases of a mixture (all f32): the router's (`n_expert` values) and one
/// row per expert of each projection's.
#[derive(Clone, Copy, Debug)]
pub struct ExpertBiases {
    pub router: WeightId,
    pub gate: WeightId,
    pub up: WeightId,
    pub down: WeightId,
}

#[derive(Clone, Debug)]
pub struct ModelWeights {
    pub table: Vec<WeightRef>,
    pub token_embd: WeightId,
    pub output_norm: WeightId,
    /// The same id as `token_embd` when the model ties its embeddings.
    pub output: WeightId,
    /// Llama 3 frequency factors for RoPE scaling.
    pub rope_freqs: Option<WeightId>,
    pub layers: Vec<LayerWeights>,
    /// Bytes of the packed weight region (all of `table`, aligned).
    pub region_bytes: u64,
}

impl ModelWeights {
    pub fn get(&self, id: WeightId) -> &WeightRef {
        &self.table[id]
    }

    pub fn from_gguf(file: &GgufFile, cfg: &ModelConfig) -> Result<ModelWeights, ModelError> {
        let mut b = Builder {
            file,
            table: Vec::new(),
            region: 0,
        };
        let (e, q, kv, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
        let token_embd = b.matrix("token_embd.weight", e, cfg.n_vocab)?;
        let output_norm = b.vector("output_norm.weight", e)?;
        let output = match file.tensor("output.weight") {
            Some(_) => b.matrix("output.weight", e, cfg.n_vocab)?,
            None => token_embd,
        };
        // Tensors that change the computation but that this graph does not
        // apply; running without them would silently be wrong. Phi-3.5 /
        // Phi-4-mini (128k) scale RoPE per frequency by the factors; the
        // feed-forward biases are optional in llama.cpp's Mistral 3 graph.
        const UNAPPLIED: &[(&str, &str)] = &[
            (
                "rope_factors_long.weight",
                "LongRoPE frequency factors (Phi-3.5, Phi-4-mini)",
            ),
            (
                "rope_factors_short.weight",
                "LongRoPE frequency factors (Phi-3.5, Phi-4-mini)",
            ),
            ("blk.0.ffn_gate.bias", "feed-forward biases"),
            ("blk.0.ffn_up.bias", "feed-forward biases"),
            ("blk.0.ffn_down.bias", "feed-forward biases"),
        ];
        if let Some(&(name, feature)) = UNAPPLIED.iter().find(|(n, _)| file.tensor(n).is_some()) {
            return Err(ModelError::Unsupported {
                key: name.into(),
                value: "present".into(),
                feature: feature.into(),
            });
        }
        let rope_freqs = match file.tensor("rope_freqs.weight") {
            Some(_) => Some(b.vector("rope_freqs.weight", cfg.n_rot / 2)?),
            None => None,
        };
        // A hand-built config is not checked against the file; capping by
        // the tensor count keeps a bogus n_layer from reserving gigabytes.
        let mut layers = Vec::with_capacity(cfg.n_layer.min(file.tensors().len()));
        for i in 0..cfg.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let biased = cfg.arch.has_qkv_bias();
            let gpt_oss = cfg.arch == Arch::GptOss;
            let qk_norm = cfg.arch.has_qk_norm();
            let post = cfg.arch.has_post_norms();
            // Phi-3 fuses Q, K and V into one matrix: its row ranges are
            // the three weights (whole rows are whole quant blocks).
            let (wq, wk, wv) = match file.tensor(&n("attn_qkv.weight")) {
                Some(_) => {
                    let ids = b.split_rows(&n("attn_qkv.weight"), e, &[q, kv, kv])?;
                    (ids[0], ids[1], ids[2])
                }
                None => (
                    b.matrix(&n("attn_q.weight"), e, q)?,
                    b.matrix(&n("attn_k.weight"), e, kv)?,
                    b.matrix(&n("attn_v.weight"), e, kv)?,
                ),
            };
            layers.push(LayerWeights {
                attn_norm: b.vector(&n("attn_norm.weight"), e)?,
                wq,
                wk,
                wv,
                wo: b.matrix(&n("attn_output.weight"), q, e)?,
                bq: b.optional_vector(&n("attn_q.bias"), q, biased)?,
                bk: b.optional_vector(&n("attn_k.bias"), kv, biased)?,
                bv: b.optional_vector(&n("attn_v.bias"), kv, biased)?,
                q_norm: b.optional_vector(&n("attn_q_norm.weight"), cfg.head_dim, qk_norm)?,
                k_norm: b.optional_vector(&n("attn_k_norm.weight"), cfg.head_dim, qk_norm)?,
                // gpt-oss names its feed-forward norm after the attention.
                ffn_norm: match gpt_oss {
                    true => b.vector(&n("post_attention_norm.weight"), e)?,
                    false => b.vector(&n("ffn_norm.weight"), e)?,
                },
                attn_post_norm: match gpt_oss {
                    true => None,
                    false => b.optional_vector(&n("post_attention_norm.weight"), e, post)?,
                },
                // gpt-oss has one; Mistral 3 files may.
                bo: b.optional_vector(&n("attn_output.bias"), e, gpt_oss)?,
                attn_sinks: b.optional_vector(&n("attn_sinks.weight"), cfg.n_head, gpt_oss)?,
                ffn_post_norm: b.optional_vector(&n("post_ffw_norm.weight"), e, post)?,
                ffn: match &cfg.moe {
                    // Phi-3's ffn_up holds gate then up (ggml's swiglu of
                    // the fused product takes the first half as the gate).
                    None if cfg.arch.ffn_up_parts() == 2 => {
                        let ids = b.split_rows(&n("ffn_up.weight"), e, &[ff, ff])?;
                        FfnWeights::Dense {
                            gate: ids[0],
                            up: ids[1],
                            down: b.matrix(&n("ffn_down.weight"), ff, e)?,
                        }
                    }
                    None => FfnWeights::Dense {
                        gate: b.matrix(&n("ffn_gate.weight"), e, ff)?,
                        up: b.matrix(&n("ffn_up.weight"), e, ff)?,
                        down: b.matrix(&n("ffn_down.weight"), ff, e)?,
                    },
                    Some(m) => FfnWeights::Moe {
                        router: b.matrix(&n(moe::ROUTER), e, m.n_expert)?,
                        gate_exps: b.experts(&n(moe::GATE_EXPS), e, ff, m.n_expert)?,
                        up_exps: b.experts(&n(moe::UP_EXPS), e, ff, m.n_expert)?,
                        down_exps: b.experts(&n(moe::DOWN_EXPS), ff, e, m.n_expert)?,
                        biases: match gpt_oss {
                            true => Some(ExpertBiases {
                                router: b.vector(&n("ffn_gate_inp.bias"), m.n_expert)?,
                                gate: b.f32_matrix(&n("ffn_gate_exps.bias"), ff, m.n_expert)?,
                                up: b.f32_matrix(&n("ffn_up_exps.bias"), ff, m.n_expert)?,
                                down: b.f32_matrix(&n("ffn_down_exps.bias"), e, m.n_expert)?,
                            }),
                            false => None,
                        },
                        shared: match m.n_ff_shared {
                            Some(sh) => Some(SharedExpert {
                                gate_inp: b.vector(&n(moe::GATE_INP_SHEXP), e)?,
                                gate: b.matrix(&n(moe::GATE_SHEXP), e, sh)?,
                                up: b.matrix(&n(moe::UP_SHEXP), e, sh)?,
                                down: b.matrix(&n(moe::DOWN_SHEXP), sh, e)?,
                            }),
                            None => None,
                        },
                    },
                },
            });
        }
        Ok(ModelWeights {
            table: b.table,
            token_embd,
            output_norm,
            output,
            rope_freqs,
            layers,
            region_bytes: b.region,
        })
    }
}

struct Builder<'a> {
    file: &'a GgufFile,
    table: Vec<WeightRef>,
    region: u64,
}

impl Builder<'_> {
    fn push(
        &mut self,
        name: &str,
        cols: usize,
        rows: usize,
        experts: usize,
    ) -> Result<WeightId, ModelError> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let expected: &[u64] = if experts > 1 {
            &[cols as u64, rows as u64, experts as u64]
        } else if rows == 1 {
            &[cols as u64]
        } else {
            &[cols as u64, rows as u64]
        };
        let actual: Vec<u64> = t.shape.clone();
        // A vector may be stored as [n, 1]; trailing unit dims don't change the layout.
        let trimmed: Vec<u64> = {
            let mut s = actual.clone();
            while s.len() > expected.len() && s.last() == Some(&1) {
                s.pop();
            }
            s
        };
        if trimmed != expected {
            return Err(ModelError::ShapeMismatch {
                tensor: name.to_string(),
                expected: expected.to_vec(),
                actual,
            });
        }
        if !t.ty.is_supported() {
            return Err(ModelError::UnsupportedType {
                tensor: name.to_string(),
                ty: t.ty,
            });
        }
        // Each tensor fits in the file, but infos may overlap, so only the
        // sum of many can overflow; checked rather than trusted.
        let region_offset = self
            .region
            .checked_next_multiple_of(WEIGHT_ALIGN)
            .and_then(|start| Some((start, start.checked_add(t.n_bytes)?)));
        let Some((region_offset, region_end)) = region_offset else {
            return Err(ModelError::Contradiction(format!(
                "the weights add up to more than {} bytes",
                u64::MAX
            )));
        };
        self.region = region_end;
        self.table.push(WeightRef {
            name: name.to_string(),
            ty: t.ty,
            cols,
            rows: rows * experts,
            experts,
            file_offset: self.file.data_offset() + t.offset,
            n_bytes: t.n_bytes,
            region_offset,
        });
        Ok(self.table.len() - 1)
    }

    fn matrix(&mut self, name: &str, cols: usize, rows: usize) -> Result<WeightId, ModelError> {
        self.push(name, cols, rows, 1)
    }

    /// A fused matrix of `parts` row counts, as one weight per part: each
    /// part's rows are a contiguous byte range of the tensor, named
    /// `name[i]`.
    fn split_rows(
        &mut self,
        name: &str,
        cols: usize,
        parts: &[usize],
    ) -> Result<Vec<WeightId>, ModelError> {
        let whole = self.push(name, cols, parts.iter().sum(), 1)?;
        // Checked and located as a whole, then replaced by its parts.
        let fused = self.table.pop().expect("pushed above");
        debug_assert_eq!(whole, self.table.len());
        self.region = fused.region_offset;
        let row_bytes = fused.row_bytes() as u64;
        let mut ids = Vec::with_capacity(parts.len());
        let mut first_row = 0u64;
        for (i, &rows) in parts.iter().enumerate() {
            let n_bytes = rows as u64 * row_bytes;
            let region_offset = self.region.next_multiple_of(WEIGHT_ALIGN);
            self.region = region_offset + n_bytes;
            self.table.push(WeightRef {
                name: format!("{name}[{i}]"),
                rows,
                file_offset: fused.file_offset + first_row * row_bytes,
                n_bytes,
                region_offset,
                ..fused.clone()
            });
            ids.push(self.table.len() - 1);
            first_row += rows as u64;
        }
        Ok(ids)
    }

    /// `experts` matrices of `rows` rows of `cols` values.
    fn experts(
        &mut self,
        name: &str,
        cols: usize,
        rows: usize,
        experts: usize,
    ) -> Result<WeightId, ModelError> {
        self.push(name, cols, rows, experts)
    }

    /// Norms, biases and rope factors are read as plain f32 by every backend;
    /// converters always store them that way.
    fn vector(&mut self, name: &str, len: usize) -> Result<WeightId, ModelError> {
        self.f32_matrix(name, len, 1)
    }

    /// An f32 matrix of `rows` rows of `cols` (per-expert biases), read as
    /// plain f32 like [`Self::vector`].
    fn f32_matrix(&mut self, name: &str, cols: usize, rows: usize) -> Result<WeightId, ModelError> {
        let id = self.push(name, cols, rows, 1)?;
        let ty = self.table[id].ty;
        if ty != QuantType::F32 {
            return Err(ModelError::UnsupportedType {
                tensor: name.to_string(),
                ty,
            });
        }
        Ok(id)
    }

    fn optional_vector(
        &mut self,
        name: &str,
        len: usize,
        required: bool,
    ) -> Result<Option<WeightId>, ModelError> {
        if self.file.tensor(name).is_none() && !required {
            return Ok(None);
        }
        self.vector(name, len).map(Some)
    }
}
