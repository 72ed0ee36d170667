//! The lowering, with no GPU: tiny graphs lowered into a [`RecordingSink`],
//! and the launches, grids, argument blocks and scratch layout checked
//! against values worked out here from the models' shapes (`mock.rs`:
//! 256 wide, 4 heads of 64 over 2 KV heads, feed-forward 512, vocabulary
//! 320, two blocks; the MoE model 8 experts of 512, 2 used).
//!
//! Grids are the kernels' contract ([`workgroup_size`] invocations per
//! workgroup, one item each for the element-wise families; two rows per
//! workgroup for the integer mat-vec, one for the f32 one; 32×64 tiles
//! for the portable matmul, 64×64 / 128×128 for the matrix-core ones).

use std::collections::HashSet;

use super::mock::*;
use super::moe::table_offset;
use super::push::*;
use super::split::MAX_SPLITS;
use super::{
    check_graph, q8_packed_layout, scratch_bytes, workgroup_size, DeviceWeight, Lowering,
    MatrixTiles, Reserved,
};
use crate::backend::BackendError;
use crate::graph::{Graph, Op, TensorDesc, TensorId};
use crate::model::moe::{ExpertActivation, OAI_ALPHA, OAI_LIMIT};
use crate::plan::{ArenaPlan, KvLayout, KvType, KvTypes};
use crate::quant::QuantType;

/// Width of the Q rows and of the K / V rows.
const Q_DIM: usize = N_HEAD * HEAD_DIM;
const KV_DIM: usize = N_HEAD_KV * HEAD_DIM;
/// Items of one row of `rope_kv`: Q pairs, K pairs, V values (every
/// dimension rotated).
const ROPE_KV_ROW: usize = N_HEAD * HEAD_DIM / 2 + N_HEAD_KV * HEAD_DIM / 2 + KV_DIM;

/// Workgroups of `kernel` over `items` items, one per invocation.
fn per_item(kernel: &str, items: usize) -> u32 {
    let wg = workgroup_size(kernel).expect("a kernel with a workgroup size");
    items.div_ceil(wg as usize) as u32
}

fn launch(kernel: impl Into<String>, groups: usize) -> (String, u32) {
    (kernel.into(), u32::try_from(groups).unwrap())
}

fn item_launch(kernel: &str, items: usize) -> (String, u32) {
    (kernel.into(), per_item(kernel, items))
}

/// The recorded (kernel, workgroups) pairs.
fn seq(sink: &RecordingSink) -> Vec<(String, u32)> {
    sink.kernels()
        .into_iter()
        .map(String::from)
        .zip(sink.groups())
        .collect()
}

/// The tensors of one block of the tiny dense graph, read from its ops in
/// the order `build_graph` emits them (16 ops a block after the Embed).
struct Block {
    x: TensorId,
    h: TensorId,
    q: TensorId,
    k: TensorId,
    v: TensorId,
    attn: TensorId,
    o: TensorId,
    x_attn: TensorId,
    h2: TensorId,
    gate: TensorId,
    up: TensorId,
    act: TensorId,
    x_out: TensorId,
}

fn out_of(op: &Op) -> TensorId {
    match op.outputs()[..] {
        [t] => t,
        _ => panic!("{op:?} has not one output"),
    }
}

fn kind(op: &Op) -> &'static str {
    match op {
        Op::RmsNorm { .. } => "RmsNorm",
        Op::MatMul { .. } => "MatMul",
        Op::Rope { .. } => "Rope",
        Op::StoreKv { .. } => "StoreKv",
        Op::Attention { .. } => "Attention",
        Op::Add { .. } => "Add",
        Op::SwiGlu { .. } => "SwiGlu",
        _ => "other",
    }
}

fn dense_blocks(g: &Graph) -> Vec<Block> {
    (0..N_LAYER)
        .map(|layer| {
            let ops = &g.ops[1 + 16 * layer..1 + 16 * (layer + 1)];
            assert_eq!(
                ops.iter().map(kind).collect::<Vec<_>>(),
                [
                    "RmsNorm",
                    "MatMul",
                    "MatMul",
                    "MatMul",
                    "Rope",
                    "Rope",
                    "StoreKv",
                    "Attention",
                    "MatMul",
                    "Add",
                    "RmsNorm",
                    "MatMul",
                    "MatMul",
                    "SwiGlu",
                    "MatMul",
                    "Add"
                ]
            );
            let Op::RmsNorm { x, .. } = ops[0] else {
                unreachable!()
            };
            Block {
                x,
                h: out_of(&ops[0]),
                q: out_of(&ops[1]),
                k: out_of(&ops[2]),
                v: out_of(&ops[3]),
                attn: out_of(&ops[7]),
                o: out_of(&ops[8]),
                x_attn: out_of(&ops[9]),
                h2: out_of(&ops[10]),
                gate: out_of(&ops[11]),
                up: out_of(&ops[12]),
                act: out_of(&ops[13]),
                x_out: out_of(&ops[15]),
            }
        })
        .collect()
}

/// A dense decode (or ≤ 8-token) step of Q4_0 / Q8_0-like weights with
/// every fusion: nine launches a block.
fn fused_small_step(n: usize, mv: &str, embed: &str, lw: &Lowering) -> Vec<(String, u32)> {
    let q8_groups = |values: usize| (values / 32).div_ceil(lw.q8_packed_blocks_per_group as usize);
    let rows = |rows: usize| rows.div_ceil(lw.int_rows as usize);
    let mut want = vec![launch(embed, n)];
    for _ in 0..N_LAYER {
        want.extend([
            // One workgroup per row, Q8-packed output for Q/K/V.
            launch("rmsnorm_q8", n),
            // Q, K, V in one launch, `int_rows` rows per workgroup.
            launch(mv, rows(Q_DIM) + rows(KV_DIM) + rows(KV_DIM)),
            item_launch("rope_kv", n * ROPE_KV_ROW),
        ]);
        if lw.subgroup_decode {
            // One run of the cache's positions per (token, head) read by
            // subgroups, merged (Q8-packed output) by the row's last run.
            want.push(launch("attention_decode", n * N_HEAD));
        } else {
            // One workgroup per (token, head), Q8-packed output.
            want.push(launch("attention_staged_q8", n * N_HEAD));
        }
        want.extend([
            // The output projection with the residual add.
            launch(mv, rows(N_EMBD)),
            launch("rmsnorm_q8", n),
            launch(mv, rows(N_FF) + rows(N_FF)),
            launch("swiglu_q8", q8_groups(n * N_FF)),
            // Down with the residual add.
            launch(mv, rows(N_EMBD)),
        ]);
    }
    if n > 1 {
        want.push(item_launch("copy", N_EMBD));
    }
    want.extend([launch("rmsnorm_q8", 1), launch(mv, rows(N_VOCAB))]);
    want
}

/// A dense decode step whose mat-vecs run in f32 over activations rounded
/// by `round` in blocks of `block`.
fn f32_decode(mv: &str, embed: &str, round: &str, block: usize) -> Vec<(String, u32)> {
    let rounding = |values: usize| item_launch(round, values / block);
    let mut want = vec![launch(embed, 1)];
    for _ in 0..N_LAYER {
        want.extend([
            launch("rmsnorm", 1),
            rounding(N_EMBD),
            // One row per workgroup.
            launch(mv, Q_DIM + KV_DIM + KV_DIM),
            item_launch("rope_kv", ROPE_KV_ROW),
            launch("attention_staged", N_HEAD),
            rounding(Q_DIM),
            launch(mv, N_EMBD),
            item_launch("add", N_EMBD),
            launch("rmsnorm", 1),
            rounding(N_EMBD),
            launch(mv, N_FF + N_FF),
            item_launch("swiglu", N_FF),
            rounding(N_FF),
            launch(mv, N_EMBD),
            item_launch("add", N_EMBD),
        ]);
    }
    want.extend([launch("rmsnorm", 1), rounding(N_EMBD), launch(mv, N_VOCAB)]);
    want
}

#[test]
fn decode_fuses_into_nine_launches_a_block() {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(1);
    let sink = m.record(&vulkan_lowering(), &g, &naive_plan(&g));
    let want = fused_small_step(1, "matvec_int_q4_0", "embed_q4_0", &vulkan_lowering());
    assert_eq!(seq(&sink), want);
    assert_eq!(sink.launches.len(), 1 + 9 * N_LAYER + 2);
}

#[test]
fn decode_push_blocks_name_the_plan_the_weights_and_the_cache() {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(1);
    let plan = naive_plan(&g);
    let sink = m.record(&vulkan_lowering(), &g, &plan);
    let t = |id: TensorId| ARENA_BASE + plan.offsets[id] as u64;
    let s = scratch_base(&plan);
    let w = &m.model.weights;
    let blocks = dense_blocks(&g);

    let embed: EmbedPush = sink.launches[0].push_as();
    assert_eq!(
        (embed.table, embed.out, embed.step),
        (m.address(w.token_embd), t(blocks[0].x), STEP_BASE)
    );
    // Q4_0 rows of 256: 8 blocks of 18 bytes.
    let cols = N_EMBD as u32;
    assert_eq!(
        (embed.row_bytes, embed.cols, embed.n_vocab, embed.n_tokens),
        (8 * 18, cols, N_VOCAB as u32, 1)
    );
    assert_eq!(
        sink.launches[0].label,
        "op 0 of 35 (Embed token_embd.weight Q4_0)"
    );

    for (layer, (b, l)) in blocks.iter().zip(sink.launches[1..].chunks(9)).enumerate() {
        let lw = &w.layers[layer];
        let norm: NormPush = l[0].push_as();
        assert_eq!(
            (norm.x, norm.w, norm.out),
            (t(b.x), m.address(lw.attn_norm), t(b.h))
        );
        assert_eq!((norm.group, norm.n_groups, norm.eps), (cols, 1, 1e-5));
        // 256 values Q8-packed: quants from the scratch's start, (d, s)
        // pairs from byte 256.
        assert_eq!((norm.q8, norm.q8_scales), (s, s + 256));

        let qkv: MatPush = l[1].push_as();
        assert_eq!((qkv.x, qkv.x_scales, qkv.residual), (s, s + 256, 0));
        assert_eq!(qkv.w, [lw.wq, lw.wk, lw.wv].map(|id| m.address(id)));
        assert_eq!(qkv.out, [t(b.q), t(b.k), t(b.v)]);
        assert_eq!(qkv.bias, [0; 3]);
        assert_eq!(qkv.rows, [Q_DIM, KV_DIM, KV_DIM].map(|r| r as u32));
        assert_eq!((qkv.k, qkv.n, qkv.n_parts), (cols, 1, 3));
        let first = 1 + 16 * layer + 1;
        let names = ["q", "k", "v"].map(|w| format!("blk.{layer}.attn_{w}.weight"));
        let names = names.join("+");
        let label = format!("ops {first}..{} of 35 (MatMul {names} Q4_0)", first + 3);
        assert_eq!(l[1].label, label);

        // f16 caches: each earlier layer holds K then V, N_CTX rows each.
        let k_cache = KV_BASE + (layer * 2 * N_CTX * KV_DIM * 2) as u64;
        let v_cache = k_cache + (N_CTX * KV_DIM * 2) as u64;
        let rope: RopeKvPush = l[2].push_as();
        assert_eq!(
            (rope.x, rope.k, rope.v, rope.k_cache, rope.v_cache),
            (t(b.q), t(b.k), t(b.v), k_cache, v_cache)
        );
        assert_eq!((rope.step, rope.freq_factors), (STEP_BASE, 0));
        assert_eq!(
            (
                rope.rows,
                rope.n_heads,
                rope.head_dim,
                rope.n_rot,
                rope.n_heads_kv
            ),
            (1, 4, 64, 64, 2)
        );
        assert_eq!(
            (rope.neox, rope.ring, rope.freq_scale),
            (0, N_CTX as u32, 1.0)
        );
        let theta_scale = 10000f32.powf(-2.0 / 64.0);
        assert!((rope.theta_scale - theta_scale).abs() < 1e-6);
        assert_eq!((rope.yarn.ext_factor, rope.yarn.mscale), (0.0, 1.0));

        let att: AttentionPush = l[3].push_as();
        assert_eq!(
            (att.q, att.out, att.k_cache, att.v_cache, att.step),
            (t(b.q), t(b.attn), k_cache, v_cache, STEP_BASE)
        );
        assert_eq!(
            (
                att.n_tokens,
                att.n_head,
                att.n_head_kv,
                att.head_dim,
                att.kv_dim
            ),
            (1, 4, 2, 64, 128)
        );
        assert_eq!(
            (att.scale, att.window, att.ring, att.sinks),
            (0.125, 0, 256, 0)
        );
        assert_eq!((att.q8, att.q8_scales), (s, s + 256));

        // The output projection writes the residual add's output.
        let wo: MatPush = l[4].push_as();
        assert_eq!((wo.x, wo.x_scales), (s, s + 256));
        assert_eq!((wo.w[0], wo.out[0]), (m.address(lw.wo), t(b.x_attn)));
        assert_eq!((wo.residual, wo.rows[0], wo.n_parts), (t(b.x), cols, 1));

        let norm2: NormPush = l[5].push_as();
        assert_eq!(
            (norm2.x, norm2.w, norm2.out),
            (t(b.x_attn), m.address(lw.ffn_norm), t(b.h2))
        );
        let gate_up: MatPush = l[6].push_as();
        assert_eq!(gate_up.out, [t(b.gate), t(b.up), 0]);
        assert_eq!((gate_up.rows, gate_up.n_parts), ([512, 512, 0], 2));

        // SwiGLU writes its f32 output and the Q8-packed one (512 values:
        // scales from byte 512).
        let sw: QuantizePush = l[7].push_as();
        assert_eq!((sw.x, sw.up, sw.act), (t(b.gate), t(b.up), t(b.act)));
        assert_eq!((sw.out, sw.scales, sw.n), (s, s + 512, 512));

        let down: MatPush = l[8].push_as();
        assert_eq!((down.x, down.x_scales, down.k), (s, s + 512, 512));
        assert_eq!((down.out[0], down.residual), (t(b.x_out), t(b.x_attn)));
    }

    let head: MatPush = sink.launches[20].push_as();
    assert_eq!((head.w[0], head.out[0]), (m.address(w.output), t(g.logits)));
    assert_eq!((head.rows[0], head.residual), (N_VOCAB as u32, 0));
}

#[test]
fn fusion_off_lowers_one_launch_per_op_and_a_rounding_per_matmul_run() {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(1);
    assert_eq!(g.ops.len(), 35);
    let lw = Lowering {
        fuse: false,
        ..hip_lowering()
    };
    let sink = m.record(&lw, &g, &naive_plan(&g));
    // HIP's roundings: two blocks of 32 a workgroup.
    let quantize = |values: usize| launch("quantize_q8_packed", values / 32 / 2);
    let mv = "matvec_int_q4_0";
    // A wave per 4 rows: 8 rows a workgroup.
    let rows = |rows: usize| rows.div_ceil(8);
    let mut want = vec![launch("embed_q4_0", 1)];
    for _ in 0..N_LAYER {
        want.extend([
            launch("rmsnorm", 1),
            quantize(N_EMBD),
            // Q/K/V still share a launch: one argument block holds them.
            launch(mv, rows(Q_DIM + 2 * KV_DIM)),
            item_launch("rope", N_HEAD * HEAD_DIM / 2),
            item_launch("rope", N_HEAD_KV * HEAD_DIM / 2),
            item_launch("store_kv", KV_DIM / 2),
            // Waves of 32: one run of the cache's positions a head, merged.
            launch("attention_decode", N_HEAD),
            launch("attention_combine", N_HEAD),
            quantize(Q_DIM),
            launch(mv, rows(N_EMBD)),
            item_launch("add", N_EMBD),
            launch("rmsnorm", 1),
            quantize(N_EMBD),
            launch(mv, rows(2 * N_FF)),
            item_launch("swiglu", N_FF),
            quantize(N_FF),
            launch(mv, rows(N_EMBD)),
            item_launch("add", N_EMBD),
        ]);
    }
    want.extend([
        launch("rmsnorm", 1),
        quantize(N_EMBD),
        launch(mv, rows(N_VOCAB)),
    ]);
    assert_eq!(seq(&sink), want);
    // 35 ops, less the 3 matmuls that share a launch with another, plus a
    // rounding for each of the 9 matmul launches: 38. Fused, each block
    // saves 2 (RoPE + store), 2 (residual adds) and 4 (roundings done by
    // the producers), and the head's norm 1 more: 38 - 17 = 21.
    // Unfused, the attention's combine adds one launch a block; fused, the
    // decode kernel merges its runs itself.
    assert_eq!(sink.launches.len(), 35 - 3 * N_LAYER + 9 + N_LAYER);
    let fused = m.record(&hip_lowering(), &g, &naive_plan(&g));
    assert_eq!(fused.launches.len(), 38 - 8 * N_LAYER - 1);
}

#[test]
fn prefill_of_seven_tokens_stays_on_the_fused_mat_vecs() {
    let m = dense_llama(QuantType::Q8_0);
    let g = m.graph(7);
    let lw = hip_lowering();
    let sink = m.record(&lw, &g, &naive_plan(&g));
    assert_eq!(
        seq(&sink),
        fused_small_step(7, "matvec_int_q8_0", "embed_q8_0", &lw)
    );
    // The last row to the head: 256 values from row 6.
    let plan = naive_plan(&g);
    let copy: EltwisePush = sink.of("copy").next().unwrap().push_as();
    let Op::LastRow { x, out } = g.ops[33] else {
        panic!("op 33 is {:?}", g.ops[33])
    };
    let src = ARENA_BASE + (plan.offsets[x] + 6 * 256 * 4) as u64;
    assert_eq!((copy.a, copy.b), (src, 0));
    assert_eq!(
        (copy.out, copy.n),
        (ARENA_BASE + plan.offsets[out] as u64, 256)
    );
}

#[test]
fn prefill_of_64_tokens_runs_the_tiled_matmul() {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(64);
    let n: usize = 64;
    let sink = m.record(&vulkan_lowering(), &g, &naive_plan(&g));
    let rounding = |values: usize| item_launch("quantize_q8_0", values / 32);
    // Tiles of 32 tokens × 64 rows.
    let tiles = |rows: &[usize]| {
        launch(
            "matmul_q4_0",
            rows.iter().map(|r| r.div_ceil(64)).sum::<usize>() * n.div_ceil(32),
        )
    };
    let mut want = vec![launch("embed_q4_0", n)];
    for _ in 0..N_LAYER {
        want.extend([
            launch("rmsnorm", n),
            rounding(n * N_EMBD),
            tiles(&[Q_DIM, KV_DIM, KV_DIM]),
            item_launch("rope_kv", n * ROPE_KV_ROW),
            // Past 8 tokens attention no longer stages K/V; from 64 it
            // takes ggml's f32 tiles.
            launch("attention_f32", n * N_HEAD),
            rounding(n * Q_DIM),
            tiles(&[N_EMBD]),
            item_launch("add", n * N_EMBD),
            launch("rmsnorm", n),
            rounding(n * N_EMBD),
            tiles(&[N_FF, N_FF]),
            item_launch("swiglu", n * N_FF),
            rounding(n * N_FF),
            tiles(&[N_EMBD]),
            item_launch("add", n * N_EMBD),
        ]);
    }
    // Only the last row reaches the head: a one-token mat-vec.
    want.extend([
        item_launch("copy", N_EMBD),
        launch("rmsnorm_q8", 1),
        launch("matvec_int_q4_0", N_VOCAB / 2),
    ]);
    assert_eq!(seq(&sink), want);
    let qkv: MatPush = sink.launches[3].push_as();
    let s = scratch_base(&naive_plan(&g));
    assert_eq!((qkv.x, qkv.x_scales, qkv.k, qkv.n), (s, 0, 256, 64));
}

#[test]
fn int_matvec_switch_picks_the_integer_or_the_f32_mat_vec() {
    for (ty, suffix) in [(QuantType::Q4_0, "q4_0"), (QuantType::Q8_0, "q8_0")] {
        let m = dense_llama(ty);
        let g = m.graph(1);
        let plan = naive_plan(&g);
        let (mv, embed) = (format!("matvec_int_{suffix}"), format!("embed_{suffix}"));
        let on = m.record(&vulkan_lowering(), &g, &plan);
        assert_eq!(
            seq(&on),
            fused_small_step(1, &mv, &embed, &vulkan_lowering())
        );

        let lw = Lowering {
            int_matvec: false,
            ..vulkan_lowering()
        };
        let off = m.record(&lw, &g, &plan);
        let mv = format!("matvec_{suffix}");
        assert_eq!(seq(&off), f32_decode(&mv, &embed, "quantize_q8_0", 32));
        assert!(off.kernels().iter().all(|k| !k.starts_with("matvec_int")));
        // The f32 mat-vec reads the rounded copy in the scratch.
        let qkv: MatPush = off.launches[3].push_as();
        assert_eq!((qkv.x, qkv.x_scales), (scratch_base(&plan), 0));

        let dot = Lowering {
            int_dot_names: true,
            ..vulkan_lowering()
        };
        let dot = m.record(&dot, &g, &plan);
        assert_eq!(dot.of(&format!("matvec_int_dot_{suffix}")).count(), 9);
    }
}

#[test]
fn k_quants_decode_on_the_f32_mat_vec_over_q8_k_roundings() {
    let m = dense_llama(QuantType::Q4K);
    let g = m.graph(1);
    let sink = m.record(&vulkan_lowering(), &g, &naive_plan(&g));
    assert_eq!(
        seq(&sink),
        f32_decode("matvec_q4_k", "embed_q4_k", "quantize_q8_k", 256)
    );
}

/// The matmul launches of the 64-token dense graph under `lw`.
fn prefill_matmuls(lw: &Lowering) -> Vec<(String, u32)> {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(64);
    let sink = m.record(lw, &g, &naive_plan(&g));
    seq(&sink)
        .into_iter()
        .filter(|(k, _)| k.starts_with("matmul"))
        .collect()
}

#[test]
fn matrix_tiles_pick_the_prefill_matmul() {
    // Per block: Q/K/V, output, gate/up, down, as (128×128 tiles, 64×64
    // tiles, 32×64 tiles) over 64 tokens.
    let big = [2 + 1 + 1, 2, 4 + 4, 2];
    let small = [4 + 2 + 2, 4, 8 + 8, 4];
    let tiled = [(4 + 2 + 2) * 2, 4 * 2, (8 + 8) * 2, 4 * 2];
    let expect = |names: [&str; 4], groups: [usize; 4]| -> Vec<(String, u32)> {
        let block = names
            .iter()
            .zip(groups)
            .map(|(k, g)| launch(format!("{k}_q4_0"), g));
        block.clone().chain(block).collect()
    };
    let with = |matrix, matrix_prefetch| Lowering {
        matrix,
        matrix_prefetch,
        ..vulkan_lowering()
    };
    let cases = [
        (with(MatrixTiles::Off, true), ["matmul"; 4], tiled),
        (with(MatrixTiles::Small, true), ["matmul_cmps"; 4], small),
        (with(MatrixTiles::Small, false), ["matmul_cms"; 4], small),
        // The tiny model's matmuls have too few tiles for big ones.
        (with(MatrixTiles::Auto, true), ["matmul_cmps"; 4], small),
        (with(MatrixTiles::Auto, false), ["matmul_cms"; 4], small),
        (with(MatrixTiles::BigFrom(1), true), ["matmul_cmp"; 4], big),
        (with(MatrixTiles::BigFrom(1), false), ["matmul_cm"; 4], big),
    ];
    for (lw, names, groups) in cases {
        assert_eq!(prefill_matmuls(&lw), expect(names, groups), "{lw:?}");
    }
    // From 5 big tiles: Q/K/V have 4, gate/up 8.
    let mixed = prefill_matmuls(&with(MatrixTiles::BigFrom(5), true));
    let names = ["matmul_cmps", "matmul_cmps", "matmul_cmp", "matmul_cmps"];
    assert_eq!(mixed, expect(names, [small[0], small[1], big[2], small[3]]));
}

/// One matmul of `rows` rows of `k` values of type `ty` over `n` tokens,
/// lowered alone (weights at the weight base).
fn one_matmul(ty: QuantType, n: usize, k: usize, rows: usize, lw: &Lowering) -> RecordingSink {
    let tensors = vec![
        TensorDesc { rows: n, cols: k },
        TensorDesc {
            rows: n,
            cols: rows,
        },
    ];
    let ops = vec![Op::MatMul {
        w: 0,
        x: 0,
        bias: None,
        out: 1,
    }];
    let weights = [device_weight(ty, k, rows, WEIGHT_BASE)];
    record_bare(bare_graph(n, tensors, ops, 1), &weights, lw)
}

fn record_bare(g: Graph, weights: &[DeviceWeight], lw: &Lowering) -> RecordingSink {
    let (plan, kv) = (naive_plan(&g), tiny_kv());
    let mut sink = RecordingSink::new();
    let a = addresses_for(weights, &kv, &plan, N_VOCAB);
    super::record_graph(&mut sink, lw, &g, &plan, &a, 0..g.ops.len()).expect("lowers");
    sink
}

#[test]
fn auto_tiles_go_big_only_for_many_tiles_and_long_rows() {
    let auto = Lowering {
        matrix: MatrixTiles::Auto,
        ..vulkan_lowering()
    };
    let matmul = |k, rows| {
        seq(&one_matmul(QuantType::Q4_0, 128, k, rows, &auto))
            .pop()
            .unwrap()
    };
    // 96 tiles of 128×128 and k 2048: big.
    assert_eq!(matmul(2048, 96 * 128), launch("matmul_cmp_q4_0", 96));
    // 95 tiles: 64×64 ones, 190 rows × 2 token tiles.
    assert_eq!(matmul(2048, 95 * 128), launch("matmul_cmps_q4_0", 190 * 2));
    // Enough tiles but rows of 1024: 64×64.
    assert_eq!(matmul(1024, 96 * 128), launch("matmul_cmps_q4_0", 192 * 2));
}

#[test]
fn matmul_grids_round_ragged_shapes_up() {
    let off = vulkan_lowering();
    let small = hip_lowering();
    // 100 rows over 33 tokens of 64 values: the rounding to Q8_0 (66
    // blocks), then 2 × 2 tiles of 64 rows × 32 tokens.
    let sink = one_matmul(QuantType::Q4_0, 33, 64, 100, &off);
    assert_eq!(
        seq(&sink),
        [item_launch("quantize_q8_0", 66), launch("matmul_q4_0", 4)]
    );
    let p: MatPush = sink.launches[1].push_as();
    assert_eq!((p.rows, p.k, p.n, p.n_parts), ([100, 0, 0], 64, 33, 1));
    let q: QuantizePush = sink.launches[0].push_as();
    assert_eq!((q.n, q.out), (33 * 64, p.x));
    // 64×64 tiles: 2 × 1.
    let sink = one_matmul(QuantType::Q4_0, 33, 64, 100, &small);
    assert_eq!(seq(&sink)[1], launch("matmul_cmps_q4_0", 2));
    // From 32 tokens on, not below.
    let sink = one_matmul(QuantType::Q4_0, 32, 64, 100, &small);
    assert_eq!(seq(&sink)[1], launch("matmul_cmps_q4_0", 2));
    let sink = one_matmul(QuantType::Q4_0, 31, 64, 100, &small);
    assert_eq!(seq(&sink)[1], launch("matmul_q4_0", 2));
    // Up to 8 tokens: the mat-vec, one workgroup per row whatever the
    // token count (the f32 one, with the integer route off).
    let f32_route = Lowering {
        int_matvec: false,
        ..off
    };
    for n in [1, 2, 8] {
        let sink = one_matmul(QuantType::Q4_0, n, 64, 100, &f32_route);
        assert_eq!(seq(&sink)[1], launch("matvec_q4_0", 100));
        let sink = one_matmul(QuantType::Q4_0, n, 64, 100, &off);
        let groups = (n * 64 / 32).div_ceil(64);
        assert_eq!(
            seq(&sink),
            [
                launch("quantize_q8_packed", groups),
                launch("matvec_int_q4_0", 50)
            ]
        );
    }
    let sink = one_matmul(QuantType::Q4_0, 9, 64, 100, &off);
    assert_eq!(seq(&sink)[1], launch("matmul_q4_0", 2));
}

#[test]
fn short_rows_split_mat_vec_workgroups_into_teams() {
    let teams = Lowering {
        row_teams: true,
        ..vulkan_lowering()
    };
    let f32_route = Lowering {
        int_matvec: false,
        ..teams
    };
    // (k, rows): the f32 mat-vec's teams (8-value units a row, up to 64
    // a workgroup) and the integer one's (32-value blocks, int_rows each).
    for (k, rows, f32_teams, int_teams) in [
        (64, 100, 8, 32),
        (192, 100, 2, 8),
        (256, 1000, 2, 8),
        (512, 1000, 1, 4),
        (2048, 1000, 1, 1),
        (4096, 1000, 1, 1),
    ] {
        let sink = one_matmul(QuantType::Q4_0, 1, k, rows, &f32_route);
        let p: MatPush = sink.launches[1].push_as();
        assert_eq!(p.teams, f32_teams, "f32 teams, k {k}");
        // A split workgroup is a kernel variant of its own.
        let variant = |name: &str, teams: u32| match teams {
            1 => format!("{name}_q4_0"),
            _ => format!("{name}_teams_q4_0"),
        };
        let groups = rows.div_ceil(f32_teams as usize);
        let want = launch(variant("matvec", f32_teams), groups);
        assert_eq!(seq(&sink)[1], want, "k {k}");
        let sink = one_matmul(QuantType::Q4_0, 1, k, rows, &teams);
        let p: MatPush = sink.launches[1].push_as();
        assert_eq!(p.teams, int_teams, "integer teams, k {k}");
        let groups = rows.div_ceil(2 * int_teams as usize);
        let want = launch(variant("matvec_int", int_teams), groups);
        assert_eq!(seq(&sink)[1], want, "k {k}");
        // Without the split: one team, a row (int_rows) a workgroup.
        let sink = one_matmul(QuantType::Q4_0, 1, k, rows, &vulkan_lowering());
        let p: MatPush = sink.launches[1].push_as();
        assert_eq!(p.teams, 1);
        assert_eq!(seq(&sink)[1], launch("matvec_int_q4_0", rows.div_ceil(2)));
    }
    // Q, K and V of 256 values (32 units) in one launch: each part's rows
    // in whole workgroups of 2 teams.
    let m = dense_llama(QuantType::F32);
    let g = m.graph(1);
    let sink = m.record(&teams, &g, &naive_plan(&g));
    let qkv = sink
        .launches
        .iter()
        .find(|l| l.kernel == "matvec_teams_f32" && l.push_as::<MatPush>().n_parts == 3)
        .expect("a fused Q/K/V mat-vec");
    let p: MatPush = qkv.push_as();
    assert_eq!((p.k, p.teams), (N_EMBD as u32, 2));
    let want: u32 = p.rows.iter().map(|&r| r.div_ceil(2)).sum();
    assert_eq!(qkv.groups, want);
}

#[test]
fn float_weights_round_as_their_type_and_f32_stays_off_matrix_cores() {
    let small = hip_lowering();
    // f32 weights: no rounding, the portable matmul, the input in place.
    let sink = one_matmul(QuantType::F32, 64, 64, 64, &small);
    assert_eq!(seq(&sink), [launch("matmul_f32", 2)]);
    let p: MatPush = sink.launches[0].push_as();
    assert_eq!(p.x, ARENA_BASE);
    // f16 / bf16: rounded in blocks of 8, then the matrix cores.
    for (ty, round, name) in [
        (QuantType::F16, "quantize_f16", "matmul_cmps_f16"),
        (QuantType::BF16, "quantize_bf16", "matmul_cmps_bf16"),
    ] {
        let sink = one_matmul(ty, 64, 64, 64, &small);
        assert_eq!(
            seq(&sink),
            [item_launch(round, 64 * 64 / 8), launch(name, 1)]
        );
    }
    // And in decode, the f32 mat-vec.
    let sink = one_matmul(QuantType::F16, 1, 64, 64, &small);
    assert_eq!(
        seq(&sink),
        [item_launch("quantize_f16", 8), launch("matvec_f16", 64)]
    );
}

/// Matmuls of types `tys` (64 rows each, of 256 values) reading one input
/// of `n` tokens, as a graph.
fn sibling_matmuls(n: usize, tys: &[QuantType], lw: &Lowering) -> RecordingSink {
    let mut tensors = vec![TensorDesc { rows: n, cols: 256 }];
    let mut ops = Vec::new();
    let mut weights = Vec::new();
    for (i, &ty) in tys.iter().enumerate() {
        tensors.push(TensorDesc { rows: n, cols: 64 });
        ops.push(Op::MatMul {
            w: i,
            x: 0,
            bias: None,
            out: i + 1,
        });
        weights.push(device_weight(
            ty,
            256,
            64,
            WEIGHT_BASE + (i as u64) * 0x10000,
        ));
    }
    record_bare(bare_graph(n, tensors, ops, tys.len()), &weights, lw)
}

#[test]
fn a_group_splits_into_runs_of_one_type_and_at_most_three() {
    use QuantType::{Q4K, Q4_0, Q6K, Q8_0};
    let lw = vulkan_lowering();
    // Four Q8_0 siblings: a run of three and one of one; the second reuses
    // the Q8-packed input the first launch's rounding left.
    let sink = sibling_matmuls(1, &[Q8_0; 4], &lw);
    assert_eq!(
        seq(&sink),
        [
            launch("quantize_q8_packed", 1),
            launch("matvec_int_q8_0", 3 * 32),
            launch("matvec_int_q8_0", 32),
        ]
    );
    let (a, b): (MatPush, MatPush) = (sink.launches[1].push_as(), sink.launches[2].push_as());
    assert_eq!((a.n_parts, b.n_parts), (3, 1));
    assert_eq!(a.w, [0, 1, 2].map(|i| WEIGHT_BASE + i * 0x10000));
    assert_eq!(b.w[0], WEIGHT_BASE + 3 * 0x10000);
    assert_eq!((a.x, a.x_scales), (b.x, b.x_scales));
    // Mixed types: one launch per type; the integer runs share a rounding.
    let sink = sibling_matmuls(1, &[Q4_0, Q4_0, Q8_0], &lw);
    assert_eq!(
        seq(&sink),
        [
            launch("quantize_q8_packed", 1),
            launch("matvec_int_q4_0", 64),
            launch("matvec_int_q8_0", 32),
        ]
    );
    let sink = sibling_matmuls(1, &[Q4K, Q4_0], &lw);
    assert_eq!(
        sink.kernels(),
        [
            "quantize_q8_k",
            "matvec_q4_k",
            "quantize_q8_packed",
            "matvec_int_q4_0"
        ]
    );
    // In prefill every run rounds its input again.
    let sink = sibling_matmuls(64, &[Q4K, Q4K, Q6K], &lw);
    assert_eq!(
        seq(&sink),
        [
            item_launch("quantize_q8_k", 64),
            launch("matmul_q4_k", 2 * 2),
            item_launch("quantize_q8_k", 64),
            launch("matmul_q6_k", 2),
        ]
    );
}

#[test]
fn a_weight_whose_rows_are_not_whole_blocks_is_refused() {
    let tensors = vec![
        TensorDesc { rows: 1, cols: 64 },
        TensorDesc { rows: 1, cols: 8 },
    ];
    let ops = vec![Op::MatMul {
        w: 0,
        x: 0,
        bias: None,
        out: 1,
    }];
    let g = bare_graph(1, tensors, ops, 1);
    let weights = [DeviceWeight {
        name: "w".into(),
        ty: QuantType::Q4K,
        address: WEIGHT_BASE,
        cols: 64,
        rows: 8,
        row_bytes: 0,
        experts: 1,
    }];
    let (plan, kv) = (naive_plan(&g), tiny_kv());
    let a = addresses_for(&weights, &kv, &plan, N_VOCAB);
    let mut sink = RecordingSink::new();
    let r = super::record_graph(&mut sink, &vulkan_lowering(), &g, &plan, &a, 0..1);
    let refused = |tensor: &str, ty| tensor == "w" && ty == QuantType::Q4K;
    assert!(
        matches!(r, Err(BackendError::UnsupportedWeight { ref tensor, ty }) if refused(tensor, ty)),
        "{r:?}"
    );
}

#[test]
fn a_part_runs_fusions_that_cross_its_end_unfused() {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(1);
    let plan = naive_plan(&g);
    let lw = vulkan_lowering();
    let part = |ops| m.record_ops(&lw, &g, &plan, ops).unwrap();
    // Ops 0..3 end inside the Q/K/V group (2..5): the norm still rounds for
    // Q, which runs alone; K and V then run alone too, K rounding again.
    assert_eq!(
        seq(&part(0..3)),
        [
            launch("embed_q4_0", 1),
            launch("rmsnorm_q8", 1),
            launch("matvec_int_q4_0", Q_DIM / 2)
        ]
    );
    assert_eq!(
        seq(&part(3..5)),
        [
            launch("quantize_q8_packed", 1),
            launch("matvec_int_q4_0", KV_DIM / 2),
            launch("matvec_int_q4_0", KV_DIM / 2)
        ]
    );
    // A part ending at the norm: it cannot write for a matmul outside.
    assert_eq!(part(0..2).kernels(), ["embed_q4_0", "rmsnorm"]);
    // RoPE of Q and K (5, 6) and the store (7), split after 6.
    assert_eq!(part(5..7).kernels(), ["rope", "rope"]);
    assert_eq!(part(7..8).kernels(), ["store_kv"]);
    // The output projection (9) and its residual add (10), split between.
    assert_eq!(
        part(9..10).kernels(),
        ["quantize_q8_packed", "matvec_int_q4_0"]
    );
    assert_eq!(part(10..11).kernels(), ["add"]);
    // Parts that keep every fusion concatenate to the whole graph.
    let whole = m.record(&lw, &g, &plan);
    let (a, b) = (part(0..17), part(17..35));
    assert_eq!([a.launches, b.launches].concat(), whole.launches);
}

#[test]
fn a_plan_that_reuses_the_matmul_input_for_the_sum_keeps_the_add() {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(1);
    let b = &dense_blocks(&g)[0];
    // The attention output is dead once the output projection has read
    // it, so a plan may put the residual sum in its bytes; the fused
    // kernel would then overwrite its own input.
    let mut plan = naive_plan(&g);
    plan.offsets[b.x_attn] = plan.offsets[b.attn];
    let sink = m.record(&vulkan_lowering(), &g, &plan);
    assert_eq!(
        &sink.kernels()[4..8],
        [
            "attention_staged_q8",
            "matvec_int_q4_0",
            "add",
            "rmsnorm_q8"
        ]
    );
    let t = |id: TensorId| ARENA_BASE + plan.offsets[id] as u64;
    let wo: MatPush = sink.launches[5].push_as();
    assert_eq!((wo.out[0], wo.residual), (t(b.o), 0));
    let add: EltwisePush = sink.launches[6].push_as();
    assert_eq!((add.a, add.b, add.out), (t(b.x), t(b.o), t(b.x_attn)));
    // Later blocks are untouched: 21 + 1 launches.
    assert_eq!(sink.launches.len(), 22);
}

/// A MoE step (qwen3moe-like, Q4_0 attention) of `n` ≤ 8 tokens with
/// experts of suffix `xs`: in integers (`int`, over Q8-packed inputs), else
/// the f32 expert mat-vec over inputs rounded by `round` in blocks of
/// `block`.
fn moe_small_step(
    n: usize,
    xs: &str,
    int: bool,
    (round, block): (&str, usize),
) -> Vec<(String, u32)> {
    let pairs = n * N_EXPERT_USED;
    let mv = "matvec_int_q4_0";
    let mut want = vec![launch("embed_q4_0", n), launch("rmsnorm_q8", n)];
    for layer in 0..N_LAYER {
        want.extend([
            launch(mv, (Q_DIM + KV_DIM + KV_DIM) / 2),
            // Q's and K's norms, their RoPE and the KV store in one
            // launch: a workgroup per head, then V's values.
            launch(
                "norm_rope_kv",
                n * (N_HEAD + N_HEAD_KV) + per_item("norm_rope_kv", n * KV_DIM) as usize,
            ),
            launch("attention_staged_q8", n * N_HEAD),
            launch(mv, N_EMBD / 2),
            // The FFN norm, the f32 router and the routing in one launch:
            // a workgroup per expert, each normalising the rows it reads
            // and writing its share of the norm's output (Q8-packed too
            // when the experts take the integer route), the last to
            // finish routing.
            launch("moe_norm_router_f32", N_EXPERT),
        ]);
        if int {
            // Two rows of one pair a workgroup, the input Q8-packed by the
            // norm (64 blocks a workgroup where packed alone).
            let packed_as = |k: &str, values: usize| launch(k, (values / 32).div_ceil(64));
            let id = format!("matvec_id_int_{xs}");
            want.extend([
                // Gate and up in one launch: the grid twice one stack's.
                launch(&id, 2 * pairs * N_FF_EXP.div_ceil(2)),
                // SwiGLU and down's Q8 packing in one pass.
                packed_as("swiglu_q8", pairs * N_FF_EXP),
                launch(&id, pairs * N_EMBD.div_ceil(2)),
            ]);
        } else {
            // One workgroup per (choice, row); up reuses gate's rounding.
            want.extend([
                item_launch(round, n * N_EMBD / block),
                launch(format!("matvec_id_{xs}"), pairs * N_FF_EXP),
                launch(format!("matvec_id_{xs}"), pairs * N_FF_EXP),
                item_launch("swiglu", pairs * N_FF_EXP),
                item_launch(round, pairs * N_FF_EXP / block),
                launch(format!("matvec_id_{xs}"), pairs * N_EMBD),
            ]);
        }
        // The residual add and the next norm (the next block's, or the
        // output norm) folded into the sum, but where the copy of a prompt
        // step's last row comes between.
        if layer + 1 < N_LAYER || n == 1 {
            want.push(launch("moe_sum_rmsnorm_q8", n));
        } else {
            want.extend([
                item_launch("moe_sum", n * N_EMBD),
                item_launch("copy", N_EMBD),
                launch("rmsnorm_q8", 1),
            ]);
        }
    }
    want.push(launch(mv, N_VOCAB / 2));
    want
}

#[test]
fn moe_steps_route_run_the_chosen_experts_and_sum() {
    use QuantType::{Q4K, Q4_0};
    for (xt, xs, int, round) in [
        (Q4_0, "q4_0", true, ("quantize_q8_0", 32)),
        (Q4K, "q4_k", false, ("quantize_q8_k", 256)),
    ] {
        let m = qwen3_moe(Q4_0, xt);
        for n in [1, 7] {
            let g = m.graph(n);
            let sink = m.record(&vulkan_lowering(), &g, &naive_plan(&g));
            assert_eq!(seq(&sink), moe_small_step(n, xs, int, round), "{xt} {n}");
        }
    }
    // HIP too, without the `_dot` names; with `int_expert_matvec` off,
    // the f32 expert mat-vec.
    let m = qwen3_moe(Q4_0, Q4_0);
    let g = m.graph(1);
    let sink = m.record(&hip_lowering(), &g, &naive_plan(&g));
    let kernels = sink.kernels();
    assert!(kernels.contains(&"matvec_id_int_q4_0"), "{kernels:?}");
    let f32_experts = Lowering {
        int_expert_matvec: false,
        ..hip_lowering()
    };
    let sink = m.record(&f32_experts, &g, &naive_plan(&g));
    let kernels = sink.kernels();
    assert!(kernels.contains(&"matvec_id_q4_0"), "{kernels:?}");
    assert!(!kernels.iter().any(|k| k.starts_with("matvec_id_int")));
}

/// The planner keeps the expert rows (and the residual) alive through the
/// residual add after their sum and the next block's norm, so neither
/// output lands on them and every layer ends in one launch: the sum, the
/// add and the norm (`moe_sum_rmsnorm_q8`), except where the last layer
/// of a prompt step is followed by the copy of its last row.
#[test]
fn the_planned_step_ends_each_moe_layer_in_one_launch() {
    let m = qwen3_moe(QuantType::Q4_0, QuantType::Q4_0);
    for n in [1, 7] {
        let g = m.graph(n);
        let plan = ArenaPlan::new(&g);
        let sink = m.record(&vulkan_lowering(), &g, &plan);
        let kernels = sink.kernels();
        assert!(!kernels.contains(&"add"), "n={n}: {kernels:?}");
        let fused: Vec<MoeSumNormPush> = sink
            .launches
            .iter()
            .filter(|l| l.kernel == "moe_sum_rmsnorm_q8")
            .map(|l| l.push_as())
            .collect();
        let plain: Vec<MoeSumPush> = sink
            .launches
            .iter()
            .filter(|l| l.kernel == "moe_sum")
            .map(|l| l.push_as())
            .collect();
        let last_apart = usize::from(n > 1);
        assert_eq!(fused.len(), N_LAYER - last_apart, "n={n}: {kernels:?}");
        assert_eq!(plain.len(), last_apart, "n={n}: {kernels:?}");
        assert!(plain.iter().all(|p| p.residual != 0), "n={n}");
        for p in &fused {
            assert_eq!(
                (p.cols, p.n_rows, p.k),
                (N_EMBD as u32, n as u32, N_EXPERT_USED as u32)
            );
            assert!(p.residual != 0 && p.sum != 0 && p.q8 != 0, "n={n}");
        }
        // Each layer's attention norm but the first is fused away, and
        // every FFN norm runs in its router's launch.
        let norms = kernels.iter().filter(|k| **k == "rmsnorm_q8").count();
        assert_eq!(norms, 1 + last_apart, "n={n}: {kernels:?}");
        let routers: Vec<MoeRouterPush> = sink
            .launches
            .iter()
            .filter(|l| l.kernel == "moe_norm_router_f32")
            .map(|l| l.push_as())
            .collect();
        assert_eq!(routers.len(), N_LAYER, "n={n}");
        assert!(routers.iter().all(|r| r.norm_x != 0 && r.q8 != 0), "n={n}");
        // A decode step under the real plan fuses all that the plan
        // without reuse does: the Q and K norms in one launch too (the
        // planner keeps Q alive through the K norm).
        if n == 1 {
            let want = moe_small_step(1, "q4_0", true, ("quantize_q8_0", 32));
            assert_eq!(seq(&sink), want);
        }
    }
}

#[test]
fn moe_push_blocks_address_the_experts() {
    let m = qwen3_moe(QuantType::Q4_0, QuantType::Q8_0);
    let n = 7;
    let g = m.graph(n);
    let plan = naive_plan(&g);
    let sink = m.record(&vulkan_lowering(), &g, &plan);
    let t = |id: TensorId| ARENA_BASE + plan.offsets[id] as u64;
    let s = scratch_base(&plan);
    // Block 0's feed-forward: 13 its norm, then 14 router, 15 top-k,
    // 16 gate, 17 up, 18 SwiGLU, 19 down, 20 sum.
    let ffn = &g.ops[14..21];
    let Op::TopKGate {
        logits,
        ids,
        weights,
        ..
    } = ffn[1]
    else {
        panic!("{:?}", ffn[1])
    };
    let (gate, up, act, down, sum) = (
        out_of(&ffn[2]),
        out_of(&ffn[3]),
        out_of(&ffn[4]),
        out_of(&ffn[5]),
        out_of(&ffn[6]),
    );
    let Op::RmsNorm { out: h, .. } = g.ops[13] else {
        panic!("{:?}", g.ops[13])
    };
    let lw = &m.model.weights.layers[0];
    let crate::model::FfnWeights::Moe {
        router,
        gate_exps,
        up_exps,
        down_exps,
        ..
    } = lw.ffn
    else {
        panic!("a MoE block")
    };

    let Op::RmsNorm {
        x: ffn_in,
        weight: ffn_norm,
        ..
    } = g.ops[13]
    else {
        panic!("{:?}", g.ops[13])
    };
    // The f32 router runs the FFN norm in front of it and routes its own
    // logits, counting its workgroups in the step's first counter. It
    // writes the norm's f32 output (its own input) and the experts' Q8
    // input; the routing leaves the scratch alone.
    let l = &sink.launches[6..11];
    assert_eq!(
        (l[0].kernel.as_str(), l[0].groups),
        ("moe_norm_router_f32", 8)
    );
    let r: MoeRouterPush = l[0].push_as();
    assert_eq!(
        (r.x, r.w, r.bias, r.logits, r.ids, r.weights),
        (t(h), m.address(router), 0, t(logits), t(ids), t(weights))
    );
    assert_eq!(
        (r.norm_x, r.norm_w, r.q8, r.eps),
        (t(ffn_in), m.address(ffn_norm), s, g.rms_eps)
    );
    assert_eq!(
        (r.cols, r.n_expert, r.n, r.k, r.normalize),
        (256, 8, 7, 2, 1)
    );
    assert_eq!(r.counter, STEP_BASE + plan.step_inputs.counters_at() as u64);
    // Without counters in the step: the norm, the mat-vec, then the
    // routing.
    let mut uncounted = plan.clone();
    uncounted.step_inputs.counters = 0;
    let apart = m.record(&vulkan_lowering(), &g, &uncounted);
    assert_eq!(apart.launches[6].kernel, "rmsnorm_q8");
    let norm: NormPush = apart.launches[6].push_as();
    assert_eq!((norm.out, norm.q8), (t(h), s));
    let r: MatPush = apart.launches[7].push_as();
    assert_eq!(
        (r.x, r.w[0], r.out[0]),
        (t(h), m.address(router), t(logits))
    );
    assert_eq!((r.rows[0], r.k, r.n), (8, 256, 7));
    let route: MoeRoutePush = apart.launches[8].push_as();
    assert_eq!(
        (route.logits, route.ids, route.weights),
        (t(logits), t(ids), t(weights))
    );
    assert_eq!(
        (route.n_rows, route.n_expert, route.k, route.normalize),
        (7, 8, 2, 1)
    );
    let l = &sink.launches[4..11];
    // Q8_0 rows of 256 values: 8 blocks of 34 bytes; an expert of gate is
    // 512 such rows, of down 256 rows of 512 values. Gate and up share a
    // launch (up as the second stack).
    for (launch, w, x, out, rows, k, x_div) in [
        (&l[3], gate_exps, s, gate, 512, 256, 2),
        (&l[5], down_exps, s, down, 256, 512, 1),
    ] {
        let p: MatIdPush = launch.push_as();
        assert_eq!((p.x, p.w, p.ids, p.out), (x, m.address(w), t(ids), t(out)));
        assert_eq!(p.expert_bytes, 512 * 8 * 34);
        assert_eq!(
            (p.rows, p.k, p.n_pairs, p.x_div, p.bias),
            (rows, k, 14, x_div, 0)
        );
    }
    let gate_up: MatIdPush = l[3].push_as();
    assert_eq!(
        (gate_up.up_w, gate_up.up_out, gate_up.up_bias),
        (m.address(up_exps), t(up), 0)
    );
    let down_push: MatIdPush = l[5].push_as();
    assert_eq!((down_push.up_w, down_push.up_out), (0, 0));
    // SwiGLU writes its output and its Q8 packing for down in one pass.
    assert_eq!(l[4].kernel, "swiglu_q8");
    let sw: QuantizePush = l[4].push_as();
    assert_eq!(
        (sw.x, sw.up, sw.act, sw.out, sw.n),
        (t(gate), t(up), t(act), s, 14 * 512)
    );
    // The sum with the residual add after it and block 1's attention norm
    // (Q8 for its Q/K/V mat-vec) in one launch.
    let Op::Add { a, b, out: added } = g.ops[21] else {
        panic!("{:?}", g.ops[21])
    };
    let Op::RmsNorm {
        x: normed,
        weight: norm_w,
        out: h1,
        ..
    } = g.ops[22]
    else {
        panic!("{:?}", g.ops[22])
    };
    assert_eq!(normed, added);
    let residual = if a == sum { b } else { a };
    assert_eq!(l[6].kernel, "moe_sum_rmsnorm_q8");
    let sum_push: MoeSumNormPush = l[6].push_as();
    assert_eq!(
        (
            sum_push.x,
            sum_push.weights,
            sum_push.residual,
            sum_push.sum,
            sum_push.w,
            sum_push.out,
            sum_push.q8,
        ),
        (
            t(down),
            t(weights),
            t(residual),
            t(added),
            m.address(norm_w),
            t(h1),
            s
        )
    );
    assert_eq!((sum_push.n_rows, sum_push.cols, sum_push.k), (7, 256, 2));
    assert_eq!(l[6].groups, 7);
    // Qwen normalises Q and K per head and rotates halves (NeoX): the
    // norms, RoPE and the KV store in one launch, K's heads after Q's,
    // then V's values.
    let (
        &Op::RmsNorm {
            x: qx,
            weight: qw,
            out: qo,
            ..
        },
        &Op::RmsNorm {
            x: kx,
            weight: kw,
            out: ko,
            ..
        },
        &Op::StoreKv { v, .. },
    ) = (&g.ops[5], &g.ops[6], &g.ops[9])
    else {
        panic!("{:?} {:?} {:?}", g.ops[5], g.ops[6], g.ops[9])
    };
    assert_eq!(sink.launches[3].kernel, "norm_rope_kv");
    let nr: NormRopeKvPush = sink.launches[3].push_as();
    assert_eq!(
        (nr.q, nr.q_out, nr.k, nr.k_out, nr.v),
        (t(qx), t(qo), t(kx), t(ko), t(v))
    );
    assert_eq!((nr.q_norm, nr.k_norm), (m.address(qw), m.address(kw)));
    assert_eq!(
        (nr.k_cache, nr.v_cache),
        (KV_BASE + m.kv.k_at(0) as u64, KV_BASE + m.kv.v_at(0) as u64)
    );
    assert_eq!(
        (nr.rows, nr.n_heads, nr.n_heads_kv, nr.head_dim, nr.neox),
        (7, 4, 2, 64, 1)
    );
    assert_eq!(nr.step, STEP_BASE);
    assert_eq!(
        sink.launches[3].groups,
        7 * (4 + 2) + (7 * 2 * 64usize).div_ceil(64) as u32
    );
    // A q8_0 cache has no fused store: the norms pair in one launch.
    let mut m = m;
    let ty = KvType::Q8_0;
    m.kv = KvLayout::typed(&m.model.config, N_CTX, N_CTX, KvTypes { k: ty, v: ty });
    let sink = m.record(&vulkan_lowering(), &g, &plan);
    let qn: NormPush = sink.launches[3].push_as();
    assert_eq!((qn.group, qn.n_groups, qn.q8), (64, 7 * 4, 0));
    assert_eq!((qn.x, qn.out), (t(qx), t(qo)));
    assert_eq!(
        (qn.x2, qn.w2, qn.out2, qn.n_groups2),
        (t(kx), m.address(kw), t(ko), 7 * 2)
    );
    assert_eq!(sink.launches[3].groups, 7 * (4 + 2));
}

#[test]
fn moe_prefill_keeps_the_f32_router_off_the_matrix_cores() {
    let m = qwen3_moe(QuantType::Q4K, QuantType::Q4K);
    let g = m.graph(64);
    let sink = m.record(&hip_lowering(), &g, &naive_plan(&g));
    let l = &sink.launches;
    let route = l.iter().position(|l| l.kernel == "moe_route").unwrap();
    assert_eq!(
        seq(&RecordingSink {
            launches: l[route - 2..route + 4].to_vec()
        }),
        [
            launch("rmsnorm", 64),
            // 8 experts' rows (one 64-row tile) × two 32-token tiles.
            launch("matmul_f32", 2),
            launch("moe_route", 64),
            item_launch("quantize_q8_k", 64),
            // 128 pairs grouped: 2 slots of 64 pairs + one per expert
            // (8) at most, times 8 row tiles of 64.
            launch("moe_group", 1),
            launch("matmul_id_cms_q4_k", (2 + 8) * 8),
        ]
    );
    // One grouping a layer serves its gate, up and down matmuls; decode
    // batches (at most 8 tokens) keep the mat-vec.
    let layers = sink.of("moe_route").count();
    assert_eq!(sink.of("moe_group").count(), layers);
    assert_eq!(sink.of("matmul_id_cms_q4_k").count(), 3 * layers);
    assert_eq!(sink.of("matmul_cmps_q4_k").count(), 2 * 2);
    let decode = m.graph(8);
    let dsink = m.record(&hip_lowering(), &decode, &naive_plan(&decode));
    assert_eq!(dsink.of("moe_group").count(), 0);
    assert_eq!(dsink.of("matvec_id_q4_k").count(), 3 * layers);
    // Without matrix cores, the portable tiles of 32 pairs.
    let g = m.graph(9);
    let psink = m.record(&vulkan_lowering(), &g, &naive_plan(&g));
    let group: MoeGroupPush = psink.of("moe_group").next().unwrap().push_as();
    assert_eq!((group.n_pairs, group.n_expert, group.tile), (18, 8, 32));
    assert_eq!(group.slots, 1 + 8);
    let mm: MatGroupPush = psink.of("matmul_id_q4_k").next().unwrap().push_as();
    assert_eq!((mm.slots, mm.x_div, mm.n_pairs), (9, 2, 18));
}

#[test]
fn scratch_bytes_is_the_largest_matmul_input_in_either_form() {
    // 256 values Q8-packed: quants, scales from 256, 8 blocks of 8 bytes.
    assert_eq!(q8_packed_layout(256), (256, 256 + 8 * 8));
    // 100 blocks: the quants rounded up to 3328 bytes, then 800 bytes.
    assert_eq!(q8_packed_layout(3200), (3328, 3328 + 800));
    assert_eq!(q8_packed_layout(32), (256, 264));
    let dense = dense_llama(QuantType::Q4_0);
    // The SwiGLU output as f32: 512 values a token.
    assert_eq!(scratch_bytes(&dense.graph(1)), 512 * 4);
    assert_eq!(scratch_bytes(&dense.graph(7)), 7 * 512 * 4);
    assert_eq!(scratch_bytes(&dense.graph(64)), 64 * 512 * 4);
    // The experts' SwiGLU output, a row per choice.
    let moe = qwen3_moe(QuantType::Q4_0, QuantType::Q4_0);
    assert_eq!(scratch_bytes(&moe.graph(1)), 2 * 512 * 4);
    assert_eq!(scratch_bytes(&moe.graph(7)), 14 * 512 * 4);
    // A 32-value input: Q8-packed (264 bytes) outgrows f32 (128), and the
    // size is rounded to 256.
    let g = bare_graph(
        1,
        vec![
            TensorDesc { rows: 1, cols: 32 },
            TensorDesc { rows: 1, cols: 8 },
        ],
        vec![Op::MatMul {
            w: 0,
            x: 0,
            bias: None,
            out: 1,
        }],
        1,
    );
    assert_eq!(scratch_bytes(&g), 512);
    let no_matmul = bare_graph(1, vec![TensorDesc { rows: 1, cols: 8 }], vec![], 0);
    assert_eq!(scratch_bytes(&no_matmul), 0);
}

/// Lowers `g` under the real planner and checks every launch against the
/// regions: each address in one region (weights, arena, scratch, cache,
/// step inputs), arena addresses at tensors' starts, scratch writes inside
/// `scratch_bytes`, and every reader of the scratch reading what the last
/// writer left there.
fn check_regions(m: &TinyModel, g: &Graph, lw: &Lowering) {
    let plan = ArenaPlan::new(g);
    plan.verify(g).unwrap();
    let sink = m.record(lw, g, &plan);
    let s = scratch_base(&plan);
    let s_end = s + scratch_bytes(g) as u64;
    let arena_end = ARENA_BASE + plan.arena_bytes as u64;
    assert!(arena_end <= s);
    let starts: HashSet<u64> = plan
        .offsets
        .iter()
        .map(|&o| ARENA_BASE + o as u64)
        .collect();
    let weights: HashSet<u64> = m.weights.iter().map(|w| w.address).collect();
    let weights_end = WEIGHT_BASE + m.model.weights.region_bytes;
    let kv_end = KV_BASE + m.kv.bytes() as u64;
    let context = |l: &Launch| format!("{} ({})", l.kernel, l.label);
    // The scratch's content: Q8-packed (quants, scales) or a rounding of
    // this many values.
    let (mut q8, mut rounded): (Option<(u64, u64)>, Option<u32>) = (None, None);
    // The grouping table written last: (table, slots, pairs).
    let table_at = s + table_offset(g) as u64;
    let mut table: Option<(u64, u32, u32)> = None;
    for l in &sink.launches {
        for (field, a) in addresses(l) {
            let ok = match a {
                _ if (WEIGHT_BASE..weights_end).contains(&a) => weights.contains(&a),
                _ if (ARENA_BASE..arena_end).contains(&a) => {
                    starts.contains(&a) || (l.kernel == "copy" && field == "a")
                }
                _ if (s..s_end).contains(&a) => true,
                _ if (KV_BASE..kv_end).contains(&a) => field.ends_with("_cache"),
                _ if (PARTIALS_BASE..PARTIALS_BASE + (1 << 30)).contains(&a) => field == "partials",
                _ if field == "counters" || field == "counter" => {
                    let counters = STEP_BASE + plan.step_inputs.counters_at() as u64;
                    a == counters && plan.step_inputs.counters >= g.n_tokens * N_HEAD
                }
                _ => a == STEP_BASE && field == "step",
            };
            assert!(ok, "{}: {field} = {a:#x}", context(l));
        }
        for (lo, hi) in scratch_writes(l) {
            assert!(
                s <= lo && lo < hi && hi <= s_end,
                "{}: writes {lo:#x}..{hi:#x}",
                context(l)
            );
            // Roundings stay below the table; the table above them.
            let grouping = l.kernel == "moe_group";
            assert!(
                if grouping {
                    lo == table_at
                } else {
                    hi <= table_at
                },
                "{}: writes {lo:#x}..{hi:#x}, the table at {table_at:#x}",
                context(l)
            );
        }
        // Q8-packed writers: quants from the scratch's start, scales where
        // `q8_packed_layout` puts them for the values written.
        let packed = |quants: u64, scales: u64, n: usize| {
            assert_eq!(
                (quants, scales),
                (s, s + n.next_multiple_of(256) as u64),
                "{}",
                context(l)
            );
            Some((quants, scales))
        };
        match l.kernel.as_str() {
            "quantize_q8_packed" | "swiglu_q8" => {
                let p: QuantizePush = l.push_as();
                (q8, rounded) = (packed(p.out, p.scales, p.n as usize), None);
            }
            "rmsnorm_q8" => {
                let p: NormPush = l.push_as();
                let n = (p.group * p.n_groups) as usize;
                (q8, rounded) = (packed(p.q8, p.q8_scales, n), None);
            }
            "moe_sum_rmsnorm_q8" => {
                let p: MoeSumNormPush = l.push_as();
                let n = (p.cols * p.n_rows) as usize;
                (q8, rounded) = (packed(p.q8, p.q8_scales, n), None);
            }
            "attention_staged_q8" => {
                let p: AttentionPush = l.push_as();
                let n = (p.n_tokens * p.n_head * p.head_dim) as usize;
                (q8, rounded) = (packed(p.q8, p.q8_scales, n), None);
            }
            "quantize_q8_0" | "quantize_q8_k" | "quantize_f16" | "quantize_bf16" => {
                let p: QuantizePush = l.push_as();
                assert_eq!(p.out, s, "{}", context(l));
                (q8, rounded) = (None, Some(p.n));
            }
            k if k.starts_with("matvec_int") => {
                let p: MatPush = l.push_as();
                assert_eq!(Some((p.x, p.x_scales)), q8, "{}", context(l));
                let n = (p.n * p.k) as usize;
                assert_eq!(p.x_scales, s + n.next_multiple_of(256) as u64);
            }
            k if k.starts_with("matvec_id_int") => {
                let p: MatIdPush = l.push_as();
                assert_eq!(Some((p.x, p.x_scales)), q8, "{}", context(l));
                let n = (p.n_pairs / p.x_div * p.k) as usize;
                assert_eq!(p.x_scales, s + n.next_multiple_of(256) as u64);
            }
            k if k.starts_with("matvec_id") => {
                let p: MatIdPush = l.push_as();
                let n = p.n_pairs / p.x_div * p.k;
                assert!(p.x != s || rounded == Some(n), "{}", context(l));
            }
            "moe_group" => {
                let p: MoeGroupPush = l.push_as();
                table = Some((p.table, p.slots, p.n_pairs));
            }
            k if k.starts_with("matmul_id_") => {
                let p: MatGroupPush = l.push_as();
                let n = p.n_pairs / p.x_div * p.k;
                assert!(p.x != s || rounded == Some(n), "{}", context(l));
                assert_eq!(table, Some((p.table, p.slots, p.n_pairs)), "{}", context(l));
            }
            k if k.starts_with("matvec_") || k.starts_with("matmul_") => {
                let p: MatPush = l.push_as();
                assert!(p.x != s || rounded == Some(p.n * p.k), "{}", context(l));
            }
            // Element-wise and other ops leave the scratch as it was but
            // no later reader relies on that.
            _ => {}
        }
    }
}

#[test]
fn launches_keep_to_their_regions_and_the_scratch_layout() {
    use QuantType::{F16, Q4K, Q4_0, Q8_0};
    let f32_route = Lowering {
        int_matvec: false,
        ..vulkan_lowering()
    };
    let unfused = Lowering {
        fuse: false,
        ..hip_lowering()
    };
    let lowerings = [vulkan_lowering(), hip_lowering(), f32_route, unfused];
    let models = [
        dense_llama(Q4_0),
        dense_llama(Q8_0),
        dense_llama(Q4K),
        dense_llama(F16),
        qwen3_moe(Q4_0, Q4_0),
        qwen3_moe(Q8_0, Q4K),
    ];
    for m in &models {
        for n in [1, 7, 64] {
            let g = m.graph(n);
            for lw in &lowerings {
                check_regions(m, &g, lw);
            }
        }
    }
}

#[test]
fn check_graph_refuses_what_exceeds_the_reservation() {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(1);
    let plan = ArenaPlan::new(&g);
    let fits = Reserved {
        arena_bytes: plan.arena_bytes as u64,
        scratch_bytes: 2048,
        max_tokens: 1,
        logits_bytes: 320 * 4,
    };
    check_graph(&g, &plan, &fits, None).unwrap();
    let exceeds = |r: Reserved, g: &Graph, plan: &ArenaPlan| match check_graph(g, plan, &r, None) {
        Err(BackendError::ExceedsReservation {
            what,
            needed,
            reserved,
        }) => (what, needed, reserved),
        other => panic!("{other:?}"),
    };
    let arena = plan.arena_bytes as u64;
    let cases = [
        (
            Reserved {
                arena_bytes: arena - 1,
                ..fits
            },
            ("the activation arena", arena, arena - 1),
        ),
        (
            Reserved {
                scratch_bytes: 2047,
                ..fits
            },
            ("the activation scratch", 2048, 2047),
        ),
        // Four header words, one token id and a counter per head, against
        // four.
        (
            Reserved {
                max_tokens: 0,
                ..fits
            },
            ("the step-input region", 4 * (5 + N_HEAD as u64), 16),
        ),
        (
            Reserved {
                logits_bytes: 1279,
                ..fits
            },
            ("the logits readback", 1280, 1279),
        ),
    ];
    for (r, want) in cases {
        assert_eq!(exceeds(r, &g, &plan), want);
    }
    // A prefill graph does not fit what was reserved for decode.
    let g64 = m.graph(64);
    let p64 = ArenaPlan::new(&g64);
    let big_arena = Reserved {
        arena_bytes: p64.arena_bytes as u64,
        ..fits
    };
    assert_eq!(exceeds(fits, &g64, &p64).0, "the activation arena");
    assert_eq!(
        exceeds(big_arena, &g64, &p64),
        ("the activation scratch", 64 * 512 * 4, 2048)
    );
    // Attention shapes the kernels do not take.
    for (head_dim, n_head_kv) in [(512, 2), (64, 3), (64, 0)] {
        let mut bad = g.clone();
        bad.attention.head_dim = head_dim;
        bad.attention.n_head_kv = n_head_kv;
        let r = check_graph(&bad, &plan, &fits, None);
        assert!(matches!(r, Err(BackendError::Unsupported { .. })), "{r:?}");
    }
}

/// Decode on a device with compute units to fill: each layer's staged
/// attention becomes `attention_split` over runs of positions, the row's
/// last run merging them into the Q8-packed output (counting runs in the
/// step's counters); a plan without counters gets a combine launch that
/// reads the same partials.
#[test]
fn decode_attention_splits_over_positions_to_fill_the_device() {
    let m = dense_llama(QuantType::Q4_0);
    let staged = Lowering {
        compute_units: 16,
        ..vulkan_lowering()
    };
    let by_subgroups = Lowering {
        subgroup_decode: true,
        ..staged
    };
    for (lw, kernel) in [
        (staged, "attention_split"),
        (by_subgroups, "attention_decode"),
    ] {
        for n in [1usize, 2, 8] {
            let g = m.graph(n);
            let plan = naive_plan(&g);
            let sink = m.record(&lw, &g, &plan);
            // 8 × 16 workgroups wanted over n × 4 rows, at most N_CTX / 128
            // = 2 runs of the cache's 256 positions.
            let runs = (128usize.div_ceil(n * N_HEAD)).min(N_CTX / 128);
            assert_eq!(runs, 2);
            let split_step = |combine: bool| -> Vec<(String, u32)> {
                fused_small_step(n, "matvec_int_q4_0", "embed_q4_0", &lw)
                    .into_iter()
                    .flat_map(|(k, groups)| match k.as_str() {
                        "attention_staged_q8" | "attention_decode" => {
                            let mut l = vec![launch(kernel, n * N_HEAD * runs)];
                            if combine {
                                l.push(launch("attention_combine_q8", n * N_HEAD));
                            }
                            l
                        }
                        _ => vec![(k, groups)],
                    })
                    .collect()
            };
            assert_eq!(seq(&sink), split_step(false), "{kernel}, {n} tokens");
            let counters = STEP_BASE + plan.step_inputs.counters_at() as u64;
            assert!(plan.step_inputs.counters >= n * N_HEAD);
            let splits: Vec<AttentionPush> = sink.of(kernel).map(|l| l.push_as()).collect();
            assert_eq!(splits.len(), N_LAYER);
            for split in &splits {
                assert_eq!(
                    (split.partials, split.n_split, split.split_min),
                    (PARTIALS_BASE, runs as u32, 128)
                );
                assert_eq!(split.counters, counters, "the rows' counters");
                assert_ne!(split.q8, 0, "the merge feeds the integer mat-vec");
            }
            // No counters in the step: a combine launch merges.
            let mut uncounted = plan.clone();
            uncounted.step_inputs.counters = 0;
            let sink = m.record(&lw, &g, &uncounted);
            assert_eq!(seq(&sink), split_step(true), "{kernel}, {n} tokens");
            let pairs: Vec<_> = sink
                .launches
                .windows(2)
                .filter(|w| w[0].kernel == kernel)
                .collect();
            assert_eq!(pairs.len(), N_LAYER);
            for w in pairs {
                let (split, combine): (AttentionPush, AttentionPush) =
                    (w[0].push_as(), w[1].push_as());
                assert_eq!(split.counters, 0);
                // The combine reads what the split wrote, and writes the
                // output.
                assert_eq!(
                    (
                        combine.partials,
                        combine.n_split,
                        combine.out,
                        combine.sinks
                    ),
                    (split.partials, split.n_split, split.out, split.sinks)
                );
                assert_ne!(combine.q8, 0, "the combine feeds the integer mat-vec");
                assert_eq!(w[0].label, w[1].label);
            }
        }
        // Prefill is not split: one workgroup per (token, head), or per
        // 4 tokens of a head on wide subgroups (attention_rows).
        let g = m.graph(9);
        let sink = m.record(&lw, &g, &naive_plan(&g));
        let want = if lw.subgroup_decode {
            launch("attention_rows", 9usize.div_ceil(4) * N_HEAD)
        } else {
            launch("attention", 9 * N_HEAD)
        };
        let attention: Vec<_> = seq(&sink)
            .into_iter()
            .filter(|(k, _)| k.starts_with("attention"))
            .collect();
        assert_eq!(attention, vec![want; N_LAYER]);
    }
}

/// Where the device offers matrix cores for attention, prefill takes
/// `attention_cm64` (this model's heads are 64 wide) over tiles of 32
/// tokens of a head, with the same argument block as every attention
/// kernel; decode keeps its kernels.
#[test]
fn prefill_attention_runs_on_matrix_cores_where_offered() {
    let m = dense_llama(QuantType::Q4_0);
    let lw = Lowering {
        subgroup_decode: true,
        matrix_attention: true,
        ..vulkan_lowering()
    };
    for n in [9usize, 32, 40] {
        let g = m.graph(n);
        let sink = m.record(&lw, &g, &naive_plan(&g));
        let attention: Vec<_> = sink
            .launches
            .iter()
            .filter(|l| l.kernel.starts_with("attention"))
            .collect();
        assert_eq!(attention.len(), N_LAYER, "{n} tokens");
        for l in attention {
            assert_eq!(
                (l.kernel.as_str(), l.groups),
                ("attention_cm64", (n.div_ceil(32) * N_HEAD) as u32),
                "{n} tokens"
            );
            let push: AttentionPush = l.push_as();
            assert_eq!(
                (push.n_tokens, push.head_dim, push.partials),
                (n as u32, HEAD_DIM as u32, 0)
            );
        }
    }
    let g = m.graph(1);
    let sink = m.record(&lw, &g, &naive_plan(&g));
    assert!(sink.launches.iter().any(|l| l.kernel == "attention_decode"));
    assert!(!sink
        .launches
        .iter()
        .any(|l| l.kernel.starts_with("attention_cm")));
}

/// A split that needs more partials than the backend set aside is refused
/// rather than written past them.
#[test]
fn split_attention_is_refused_past_its_partials() {
    let m = dense_llama(QuantType::Q4_0);
    let lw = Lowering {
        compute_units: 16,
        ..vulkan_lowering()
    };
    let g = m.graph(1);
    let plan = naive_plan(&g);
    let mut a = m.addresses(&plan);
    // 4 rows × 2 runs of 64 dims and (max, sum).
    let need = 4 * 2 * (HEAD_DIM as u64 + 2) * 4;
    a.partials_bytes = need - 1;
    let mut sink = RecordingSink::new();
    let err = super::record_graph(&mut sink, &lw, &g, &plan, &a, 0..g.ops.len()).unwrap_err();
    assert!(
        matches!(
            err,
            BackendError::ExceedsReservation { needed, reserved, .. }
                if needed == need && reserved == need - 1
        ),
        "{err}"
    );
    a.partials_bytes = need;
    super::record_graph(&mut sink, &lw, &g, &plan, &a, 0..g.ops.len()).expect("fits");
}

/// A quantized cache (`-ctk q8_0 -ctv q8_0`) takes the kernels named with
/// its type: stored by block (not fused into rope), decode by runs and
/// prefill on the matrix cores or by rows on wide subgroups, the plain
/// kernel elsewhere, never the f16-only staged ones; K and V of two types
/// are refused on the GPU.
#[test]
fn a_quantized_cache_takes_its_own_kernels() {
    let mut m = dense_llama(QuantType::Q4_0);
    for ty in [KvType::Q8_0, KvType::Q4_0] {
        m.kv = KvLayout::typed(&m.model.config, N_CTX, N_CTX, KvTypes { k: ty, v: ty });
        let kernels = |lw: &Lowering, n: usize| -> Vec<(String, u32)> {
            let g = m.graph(n);
            let sink = m.record(lw, &g, &naive_plan(&g));
            let found: Vec<_> = sink
                .launches
                .iter()
                .filter(|l| l.kernel.contains("attention") || l.kernel.contains("kv"))
                .map(|l| (l.kernel.clone(), l.groups))
                .collect();
            found[..found.len() / N_LAYER].to_vec()
        };
        let wide = Lowering {
            subgroup_decode: true,
            matrix_attention: true,
            ..vulkan_lowering()
        };
        let store = |n: usize| {
            (
                format!("store_kv_{ty}"),
                (n * KV_DIM / 32).div_ceil(64) as u32,
            )
        };
        let decode = kernels(&wide, 1);
        assert_eq!(decode[0], store(1));
        assert_eq!(decode[1].0, format!("attention_decode_{ty}"));
        // Its runs merge themselves: no combine launch.
        assert_eq!(decode.len(), 2, "{decode:?}");
        let prefill = kernels(&wide, 40);
        assert_eq!(
            prefill,
            [
                store(40),
                (
                    format!("attention_cm64_{ty}"),
                    (40usize.div_ceil(32) * N_HEAD) as u32
                )
            ]
        );
        let rows = Lowering {
            matrix_attention: false,
            ..wide
        };
        assert_eq!(
            kernels(&rows, 40)[1],
            (
                format!("attention_rows_{ty}"),
                (40usize.div_ceil(4) * N_HEAD) as u32
            )
        );
        let plain = kernels(&vulkan_lowering(), 40);
        assert_eq!(
            plain,
            [store(40), (format!("attention_{ty}"), (40 * N_HEAD) as u32)]
        );
        assert_eq!(
            kernels(&vulkan_lowering(), 1)[1].0,
            format!("attention_{ty}")
        );
    }
    m.kv = KvLayout::typed(
        &m.model.config,
        N_CTX,
        N_CTX,
        KvTypes {
            k: KvType::Q8_0,
            v: KvType::F16,
        },
    );
    let g = m.graph(1);
    let err = m.record_ops(&vulkan_lowering(), &g, &naive_plan(&g), 0..g.ops.len());
    assert!(
        matches!(&err, Err(BackendError::Unsupported { reason, .. }) if reason.contains("--cache-type-k q8_0 with --cache-type-v f16")),
        "{:?}",
        err.err()
    );
}

/// A context of 131072 positions (gpt-oss's, Llama 3.1's): every cache
/// address the lowering passes lies at its layer's block in the layout
/// (byte offsets past 4 GiB stay 64-bit), the ring is the whole context,
/// and decode is split over it within the partials, for f16 and a
/// quantized cache alike.
#[test]
fn a_128k_context_lowers_without_overflow() {
    let mut m = dense_llama(QuantType::Q4_0);
    let lw = Lowering {
        subgroup_decode: true,
        compute_units: 132,
        ..vulkan_lowering()
    };
    for ty in [KvType::F16, KvType::Q8_0] {
        let n_ctx = 131072;
        m.kv = KvLayout::typed(&m.model.config, n_ctx, 512, KvTypes { k: ty, v: ty });
        // The same rows for a 70B-sized cache (80 layers of 1024-wide
        // rows): the region passes 4 GiB and its offsets stay exact.
        let mut big = m.model.config.clone();
        big.n_layer = 80;
        big.n_head_kv = 1024 / big.head_dim;
        let far = KvLayout::typed(&big, n_ctx, 512, KvTypes { k: ty, v: ty });
        let row = ty.row_bytes(1024) as u128;
        assert_eq!(far.k_at(79) as u128, 79 * 2 * n_ctx as u128 * row);
        assert_eq!(far.bytes_u128(), 80 * 2 * n_ctx as u128 * row);
        assert!(far.bytes_u128() > u32::MAX as u128);
        for n in [1usize, 40] {
            let g = m.graph(n);
            let sink = m.record(&lw, &g, &naive_plan(&g));
            let mut layer = 0;
            for l in sink
                .launches
                .iter()
                .filter(|l| l.kernel.starts_with("attention_"))
            {
                if l.kernel.starts_with("attention_combine") {
                    continue;
                }
                let push: AttentionPush = l.push_as();
                assert_eq!(push.k_cache, KV_BASE + m.kv.k_at(layer) as u64, "{ty} {n}");
                assert_eq!(push.v_cache, KV_BASE + m.kv.v_at(layer) as u64, "{ty} {n}");
                assert_eq!(push.ring, n_ctx as u32);
                if n == 1 {
                    // Split to fill the device, within MAX_SPLITS.
                    assert!(push.n_split > 1 && push.n_split as usize <= MAX_SPLITS);
                }
                layer += 1;
            }
            assert_eq!(layer, N_LAYER, "{ty} {n}");
        }
    }
}

/// gpt-oss's clamped SwiGLU in front of an integer down projection writes
/// its Q8 packing in the same pass (`swiglu_oai_q8`), with the op's alpha
/// and limit, as SwiGLU does (`swiglu_q8`).
#[test]
fn the_clamped_swiglu_rounds_its_output_for_the_experts() {
    let act = ExpertActivation::SwiGluOai {
        alpha: OAI_ALPHA,
        limit: OAI_LIMIT,
    };
    let m = qwen3_moe_with(QuantType::Q4_0, QuantType::Q8_0, act);
    let g = m.graph(1);
    let plan = naive_plan(&g);
    let sink = m.record(&vulkan_lowering(), &g, &plan);
    let kernels: Vec<&str> = sink.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert!(!kernels.contains(&"swiglu_oai"), "{kernels:?}");
    let fused: Vec<_> = sink
        .launches
        .iter()
        .filter(|l| l.kernel == "swiglu_oai_q8")
        .collect();
    assert_eq!(fused.len(), N_LAYER, "{kernels:?}");
    let p: QuantizePush = fused[0].push_as();
    assert_eq!(
        (p.alpha, p.limit, p.n),
        (OAI_ALPHA, OAI_LIMIT, (N_EXPERT_USED * N_FF_EXP) as u32)
    );
    assert_eq!(p.out, scratch_base(&plan));
    // The down mat-vec right after it reads that packing: no rounding pass
    // of its own.
    let at = kernels.iter().position(|&k| k == "swiglu_oai_q8").unwrap();
    assert!(kernels[at + 1].starts_with("matvec_id_int"), "{kernels:?}");
}

#[test]
fn a_lowering_can_ask_for_teams_on_long_rows_too() {
    // Vulkan's two teams of 32: every dense integer mat-vec takes the
    // split kernel, 2 rows a team; rows short enough for more teams keep
    // their split.
    let two = Lowering {
        row_teams: true,
        int_teams: 2,
        ..vulkan_lowering()
    };
    for (k, rows, teams) in [(4096, 1000, 2), (2048, 1000, 2), (256, 1000, 8)] {
        let sink = one_matmul(QuantType::Q4_0, 1, k, rows, &two);
        let p: MatPush = sink.launches[1].push_as();
        assert_eq!(p.teams, teams, "k {k}");
        let want = launch("matvec_int_teams_q4_0", rows.div_ceil(2 * teams as usize));
        assert_eq!(seq(&sink)[1], want, "k {k}");
    }
    // Where workgroups take one row regardless (HIP), the ask is moot.
    let hip = Lowering {
        int_teams: 2,
        ..hip_lowering()
    };
    let sink = one_matmul(QuantType::Q4_0, 1, 4096, 1000, &hip);
    let p: MatPush = sink.launches[1].push_as();
    assert_eq!(p.teams, 1);
}

#[test]
fn decode_attention_runs_are_at_least_the_lowerings_split_min() {
    let m = dense_llama(QuantType::Q4_0);
    let g = m.graph(1);
    let plan = naive_plan(&g);
    for (split_min, runs) in [(128u32, 2u32), (64, 4), (32, 8), (1, 32)] {
        let lw = Lowering {
            compute_units: 16,
            subgroup_decode: true,
            split_min,
            ..vulkan_lowering()
        };
        let sink = m.record(&lw, &g, &plan);
        let pushes: Vec<AttentionPush> = sink.of("attention_decode").map(|l| l.push_as()).collect();
        assert_eq!(pushes.len(), N_LAYER);
        for p in pushes {
            // 8 x 16 workgroups wanted over N_HEAD rows, at most N_CTX /
            // split_min runs; the kernel cuts a run no shorter.
            let want = ((128usize.div_ceil(N_HEAD)).min(N_CTX / split_min as usize)) as u32;
            assert_eq!((p.n_split, p.split_min), (want, split_min));
            assert_eq!(p.n_split, runs);
        }
    }
}
