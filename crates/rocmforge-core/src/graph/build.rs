//! Builds the decoder-only transformer graph shared by llama, qwen2 and qwen3.

use super::{AttentionSpec, Graph, Op, RopeSpec, TensorDesc, TensorId};
use crate::model::{Model, WeightId};

struct Builder {
    n_tokens: usize,
    tensors: Vec<TensorDesc>,
    ops: Vec<Op>,
}

impl Builder {
    fn tensor(&mut self, rows: usize, cols: usize) -> TensorId {
        self.tensors.push(TensorDesc { rows, cols });
        self.tensors.len() - 1
    }

    fn cols(&self, t: TensorId) -> usize {
        self.tensors[t].cols
    }

    fn rows(&self, t: TensorId) -> usize {
        self.tensors[t].rows
    }

    fn matmul(
        &mut self,
        w: WeightId,
        out_cols: usize,
        x: TensorId,
        bias: Option<WeightId>,
    ) -> TensorId {
        let out = self.tensor(self.rows(x), out_cols);
        self.ops.push(Op::MatMul { w, x, bias, out });
        out
    }

    fn rms_norm(&mut self, x: TensorId, weight: WeightId, group: usize) -> TensorId {
        let out = self.tensor(self.rows(x), self.cols(x));
        self.ops.push(Op::RmsNorm {
            x,
            weight,
            out,
            group,
        });
        out
    }

    fn add(&mut self, a: TensorId, b: TensorId) -> TensorId {
        let out = self.tensor(self.rows(a), self.cols(a));
        self.ops.push(Op::Add { a, b, out });
        out
    }
}

/// The graph for a step of `n_tokens` tokens. `all_logits` keeps the logits of
/// every row; otherwise only the last row goes through the output head, which
/// saves the largest matmul of the model for all but one token.
pub fn build_graph(model: &Model, n_tokens: usize, all_logits: bool) -> Graph {
    let cfg = &model.config;
    let w = &model.weights;
    let mut b = Builder {
        n_tokens,
        tensors: Vec::new(),
        ops: Vec::new(),
    };

    let mut x = b.tensor(n_tokens, cfg.n_embd);
    b.ops.push(Op::Embed {
        table: w.token_embd,
        out: x,
    });
    for (layer, lw) in w.layers.iter().enumerate() {
        let h = b.rms_norm(x, lw.attn_norm, cfg.n_embd);
        let mut q = b.matmul(lw.wq, cfg.q_dim(), h, lw.bq);
        let mut k = b.matmul(lw.wk, cfg.kv_dim(), h, lw.bk);
        let v = b.matmul(lw.wv, cfg.kv_dim(), h, lw.bv);
        if let (Some(qn), Some(kn)) = (lw.q_norm, lw.k_norm) {
            q = b.rms_norm(q, qn, cfg.head_dim);
            k = b.rms_norm(k, kn, cfg.head_dim);
        }
        b.ops.push(Op::Rope {
            x: q,
            n_heads: cfg.n_head,
        });
        b.ops.push(Op::Rope {
            x: k,
            n_heads: cfg.n_head_kv,
        });
        b.ops.push(Op::StoreKv { layer, k, v });
        let attn = b.tensor(n_tokens, cfg.q_dim());
        b.ops.push(Op::Attention {
            layer,
            q,
            out: attn,
        });
        let o = b.matmul(lw.wo, cfg.n_embd, attn, None);
        let x_attn = b.add(x, o);

        let h = b.rms_norm(x_attn, lw.ffn_norm, cfg.n_embd);
        let gate = b.matmul(lw.w_gate, cfg.n_ff, h, None);
        let up = b.matmul(lw.w_up, cfg.n_ff, h, None);
        let act = b.tensor(n_tokens, cfg.n_ff);
        b.ops.push(Op::SwiGlu { gate, up, out: act });
        let down = b.matmul(lw.w_down, cfg.n_embd, act, None);
        x = b.add(x_attn, down);
    }
    if !all_logits && n_tokens > 1 {
        let last = b.tensor(1, cfg.n_embd);
        b.ops.push(Op::LastRow { x, out: last });
        x = last;
    }
    let normed = b.rms_norm(x, w.output_norm, cfg.n_embd);
    let logits = b.matmul(w.output, cfg.n_vocab, normed, None);

    Graph {
        n_tokens: b.n_tokens,
        all_logits,
        tensors: b.tensors,
        ops: b.ops,
        logits,
        rms_eps: cfg.rms_eps,
        rope: RopeSpec {
            neox: cfg.rope_neox,
            n_rot: cfg.n_rot,
            freq_base: cfg.rope_freq_base,
            freq_scale: cfg.rope_freq_scale,
            freq_factors: w.rope_freqs,
        },
        attention: AttentionSpec {
            n_head: cfg.n_head,
            n_head_kv: cfg.n_head_kv,
            head_dim: cfg.head_dim,
            scale: 1.0 / (cfg.head_dim as f32).sqrt(),
        },
    }
}
