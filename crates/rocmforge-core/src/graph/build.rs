//! Builds the decoder-only transformer graph shared by every family this
//! project runs: llama (Llama 2 and 3, Mistral 7B, and Mixtral with its
//! experts), qwen2, qwen2moe, qwen3, qwen3moe, phi3, gemma3, mistral3 and
//! gpt-oss (`model::Arch::ALL`).
//!
//! One graph serves them all: no family is named here. What sets a family
//! apart reaches the builder as data, read by its module under
//! `model/config/family/`, or as weights it has and others lack: biases on
//! Q, K and V (qwen2, qwen2moe, gpt-oss, which has one on the output too),
//! Q/K norms (qwen3, qwen3moe, gemma3), norms after attention and the
//! feed-forward block, an embedding scale and GeGLU (gemma3),
//! sliding-window layers with their own RoPE (gemma3, gpt-oss), attention
//! sinks (gpt-oss), YaRN (gpt-oss, mistral3) and an attention temperature
//! (mistral3), and mixtures of experts in place of the feed-forward blocks
//! (qwen3moe, qwen2moe with its shared expert, gpt-oss, Mixtral). Phi-3's
//! fused QKV and gate/up matrices are split at load, so phi3 is llama's
//! graph with NeoX RoPE.

use super::{
    yarn_attn_factor, AttentionSpec, Graph, Op, RopeFreq, RopeSpec, TensorDesc, TensorId, Yarn,
};
use crate::model::{
    ExpertActivation, ExpertBiases, FfnWeights, Model, MoeConfig, SharedExpert, WeightId,
};

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

    /// llama.cpp's `build_moe_ffn` with softmax gating: route, run the
    /// chosen experts' SwiGLU on one row per (token, choice), and sum the
    /// rows of each token by their weights.
    fn moe(
        &mut self,
        h: TensorId,
        moe: &MoeConfig,
        w: [WeightId; 4],
        biases: Option<ExpertBiases>,
    ) -> TensorId {
        let [router, gate_exps, up_exps, down_exps] = w;
        let (n, k) = (self.rows(h), moe.n_expert_used);
        let logits = self.matmul(router, moe.n_expert, h, biases.map(|b| b.router));
        let ids = self.tensor(n, k);
        let weights = self.tensor(n, k);
        self.ops.push(Op::TopKGate {
            logits,
            ids,
            weights,
            k,
            normalize: moe.normalize_weights,
        });
        let gate = self.matmul_id(gate_exps, moe.n_ff_exp, h, ids, biases.map(|b| b.gate));
        let up = self.matmul_id(up_exps, moe.n_ff_exp, h, ids, biases.map(|b| b.up));
        let act = self.tensor(n * k, moe.n_ff_exp);
        self.ops.push(match moe.activation {
            ExpertActivation::SwiGlu => Op::SwiGlu { gate, up, out: act },
            ExpertActivation::SwiGluOai { alpha, limit } => Op::SwiGluOai {
                gate,
                up,
                out: act,
                alpha,
                limit,
            },
        });
        let down = self.matmul_id(down_exps, self.cols(h), act, ids, biases.map(|b| b.down));
        let out = self.tensor(n, self.cols(h));
        self.ops.push(Op::MoeSum {
            x: down,
            weights,
            out,
        });
        out
    }

    /// Qwen2-MoE's shared expert added to the mixture's output `moe_out`:
    /// a SwiGLU of `n_ff` scaled per token by the sigmoid of its gate.
    fn shared_expert(
        &mut self,
        h: TensorId,
        moe_out: TensorId,
        s: SharedExpert,
        n_ff: usize,
    ) -> TensorId {
        let (n, n_embd) = (self.rows(h), self.cols(h));
        let logit = self.matmul(s.gate_inp, 1, h, None);
        let gate = self.matmul(s.gate, n_ff, h, None);
        let up = self.matmul(s.up, n_ff, h, None);
        let act = self.tensor(n, n_ff);
        self.ops.push(Op::SwiGlu { gate, up, out: act });
        let down = self.matmul(s.down, n_embd, act, None);
        let scaled = self.tensor(n, n_embd);
        self.ops.push(Op::SigmoidGate {
            x: down,
            gate: logit,
            out: scaled,
        });
        self.add(moe_out, scaled)
    }

    fn matmul_id(
        &mut self,
        w: WeightId,
        out_cols: usize,
        x: TensorId,
        ids: TensorId,
        bias: Option<WeightId>,
    ) -> TensorId {
        let out = self.tensor(self.rows(ids) * self.cols(ids), out_cols);
        self.ops.push(Op::MatMulId {
            w,
            x,
            ids,
            bias,
            out,
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
    let logits = match all_logits {
        true => Logits::All,
        false => Logits::Last,
    };
    build(model, n_tokens, logits)
}

/// The graph of a batched step of `n_tokens` rows of several sequences
/// (each row's sequence and position come with the step's inputs), whose
/// logits are `outputs` picked rows: the last row of each sequence in the
/// step.
pub fn build_batched_graph(model: &Model, n_tokens: usize, outputs: usize) -> Graph {
    assert!(
        (1..=n_tokens).contains(&outputs),
        "a batched step picks 1..=n_tokens rows"
    );
    build(model, n_tokens, Logits::Pick(outputs))
}

/// Which rows go through the output head.
#[derive(Clone, Copy)]
enum Logits {
    All,
    Last,
    Pick(usize),
}

fn build(model: &Model, n_tokens: usize, logits_rows: Logits) -> Graph {
    let all_logits = matches!(logits_rows, Logits::All);
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
    if let Some(factor) = cfg.embed_scale {
        let scaled = b.tensor(n_tokens, cfg.n_embd);
        b.ops.push(Op::Scale {
            x,
            out: scaled,
            factor,
        });
        x = scaled;
    }
    for (layer, lw) in w.layers.iter().enumerate() {
        let h = b.rms_norm(x, lw.attn_norm, cfg.n_embd);
        let mut q = b.matmul(lw.wq, cfg.q_dim(), h, lw.bq);
        let mut k = b.matmul(lw.wk, cfg.kv_dim(), h, lw.bk);
        let v = b.matmul(lw.wv, cfg.kv_dim(), h, lw.bv);
        if let (Some(qn), Some(kn)) = (lw.q_norm, lw.k_norm) {
            q = b.rms_norm(q, qn, cfg.head_dim);
            k = b.rms_norm(k, kn, cfg.head_dim);
        }
        let local = cfg.local_layers.get(layer).copied().unwrap_or(false);
        b.ops.push(Op::Rope {
            x: q,
            n_heads: cfg.n_head,
            local,
        });
        b.ops.push(Op::Rope {
            x: k,
            n_heads: cfg.n_head_kv,
            local,
        });
        b.ops.push(Op::StoreKv { layer, k, v });
        if let Some(t) = cfg.attn_temperature {
            b.ops.push(Op::AttnTemperature {
                x: q,
                scale: t.scale,
                floor: t.floor,
            });
        }
        let attn = b.tensor(n_tokens, cfg.q_dim());
        b.ops.push(Op::Attention {
            layer,
            q,
            out: attn,
            window: cfg.sliding_window.filter(|_| local),
            sinks: lw.attn_sinks,
        });
        let mut o = b.matmul(lw.wo, cfg.n_embd, attn, lw.bo);
        if let Some(norm) = lw.attn_post_norm {
            o = b.rms_norm(o, norm, cfg.n_embd);
        }
        let x_attn = b.add(x, o);

        let h = b.rms_norm(x_attn, lw.ffn_norm, cfg.n_embd);
        let ffn = match (&lw.ffn, &cfg.moe) {
            (&FfnWeights::Dense { gate, up, down }, _) => {
                let gate = b.matmul(gate, cfg.n_ff, h, None);
                let up = b.matmul(up, cfg.n_ff, h, None);
                let act = b.tensor(n_tokens, cfg.n_ff);
                b.ops.push(if cfg.gelu_ffn {
                    Op::GeGlu { gate, up, out: act }
                } else {
                    Op::SwiGlu { gate, up, out: act }
                });
                b.matmul(down, cfg.n_embd, act, None)
            }
            (&FfnWeights::Moe { .. }, None) => {
                unreachable!("expert weights come from a MoE config")
            }
            (
                &FfnWeights::Moe {
                    router,
                    gate_exps,
                    up_exps,
                    down_exps,
                    biases,
                    shared,
                },
                Some(moe),
            ) => {
                let out = b.moe(h, moe, [router, gate_exps, up_exps, down_exps], biases);
                match (shared, moe.n_ff_shared) {
                    (Some(s), Some(n_ff)) => b.shared_expert(h, out, s, n_ff),
                    _ => out,
                }
            }
        };
        let ffn = match lw.ffn_post_norm {
            Some(norm) => b.rms_norm(ffn, norm, cfg.n_embd),
            None => ffn,
        };
        x = b.add(x_attn, ffn);
    }
    match logits_rows {
        Logits::Last if n_tokens > 1 => {
            let last = b.tensor(1, cfg.n_embd);
            b.ops.push(Op::LastRow { x, out: last });
            x = last;
        }
        Logits::Pick(m) => {
            let picked = b.tensor(m, cfg.n_embd);
            b.ops.push(Op::PickRows { x, out: picked });
            x = picked;
        }
        Logits::All | Logits::Last => {}
    }
    let normed = b.rms_norm(x, w.output_norm, cfg.n_embd);
    let logits = b.matmul(w.output, cfg.n_vocab, normed, None);

    Graph {
        n_tokens: b.n_tokens,
        all_logits,
        batched: matches!(logits_rows, Logits::Pick(_)),
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
            local: (!cfg.local_layers.is_empty()).then_some(RopeFreq {
                freq_base: cfg.rope_freq_base_local,
                freq_scale: cfg.rope_freq_scale_local,
            }),
            yarn: cfg.rope_yarn_orig_ctx.map(|n_ctx_orig| Yarn {
                n_ctx_orig,
                beta_fast: cfg.rope_yarn_beta.0,
                beta_slow: cfg.rope_yarn_beta.1,
            }),
            attn_factor: yarn_attn_factor(
                cfg.rope_yarn_orig_ctx.is_some(),
                cfg.rope_freq_scale,
                cfg.rope_attn_factor,
                cfg.rope_yarn_log_mul,
            ),
        },
        attention: AttentionSpec {
            n_head: cfg.n_head,
            n_head_kv: cfg.n_head_kv,
            head_dim: cfg.head_dim,
            scale: cfg.attention_scale,
        },
    }
}
