//! The forward pass as a list of ops over tensors, built once per model and
//! shape class (a prefill of N tokens, a decode of 1) and replayed every step.
//!
//! Activations are row-major f32 matrices with one row per token. Weights are
//! referenced by [`WeightId`]; the KV cache by layer. The runtime inputs of a
//! step are only the token ids and the position of the first one, and they
//! reach kernels as data (the plan's step-input region), never as recorded
//! arguments, so a backend can record the graph once and replay it.

mod build;
pub mod fusion;
mod rope;
pub mod split;

pub use build::{build_batched_graph, build_graph};
pub use rope::{check_rope, yarn_attn_factor, RopeError, YarnTerms};

use crate::model::WeightId;

pub type TensorId = usize;

/// An activation tensor: `rows` tokens of `cols` f32 values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    pub rows: usize,
    pub cols: usize,
}

impl TensorDesc {
    pub fn bytes(&self) -> usize {
        self.rows * self.cols * std::mem::size_of::<f32>()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Rows of the embedding table for the step's tokens (dequantized).
    Embed { table: WeightId, out: TensorId },
    /// RMS normalisation over groups of `group` values (a whole row, or one
    /// head for Qwen3's Q/K norms), times `weight` (of length `group`).
    RmsNorm {
        x: TensorId,
        weight: WeightId,
        out: TensorId,
        group: usize,
    },
    /// out = x · Wᵀ (+ bias): W has `out.cols` rows of `x.cols` values.
    MatMul {
        w: WeightId,
        x: TensorId,
        bias: Option<WeightId>,
        out: TensorId,
    },
    /// Rotary embedding in place; row r is at position `pos0 + r`.
    /// `local`: the layer's own frequencies ([`RopeSpec::local`], Gemma 3's
    /// sliding-window layers) instead of the graph's.
    Rope {
        x: TensorId,
        n_heads: usize,
        local: bool,
    },
    /// Llama 4's attention temperature, in place: row `r` (position
    /// `pos0 + r`) times `ln(floor(pos / floor) + 1) * scale + 1`, 1 within
    /// the first `floor` positions (Ministral 3's Q).
    AttnTemperature {
        x: TensorId,
        scale: f32,
        floor: usize,
    },
    /// Writes K and V rows into the layer's cache at positions `pos0..`.
    StoreKv {
        layer: usize,
        k: TensorId,
        v: TensorId,
    },
    /// Causal GQA attention of `q` over the layer's cache positions `0..=pos`,
    /// or over the last `window` of them (sliding-window layers; ggml's
    /// standard window: `pos - p < window`).
    Attention {
        layer: usize,
        q: TensorId,
        out: TensorId,
        window: Option<usize>,
        /// gpt-oss's attention sinks: one learned logit per query head that
        /// joins every softmax's denominator and adds nothing to the output
        /// (an f32 vector of `n_head` values).
        sinks: Option<WeightId>,
    },
    /// silu(gate) * up.
    SwiGlu {
        gate: TensorId,
        up: TensorId,
        out: TensorId,
    },
    /// gpt-oss's clamped SwiGLU (ggml's `swiglu_oai`): with
    /// `g = min(gate, limit)` and `u = clamp(up, -limit, limit)`,
    /// `g * sigmoid(alpha * g) * (u + 1)`.
    SwiGluOai {
        gate: TensorId,
        up: TensorId,
        out: TensorId,
        alpha: f32,
        limit: f32,
    },
    /// gelu(gate) * up, GELU's tanh form on f16-rounded inputs with an
    /// f16-rounded result, as ggml's table computes it (Gemma).
    GeGlu {
        gate: TensorId,
        up: TensorId,
        out: TensorId,
    },
    /// `out[t][c] = x[t][c] * sigmoid(gate[t])`, the sigmoid taken as
    /// ggml's qwen2moe graph does, `silu(g) / g` (Qwen2-MoE's shared
    /// expert; `gate` has one column).
    SigmoidGate {
        x: TensorId,
        gate: TensorId,
        out: TensorId,
    },
    /// out = x * factor (Gemma's embedding scale).
    Scale {
        x: TensorId,
        out: TensorId,
        factor: f32,
    },
    Add {
        a: TensorId,
        b: TensorId,
        out: TensorId,
    },
    /// Copies the last row of `x`: decoding needs logits for the last token only.
    LastRow { x: TensorId, out: TensorId },
    /// Row `i` of `out` is row `outputs[i]` of `x`, the indices read from a
    /// batched step's inputs ([`crate::plan::StepInputLayout::batched`]):
    /// the last row of each sequence in the step, whose logits it returns.
    PickRows { x: TensorId, out: TensorId },
    /// Mixture-of-experts routing, per row of router `logits` (one value
    /// per expert): softmax, then the `k` most probable experts, best first.
    /// `ids` gets their indices (as f32: exact below 2^24, and every
    /// activation stays one type), `weights` their probabilities, divided
    /// by their sum when `normalize`.
    TopKGate {
        logits: TensorId,
        ids: TensorId,
        weights: TensorId,
        k: usize,
        normalize: bool,
    },
    /// Expert matmuls (llama.cpp's `mul_mat_id`): row `t * k + j` of `out`
    /// is expert `ids[t][j]` of the stacked weight `w` times row `t` of `x`,
    /// or row `t * k + j` when `x` already has one row per choice. Only the
    /// chosen experts' rows are read.
    MatMulId {
        w: WeightId,
        x: TensorId,
        ids: TensorId,
        /// Per-expert biases (gpt-oss): an f32 matrix of one row per
        /// expert, row `ids[t][j]` added to output row `t * k + j`
        /// (ggml's `add_id`).
        bias: Option<WeightId>,
        out: TensorId,
    },
    /// Row `t` of `out` is the sum over `j` of `weights[t][j]` times row
    /// `t * k + j` of `x`, in order of `j`.
    MoeSum {
        x: TensorId,
        weights: TensorId,
        out: TensorId,
    },
}

impl Op {
    /// Tensors the op reads.
    pub fn inputs(&self) -> Vec<TensorId> {
        match *self {
            Op::Embed { .. } => vec![],
            Op::RmsNorm { x, .. }
            | Op::MatMul { x, .. }
            | Op::LastRow { x, .. }
            | Op::PickRows { x, .. } => vec![x],
            Op::Rope { x, .. } | Op::AttnTemperature { x, .. } => vec![x],
            Op::StoreKv { k, v, .. } => vec![k, v],
            Op::Attention { q, .. } => vec![q],
            Op::SwiGlu { gate, up, .. }
            | Op::GeGlu { gate, up, .. }
            | Op::SwiGluOai { gate, up, .. } => vec![gate, up],
            Op::Scale { x, .. } => vec![x],
            Op::SigmoidGate { x, gate, .. } => vec![x, gate],
            Op::Add { a, b, .. } => vec![a, b],
            Op::TopKGate { logits, .. } => vec![logits],
            Op::MatMulId { x, ids, .. } => vec![x, ids],
            Op::MoeSum { x, weights, .. } => vec![x, weights],
        }
    }

    /// Weights the op reads.
    pub fn weights(&self) -> Vec<WeightId> {
        match *self {
            Op::Embed { table, .. } => vec![table],
            Op::RmsNorm { weight, .. } => vec![weight],
            Op::MatMul { w, bias, .. } | Op::MatMulId { w, bias, .. } => {
                std::iter::once(w).chain(bias).collect()
            }
            Op::Attention { sinks, .. } => sinks.into_iter().collect(),
            _ => vec![],
        }
    }

    /// Tensors the op writes (Rope writes its input in place).
    pub fn outputs(&self) -> Vec<TensorId> {
        match *self {
            Op::Embed { out, .. }
            | Op::RmsNorm { out, .. }
            | Op::MatMul { out, .. }
            | Op::Attention { out, .. }
            | Op::SwiGlu { out, .. }
            | Op::SwiGluOai { out, .. }
            | Op::GeGlu { out, .. }
            | Op::Scale { out, .. }
            | Op::SigmoidGate { out, .. }
            | Op::Add { out, .. }
            | Op::LastRow { out, .. }
            | Op::PickRows { out, .. }
            | Op::MatMulId { out, .. }
            | Op::MoeSum { out, .. } => vec![out],
            Op::TopKGate { ids, weights, .. } => vec![ids, weights],
            Op::Rope { x, .. } | Op::AttnTemperature { x, .. } => vec![x],
            Op::StoreKv { .. } => vec![],
        }
    }
}

/// RoPE parameters shared by every Rope op of a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    pub neox: bool,
    pub n_rot: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    /// Llama 3's per-frequency divisors.
    pub freq_factors: Option<WeightId>,
    /// Frequencies of the `local` Rope ops (Gemma 3's sliding-window
    /// layers), if they differ.
    pub local: Option<RopeFreq>,
    /// YaRN context extension (gpt-oss; `rope.scaling.type = yarn`), which
    /// mixes interpolated and extrapolated angles per pair.
    pub yarn: Option<Yarn>,
    /// Multiplier of every cos and sin (`rope.scaling.attn_factor`, 1 for
    /// most files); YaRN multiplies it further, see [`RopeSpec::mscale`].
    pub attn_factor: f32,
}

/// YaRN's parameters (llama.cpp's `yarn_*` context parameters, whose
/// defaults files do not override).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// The context the model was trained at before extension
    /// (`rope.scaling.original_context_length`).
    pub n_ctx_orig: usize,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

/// A RoPE base and position scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeFreq {
    pub freq_base: f32,
    pub freq_scale: f32,
}

impl RopeSpec {
    /// The spec a Rope op uses: the graph's, or with the local frequencies
    /// (and no frequency factors, which belong to the global ones).
    pub fn for_op(&self, local: bool) -> RopeSpec {
        match (local, self.local) {
            (true, Some(f)) => RopeSpec {
                freq_base: f.freq_base,
                freq_scale: f.freq_scale,
                freq_factors: None,
                local: None,
                ..self.clone()
            },
            _ => self.clone(),
        }
    }
}

/// Attention geometry shared by every attention op of a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionSpec {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub scale: f32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub n_tokens: usize,
    /// Logits for every row (prompt evaluation, perplexity) or the last only.
    pub all_logits: bool,
    /// A step of several sequences: each row has its own sequence and
    /// position in the step's inputs, and the logits are the rows
    /// [`Op::PickRows`] picks. False: row `r` is sequence 0's position
    /// `pos0 + r`.
    pub batched: bool,
    pub tensors: Vec<TensorDesc>,
    pub ops: Vec<Op>,
    pub logits: TensorId,
    pub rms_eps: f32,
    pub rope: RopeSpec,
    pub attention: AttentionSpec,
}

impl Graph {
    pub fn tensor(&self, id: TensorId) -> TensorDesc {
        self.tensors[id]
    }

    /// The layout of this graph's step inputs.
    pub fn step_inputs(&self) -> crate::plan::StepInputLayout {
        use crate::plan::StepInputLayout;
        if self.batched {
            let outputs = self.tensor(self.logits).rows;
            StepInputLayout::batched(self.n_tokens, self.attention.n_head, outputs)
        } else {
            StepInputLayout::new(self.n_tokens, self.attention.n_head)
        }
    }
}
