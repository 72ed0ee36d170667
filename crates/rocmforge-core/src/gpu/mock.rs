//! Test support for the GPU lowering, with no GPU: a [`KernelSink`] that
//! records every launch ([`RecordingSink`]), decoders of the argument blocks
//! it recorded ([`Launch::push_as`], [`addresses`]), and tiny models, plans
//! and address maps to lower ([`TinyModel`], [`naive_plan`], [`bare_graph`]).
//!
//! Every region a graph's launches may point into lies at its own base far
//! from the others ([`WEIGHT_BASE`], [`ARENA_BASE`], [`KV_BASE`],
//! [`STEP_BASE`]; the scratch follows the arena, as the backends place it),
//! so a test can tell from an address alone which region it names.

use std::ops::Range;
use std::sync::Arc;

use crate::backend::BackendError;
use crate::gguf::{GgufFile, GgufWriter};
use crate::graph::{build_graph, AttentionSpec, Graph, Op, RopeSpec, TensorDesc, TensorId};
use crate::model::{
    Arch, ExpertActivation, FfnWeights, LayerWeights, Model, ModelConfig, ModelWeights, MoeConfig,
    WeightId, WeightRef, WEIGHT_ALIGN,
};
use crate::plan::{ArenaPlan, KvLayout};
use crate::quant::QuantType;

use super::push::*;
use super::{
    record_graph, DeviceWeight, Dispatch, GraphAddresses, KernelSink, Lowering, MatrixTiles,
};

/// One recorded launch: what [`KernelSink::dispatch`] was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    pub kernel: String,
    pub push: Vec<u8>,
    pub groups: u32,
    pub label: String,
}

impl Launch {
    /// The argument block read back as `P`.
    ///
    /// # Panics
    /// If the block's length is not `P`'s.
    pub fn push_as<P: Push>(&self) -> P {
        assert_eq!(
            self.push.len(),
            std::mem::size_of::<P>(),
            "{}: a push block of {} bytes read as {}",
            self.kernel,
            self.push.len(),
            std::any::type_name::<P>()
        );
        // SAFETY: the length is `P`'s (checked above); `read_unaligned`
        // takes any alignment; every `Push` type is repr(C) without padding
        // and made of integers and floats only (push.rs), for which any
        // bytes are a valid value.
        unsafe { std::ptr::read_unaligned(self.push.as_ptr().cast::<P>()) }
    }
}

/// A [`KernelSink`] that stores every launch, in order, and never fails.
#[derive(Clone, Debug, Default)]
pub(crate) struct RecordingSink {
    pub launches: Vec<Launch>,
}

impl RecordingSink {
    pub fn new() -> RecordingSink {
        RecordingSink::default()
    }

    /// The kernel names, in launch order.
    pub fn kernels(&self) -> Vec<&str> {
        self.launches.iter().map(|l| l.kernel.as_str()).collect()
    }

    /// The workgroup counts, in launch order.
    pub fn groups(&self) -> Vec<u32> {
        self.launches.iter().map(|l| l.groups).collect()
    }

    /// The launches of one kernel, in order.
    pub fn of<'a>(&'a self, kernel: &'a str) -> impl Iterator<Item = &'a Launch> + 'a {
        self.launches.iter().filter(move |l| l.kernel == kernel)
    }
}

impl KernelSink for RecordingSink {
    fn launch(&mut self, d: Dispatch) -> Result<(), BackendError> {
        self.launches.push(Launch {
            kernel: d.kernel.to_owned(),
            push: d.push.to_vec(),
            groups: d.groups,
            label: d.label.to_owned(),
        });
        Ok(())
    }
}

/// The device addresses a launch's argument block names (non-zero ones),
/// with the field each comes from, decoded by the kernel's family.
///
/// # Panics
/// On a kernel this does not know (a new family wants a line here).
pub(crate) fn addresses(l: &Launch) -> Vec<(&'static str, u64)> {
    let k = l.kernel.as_str();
    let family = |prefix: &str| k.starts_with(prefix);
    let v: Vec<(&'static str, u64)> = if family("embed_") {
        let p: EmbedPush = l.push_as();
        vec![("table", p.table), ("out", p.out), ("step", p.step)]
    } else if family("matvec_id_") {
        let p: MatIdPush = l.push_as();
        vec![
            ("x", p.x),
            ("w", p.w),
            ("ids", p.ids),
            ("out", p.out),
            ("bias", p.bias),
            ("x_scales", p.x_scales),
            ("up_w", p.up_w),
            ("up_out", p.up_out),
            ("up_bias", p.up_bias),
        ]
    } else if family("matmul_id_") {
        let p: MatGroupPush = l.push_as();
        vec![
            ("x", p.x),
            ("w", p.w),
            ("table", p.table),
            ("out", p.out),
            ("bias", p.bias),
        ]
    } else if family("matvec_") || family("matmul_") {
        let p: MatPush = l.push_as();
        let parts = p.n_parts as usize;
        let mut v = vec![
            ("x", p.x),
            ("x_scales", p.x_scales),
            ("residual", p.residual),
        ];
        for i in 0..parts {
            v.extend([("w", p.w[i]), ("out", p.out[i]), ("bias", p.bias[i])]);
        }
        v
    } else {
        match k {
            "rmsnorm" | "rmsnorm_q8" => {
                let p: NormPush = l.push_as();
                vec![
                    ("x", p.x),
                    ("w", p.w),
                    ("out", p.out),
                    ("q8", p.q8),
                    ("q8_scales", p.q8_scales),
                    ("x2", p.x2),
                    ("w2", p.w2),
                    ("out2", p.out2),
                ]
            }
            "rope" => {
                let p: RopePush = l.push_as();
                vec![
                    ("x", p.x),
                    ("step", p.step),
                    ("freq_factors", p.freq_factors),
                ]
            }
            "rope_kv" => {
                let p: RopeKvPush = l.push_as();
                vec![
                    ("x", p.x),
                    ("step", p.step),
                    ("freq_factors", p.freq_factors),
                    ("k", p.k),
                    ("v", p.v),
                    ("k_cache", p.k_cache),
                    ("v_cache", p.v_cache),
                ]
            }
            "norm_rope_kv" => {
                let p: NormRopeKvPush = l.push_as();
                vec![
                    ("q", p.q),
                    ("q_out", p.q_out),
                    ("k", p.k),
                    ("k_out", p.k_out),
                    ("v", p.v),
                    ("k_cache", p.k_cache),
                    ("v_cache", p.v_cache),
                    ("step", p.step),
                    ("freq_factors", p.freq_factors),
                    ("q_norm", p.q_norm),
                    ("k_norm", p.k_norm),
                ]
            }
            "store_kv" | "store_kv_q8_0" | "store_kv_q4_0" => {
                let p: StoreKvPush = l.push_as();
                vec![
                    ("k", p.k),
                    ("v", p.v),
                    ("k_cache", p.k_cache),
                    ("v_cache", p.v_cache),
                    ("step", p.step),
                ]
            }
            k if ATTENTION_KERNELS.contains(&k) => {
                let p: AttentionPush = l.push_as();
                vec![
                    ("q", p.q),
                    ("out", p.out),
                    ("k_cache", p.k_cache),
                    ("v_cache", p.v_cache),
                    ("step", p.step),
                    ("q8", p.q8),
                    ("q8_scales", p.q8_scales),
                    ("sinks", p.sinks),
                    ("partials", p.partials),
                    ("counters", p.counters),
                ]
            }
            "add" | "swiglu" | "swiglu_oai" | "sigmoid_gate" | "geglu" | "scale" | "copy" => {
                let p: EltwisePush = l.push_as();
                vec![("a", p.a), ("b", p.b), ("out", p.out)]
            }
            "quantize_q8_0" | "quantize_q8_k" | "quantize_q8_packed" | "swiglu_q8"
            | "swiglu_oai_q8" | "quantize_f16" | "quantize_bf16" => {
                let p: QuantizePush = l.push_as();
                vec![
                    ("x", p.x),
                    ("out", p.out),
                    ("scales", p.scales),
                    ("up", p.up),
                    ("act", p.act),
                ]
            }
            "attn_temp" => {
                let p: AttnTempPush = l.push_as();
                vec![("x", p.x), ("step", p.step)]
            }
            "moe_route" => {
                let p: MoeRoutePush = l.push_as();
                vec![("logits", p.logits), ("ids", p.ids), ("weights", p.weights)]
            }
            "moe_sum" => {
                let p: MoeSumPush = l.push_as();
                vec![
                    ("x", p.x),
                    ("weights", p.weights),
                    ("out", p.out),
                    ("residual", p.residual),
                ]
            }
            "moe_router_f32" | "moe_norm_router_f32" => {
                let p: MoeRouterPush = l.push_as();
                vec![
                    ("x", p.x),
                    ("w", p.w),
                    ("bias", p.bias),
                    ("logits", p.logits),
                    ("ids", p.ids),
                    ("weights", p.weights),
                    ("counter", p.counter),
                    ("norm_x", p.norm_x),
                    ("norm_w", p.norm_w),
                    ("q8", p.q8),
                    ("q8_scales", p.q8_scales),
                ]
            }
            "moe_group" => {
                let p: MoeGroupPush = l.push_as();
                vec![("ids", p.ids), ("table", p.table)]
            }
            "moe_sum_rmsnorm" | "moe_sum_rmsnorm_q8" => {
                let p: MoeSumNormPush = l.push_as();
                vec![
                    ("x", p.x),
                    ("weights", p.weights),
                    ("residual", p.residual),
                    ("sum", p.sum),
                    ("w", p.w),
                    ("out", p.out),
                    ("q8", p.q8),
                    ("q8_scales", p.q8_scales),
                ]
            }
            _ => panic!("no push layout known for kernel {k}"),
        }
    };
    v.into_iter().filter(|&(_, a)| a != 0).collect()
}

/// Bytes of scratch a launch writes: `(start, end)` ranges, for the
/// kernels that write the scratch (the activation roundings and the
/// producers fused with the Q8-packed one).
pub(crate) fn scratch_writes(l: &Launch) -> Vec<(u64, u64)> {
    let q8 = |quants: u64, scales: u64, n: u64| {
        vec![(quants, quants + n), (scales, scales + n / 32 * 8)]
    };
    match l.kernel.as_str() {
        // "Fake" roundings: f32 values back (quantize_act.comp).
        "quantize_q8_0" | "quantize_q8_k" | "quantize_f16" | "quantize_bf16" => {
            let p: QuantizePush = l.push_as();
            vec![(p.out, p.out + 4 * u64::from(p.n))]
        }
        "quantize_q8_packed" | "swiglu_q8" | "swiglu_oai_q8" => {
            let p: QuantizePush = l.push_as();
            q8(p.out, p.scales, p.n.into())
        }
        "rmsnorm_q8" => {
            let p: NormPush = l.push_as();
            q8(
                p.q8,
                p.q8_scales,
                u64::from(p.group) * u64::from(p.n_groups),
            )
        }
        "moe_sum_rmsnorm_q8" => {
            let p: MoeSumNormPush = l.push_as();
            q8(p.q8, p.q8_scales, u64::from(p.cols) * u64::from(p.n_rows))
        }
        // With the FFN norm in front, where the experts read it as Q8.
        "moe_norm_router_f32" => {
            let p: MoeRouterPush = l.push_as();
            if p.q8 == 0 {
                return vec![];
            }
            q8(p.q8, p.q8_scales, u64::from(p.cols) * u64::from(p.n))
        }
        // The decode kernels that merge their own runs write what the
        // combine would.
        k if k == "attention_staged_q8"
            || k == "attention_combine_q8"
            || k.starts_with("attention_decode")
            || k == "attention_split" =>
        {
            let p: AttentionPush = l.push_as();
            if p.q8 == 0 {
                return vec![];
            }
            let n = u64::from(p.n_tokens) * u64::from(p.n_head) * u64::from(p.head_dim);
            q8(p.q8, p.q8_scales, n)
        }
        // The grouping table: the slots, then the sorted pairs.
        "moe_group" => {
            let p: MoeGroupPush = l.push_as();
            let end = p.table + 16 * u64::from(p.slots) + 4 * u64::from(p.n_pairs);
            vec![(p.table, end)]
        }
        _ => vec![],
    }
}

/// Where each region of a lowered graph starts. Far apart, so an address
/// names one region.
pub(crate) const WEIGHT_BASE: u64 = 0x10_0000_0000;
pub(crate) const ARENA_BASE: u64 = 0x20_0000_0000;
pub(crate) const KV_BASE: u64 = 0x30_0000_0000;
pub(crate) const STEP_BASE: u64 = 0x40_0000_0000;
pub(crate) const PARTIALS_BASE: u64 = 0x50_0000_0000;
/// Context of the tiny models' KV caches.
pub(crate) const N_CTX: usize = 256;

/// The Vulkan backend's lowering on a GPU without matrix cores (every
/// fusion, the integer mat-vecs, one Q8 block per invocation).
pub(crate) fn vulkan_lowering() -> Lowering {
    Lowering {
        fuse: true,
        int_matvec: true,
        int_expert_matvec: true,
        grouped_experts: true,
        int_dot_names: false,
        matrix: MatrixTiles::Off,
        matrix_prefetch: true,
        q8_packed_blocks_per_group: 64,
        int_rows: 2,
        expert_int_rows: 2,
        // One team a workgroup, so the grids the tests count are the
        // rows (teams: `short_rows_split_mat_vec_workgroups_into_teams`).
        row_teams: false,
        // No split unless a test asks for one (gpu::split).
        compute_units: 0,
        subgroup_decode: false,
        split_min: crate::gpu::split::SPLIT_MIN_POSITIONS as u32,
        int_teams: 1,
        matrix_attention: false,
    }
}

/// The HIP backend's lowering (128×128 or 64×64 matrix-core tiles, one Q8
/// block per wave).
pub(crate) fn hip_lowering() -> Lowering {
    Lowering {
        matrix: MatrixTiles::Auto,
        q8_packed_blocks_per_group: 2,
        int_rows: 8,
        expert_int_rows: 8,
        row_teams: false,
        compute_units: 0,
        subgroup_decode: true,
        ..vulkan_lowering()
    }
}

/// A weight table in the making, laid out as the loaders lay out the
/// device weight region (each weight `WEIGHT_ALIGN`-aligned).
#[derive(Default)]
struct Table {
    refs: Vec<WeightRef>,
    region: u64,
}

impl Table {
    /// A weight of `rows` rows (per expert) of `cols` values.
    fn add(
        &mut self,
        name: &str,
        ty: QuantType,
        cols: usize,
        rows: usize,
        experts: usize,
    ) -> usize {
        let n_bytes = ty
            .bytes_for((cols * rows * experts) as u64)
            .expect("whole blocks");
        self.refs.push(WeightRef {
            name: name.to_owned(),
            ty,
            cols,
            rows: rows * experts,
            experts,
            file_offset: 0,
            n_bytes,
            region_offset: self.region,
        });
        self.region = (self.region + n_bytes).next_multiple_of(WEIGHT_ALIGN);
        self.refs.len() - 1
    }

    fn vector(&mut self, name: &str, len: usize) -> usize {
        self.add(name, QuantType::F32, len, 1, 1)
    }
}

/// A model with no weight data, its weights placed in a device region at
/// [`WEIGHT_BASE`] and its KV cache laid out for [`N_CTX`] positions.
pub(crate) struct TinyModel {
    pub model: Model,
    pub weights: Vec<DeviceWeight>,
    pub kv: KvLayout,
}

/// Dimensions of the tiny models: every size a multiple of 256, so every
/// weight type's rows are whole blocks.
pub(crate) const N_EMBD: usize = 256;
pub(crate) const N_HEAD: usize = 4;
pub(crate) const N_HEAD_KV: usize = 2;
pub(crate) const HEAD_DIM: usize = 64;
pub(crate) const N_FF: usize = 512;
pub(crate) const N_VOCAB: usize = 320;
pub(crate) const N_LAYER: usize = 2;
/// The MoE model's experts: 8 of width 512, 2 used per token.
pub(crate) const N_EXPERT: usize = 8;
pub(crate) const N_EXPERT_USED: usize = 2;
pub(crate) const N_FF_EXP: usize = 512;

fn config(arch: Arch, moe: Option<MoeConfig>) -> ModelConfig {
    ModelConfig {
        arch,
        n_vocab: N_VOCAB,
        n_embd: N_EMBD,
        n_layer: N_LAYER,
        n_head: N_HEAD,
        n_head_kv: N_HEAD_KV,
        head_dim: HEAD_DIM,
        n_ff: if moe.is_some() { N_FF_EXP } else { N_FF },
        n_ctx_train: 4096,
        rms_eps: 1e-5,
        rope_neox: arch != Arch::Llama,
        n_rot: HEAD_DIM,
        rope_freq_base: 10000.0,
        rope_freq_scale: 1.0,
        rope_yarn_orig_ctx: None,
        rope_attn_factor: 1.0,
        rope_yarn_beta: (32.0, 1.0),
        rope_yarn_log_mul: None,
        attn_temperature: None,
        moe,
        sliding_window: None,
        local_layers: Vec::new(),
        rope_freq_base_local: 10000.0,
        rope_freq_scale_local: 1.0,
        embed_scale: None,
        gelu_ffn: false,
        attention_scale: 1.0 / (HEAD_DIM as f32).sqrt(),
    }
}

/// A tiny llama-shaped dense model: every matrix (embedding and output
/// head included) of type `ty`, norms in f32.
pub(crate) fn dense_llama(ty: QuantType) -> TinyModel {
    tiny(config(Arch::Llama, None), ty, None)
}

/// A tiny qwen3moe-shaped model: Qwen3's attention (Q/K norms) with
/// matrices of type `ty`, an f32 router, and expert stacks of type
/// `experts`.
pub(crate) fn qwen3_moe(ty: QuantType, experts: QuantType) -> TinyModel {
    qwen3_moe_with(ty, experts, ExpertActivation::SwiGlu)
}

/// [`qwen3_moe`] with the experts' `activation` (gpt-oss's clamped SwiGLU).
pub(crate) fn qwen3_moe_with(
    ty: QuantType,
    experts: QuantType,
    activation: ExpertActivation,
) -> TinyModel {
    let moe = MoeConfig {
        n_expert: N_EXPERT,
        n_expert_used: N_EXPERT_USED,
        n_ff_exp: N_FF_EXP,
        normalize_weights: true,
        activation,
        n_ff_shared: None,
    };
    tiny(config(Arch::Qwen3Moe, Some(moe)), ty, Some(experts))
}

fn tiny(cfg: ModelConfig, ty: QuantType, experts: Option<QuantType>) -> TinyModel {
    let mut t = Table::default();
    let (e, q, kv) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim());
    let token_embd = t.add("token_embd.weight", ty, e, cfg.n_vocab, 1);
    let output_norm = t.vector("output_norm.weight", e);
    let output = t.add("output.weight", ty, e, cfg.n_vocab, 1);
    let layers = (0..cfg.n_layer)
        .map(|i| {
            let n = |s: &str| format!("blk.{i}.{s}");
            let attn_norm = t.vector(&n("attn_norm.weight"), e);
            let wq = t.add(&n("attn_q.weight"), ty, e, q, 1);
            let wk = t.add(&n("attn_k.weight"), ty, e, kv, 1);
            let wv = t.add(&n("attn_v.weight"), ty, e, kv, 1);
            let (q_norm, k_norm) = match experts {
                Some(_) => (
                    Some(t.vector(&n("attn_q_norm.weight"), cfg.head_dim)),
                    Some(t.vector(&n("attn_k_norm.weight"), cfg.head_dim)),
                ),
                None => (None, None),
            };
            let wo = t.add(&n("attn_output.weight"), ty, q, e, 1);
            let ffn_norm = t.vector(&n("ffn_norm.weight"), e);
            let ffn = match (experts, &cfg.moe) {
                (Some(xt), Some(m)) => FfnWeights::Moe {
                    router: t.add(&n("ffn_gate_inp.weight"), QuantType::F32, e, m.n_expert, 1),
                    gate_exps: t.add(&n("ffn_gate_exps.weight"), xt, e, m.n_ff_exp, m.n_expert),
                    up_exps: t.add(&n("ffn_up_exps.weight"), xt, e, m.n_ff_exp, m.n_expert),
                    down_exps: t.add(&n("ffn_down_exps.weight"), xt, m.n_ff_exp, e, m.n_expert),
                    biases: None,
                    shared: None,
                },
                _ => FfnWeights::Dense {
                    gate: t.add(&n("ffn_gate.weight"), ty, e, cfg.n_ff, 1),
                    up: t.add(&n("ffn_up.weight"), ty, e, cfg.n_ff, 1),
                    down: t.add(&n("ffn_down.weight"), ty, cfg.n_ff, e, 1),
                },
            };
            LayerWeights {
                attn_norm,
                wq,
                wk,
                wv,
                wo,
                bq: None,
                bk: None,
                bv: None,
                q_norm,
                k_norm,
                ffn_norm,
                ffn,
                bo: None,
                attn_sinks: None,
                attn_post_norm: None,
                ffn_post_norm: None,
            }
        })
        .collect();
    let weights = ModelWeights {
        table: t.refs,
        token_embd,
        output_norm,
        output,
        rope_freqs: None,
        layers,
        region_bytes: t.region,
    };
    // The graph builder reads only the config and the weight table; the
    // file is an empty one.
    let bytes = GgufWriter::new().to_bytes().expect("an empty GGUF file");
    let file = GgufFile::from_bytes(bytes).expect("an empty GGUF file parses");
    let device = weights
        .table
        .iter()
        .map(|w| DeviceWeight {
            name: w.name.clone(),
            ty: w.ty,
            address: WEIGHT_BASE + w.region_offset,
            cols: w.cols,
            rows: w.rows,
            row_bytes: w.row_bytes(),
            experts: w.experts,
        })
        .collect();
    let kv = KvLayout::new(&cfg, N_CTX, N_CTX);
    TinyModel {
        model: Model {
            file: Arc::new(file),
            config: cfg,
            weights,
        },
        weights: device,
        kv,
    }
}

impl TinyModel {
    /// The graph of a step of `n_tokens` tokens (logits of the last only).
    pub fn graph(&self, n_tokens: usize) -> Graph {
        build_graph(&self.model, n_tokens, false)
    }

    /// The device address of weight `id`.
    pub fn address(&self, id: WeightId) -> u64 {
        self.weights[id].address
    }

    /// Every region at its base; the scratch right after the arena (as the
    /// Vulkan backend places it).
    pub fn addresses(&self, plan: &ArenaPlan) -> GraphAddresses<'_> {
        addresses_for(&self.weights, &self.kv, plan, self.model.config.n_vocab)
    }

    /// Lowers all of `graph` under `plan`.
    pub fn record(&self, lw: &Lowering, graph: &Graph, plan: &ArenaPlan) -> RecordingSink {
        self.record_ops(lw, graph, plan, 0..graph.ops.len())
            .expect("the tiny model lowers")
    }

    /// Lowers ops `ops` of `graph` (one part of a split graph).
    pub fn record_ops(
        &self,
        lw: &Lowering,
        graph: &Graph,
        plan: &ArenaPlan,
        ops: Range<usize>,
    ) -> Result<RecordingSink, BackendError> {
        let mut sink = RecordingSink::new();
        record_graph(&mut sink, lw, graph, plan, &self.addresses(plan), ops)?;
        Ok(sink)
    }
}

/// Addresses of a graph whose weights are `weights`, each region at its
/// base, the scratch right after the arena.
pub(crate) fn addresses_for<'a>(
    weights: &'a [DeviceWeight],
    kv: &'a KvLayout,
    plan: &ArenaPlan,
    n_vocab: usize,
) -> GraphAddresses<'a> {
    GraphAddresses {
        weights,
        arena: ARENA_BASE,
        scratch: scratch_base(plan),
        kv: KV_BASE,
        kv_layout: kv,
        partials: PARTIALS_BASE,
        partials_bytes: 1 << 30,
        step: STEP_BASE,
        n_vocab,
    }
}

/// Where [`addresses_for`] puts the scratch: the first 256-aligned byte
/// after the arena.
pub(crate) fn scratch_base(plan: &ArenaPlan) -> u64 {
    ARENA_BASE + plan.arena_bytes.next_multiple_of(256) as u64
}

/// [`ArenaPlan::unshared`]: no reuse, so no fusion is refused for
/// overlapping bytes and every address is easy to predict.
pub(crate) fn naive_plan(graph: &Graph) -> ArenaPlan {
    ArenaPlan::unshared(graph)
}

/// A graph of `ops` over `tensors` by hand, with the tiny models' RoPE and
/// attention geometry.
pub(crate) fn bare_graph(
    n_tokens: usize,
    tensors: Vec<TensorDesc>,
    ops: Vec<Op>,
    logits: TensorId,
) -> Graph {
    Graph {
        n_tokens,
        all_logits: true,
        batched: false,
        tensors,
        ops,
        logits,
        rms_eps: 1e-5,
        rope: RopeSpec {
            neox: false,
            n_rot: HEAD_DIM,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: None,
            local: None,
            yarn: None,
            attn_factor: 1.0,
        },
        attention: AttentionSpec {
            n_head: N_HEAD,
            n_head_kv: N_HEAD_KV,
            head_dim: HEAD_DIM,
            scale: 0.125,
        },
    }
}

/// A device weight of `rows` rows of `cols` values at `address`.
pub(crate) fn device_weight(ty: QuantType, cols: usize, rows: usize, address: u64) -> DeviceWeight {
    let bytes = ty.bytes_for(cols as u64).expect("whole blocks") as usize;
    DeviceWeight {
        name: format!("w{rows}x{cols}"),
        ty,
        address,
        cols,
        rows,
        row_bytes: bytes,
        experts: 1,
    }
}

/// The tiny dense model's KV layout, for graphs built by hand.
pub(crate) fn tiny_kv() -> KvLayout {
    KvLayout::new(&config(Arch::Llama, None), N_CTX, N_CTX)
}
