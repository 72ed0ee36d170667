//! Executes a planned graph: every thread of the team walks the op list and
//! does its share of each op; a barrier separates ops.

use half::f16;
use rocmforge_core::graph::{Graph, Op, TensorId};
use rocmforge_core::plan::{ArenaPlan, KvLayout};
use rocmforge_core::quant::{dequantize, QuantType};

use crate::kernels::{activation, attention, norm, quant_dot, rope::RopeTable};
use crate::memory::SharedMem;
use crate::team::{Member, SpinBarrier};
use crate::weights::WeightView;

/// Granularity of the output rows threads split a matmul by: whole 8-row
/// panels of the prefill kernel, and few enough that shares stay even.
pub const TILE_ROWS: usize = 32;

/// Where each thread's private scratch lives, after the shared region that
/// holds quantized activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScratchLayout {
    pub act_bytes: usize,
    pub per_thread_bytes: usize,
}

impl ScratchLayout {
    pub fn for_graph(graph: &Graph, weights: &[WeightView], n_ctx: usize) -> ScratchLayout {
        let mut act_bytes = 0;
        for op in &graph.ops {
            if let Op::MatMul { w, x, .. } = *op {
                let t = graph.tensor(x);
                act_bytes = act_bytes.max(t.rows * activation_row_bytes(weights[w].ty, t.cols));
            }
        }
        // Attention: the f16-rounded query, then one score per position.
        let scores = (graph.attention.head_dim + n_ctx) * 4;
        ScratchLayout {
            act_bytes: act_bytes.next_multiple_of(64),
            per_thread_bytes: scores.next_multiple_of(64),
        }
    }

    pub fn total(&self, nth: usize) -> usize {
        self.act_bytes + nth * self.per_thread_bytes
    }

    /// The larger of two layouts, field by field.
    pub fn max(self, other: ScratchLayout) -> ScratchLayout {
        ScratchLayout {
            act_bytes: self.act_bytes.max(other.act_bytes),
            per_thread_bytes: self.per_thread_bytes.max(other.per_thread_bytes),
        }
    }
}

fn activation_row_bytes(weight: QuantType, k: usize) -> usize {
    let act = quant_dot::activation_type(weight);
    act.bytes_for(k as u64).expect("row length checked at load") as usize
}

/// Everything one step needs; shared read-only by the team.
pub struct Step<'a> {
    pub graph: &'a Graph,
    pub plan: &'a ArenaPlan,
    pub rope: &'a RopeTable,
    pub weights: &'a [WeightView],
    pub kv_layout: KvLayout,
    pub kv: SharedMem,
    pub arena: SharedMem,
    pub scratch: SharedMem,
    pub scratch_layout: ScratchLayout,
    pub tokens: &'a [u32],
    pub pos0: usize,
}

impl Step<'_> {
    /// # Safety
    /// Caller follows the executor's partitioning rules (see `SharedMem`).
    unsafe fn tensor<'b>(&self, t: TensorId) -> &'b mut [f32] {
        let d = self.graph.tensor(t);
        self.arena.f32s(self.plan.offsets[t], d.rows * d.cols)
    }

    /// # Safety
    /// As for `tensor`; the row range must be this thread's.
    unsafe fn rows<'b>(&self, t: TensorId, rows: std::ops::Range<usize>) -> &'b mut [f32] {
        let d = self.graph.tensor(t);
        self.arena.f32s(
            self.plan.offsets[t] + rows.start * d.cols * 4,
            rows.len() * d.cols,
        )
    }

    unsafe fn thread_scratch<'b>(&self, m: Member) -> &'b mut [u8] {
        let l = self.scratch_layout;
        self.scratch
            .bytes(l.act_bytes + m.ith * l.per_thread_bytes, l.per_thread_bytes)
    }

    /// Runs the whole graph as member `m` of the team.
    pub fn run(&self, m: Member, barrier: &SpinBarrier) {
        for op in &self.graph.ops {
            // SAFETY: each op partitions its writes by member, and the
            // barrier orders them before the next op's reads.
            unsafe { self.run_op(op, m, barrier) };
            barrier.wait();
        }
    }

    unsafe fn run_op(&self, op: &Op, m: Member, barrier: &SpinBarrier) {
        let eps = self.graph.rms_eps;
        match *op {
            Op::Embed { table, out } => {
                let w = &self.weights[table];
                let rows = m.share(self.tokens.len());
                let dst = self.rows(out, rows.clone());
                for (i, r) in rows.enumerate() {
                    let id = self.tokens[r] as usize;
                    let src = &w.bytes()[id * w.row_bytes()..(id + 1) * w.row_bytes()];
                    dequantize(w.ty, src, &mut dst[i * w.cols..(i + 1) * w.cols])
                        .expect("embedding type checked at load");
                }
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                group,
            } => {
                let d = self.graph.tensor(x);
                let n_groups = d.rows * d.cols / group;
                let range = m.share(n_groups);
                let src = self.tensor(x);
                let dst = self.tensor(out);
                let w = self.weights[weight].f32s();
                for g in range {
                    let s = g * group..(g + 1) * group;
                    norm::rms_norm(&src[s.clone()], w, eps, &mut dst[s]);
                }
            }
            Op::MatMul { w, x, bias, out } => self.matmul(m, barrier, w, x, bias, out),
            Op::Rope { x, n_heads } => {
                let d = self.graph.tensor(x);
                let head_dim = d.cols / n_heads;
                let rows = m.share(d.rows);
                let data = self.rows(x, rows.clone());
                for (i, r) in rows.enumerate() {
                    let row = &mut data[i * d.cols..(i + 1) * d.cols];
                    self.rope.apply(row, n_heads, head_dim, self.pos0 + r);
                }
            }
            Op::StoreKv { layer, k, v } => {
                let d = self.graph.tensor(k);
                let l = self.kv_layout;
                let rows = m.share(d.rows);
                let (k_src, v_src) = (self.tensor(k), self.tensor(v));
                for r in rows {
                    let pos = self.pos0 + r;
                    let kd = self
                        .kv
                        .f16s((l.k_offset(layer) + pos * l.kv_dim) * 2, l.kv_dim);
                    let vd = self
                        .kv
                        .f16s((l.v_offset(layer) + pos * l.kv_dim) * 2, l.kv_dim);
                    let row = r * d.cols..(r + 1) * d.cols;
                    for (dst, &s) in kd.iter_mut().zip(&k_src[row.clone()]) {
                        *dst = f16::from_f32(s);
                    }
                    for (dst, &s) in vd.iter_mut().zip(&v_src[row]) {
                        *dst = f16::from_f32(s);
                    }
                }
            }
            Op::Attention { layer, q, out } => self.attention(m, layer, q, out),
            Op::SwiGlu { gate, up, out } => {
                let n = self.graph.tensor(out);
                let range = m.share(n.rows * n.cols);
                let (g, u, o) = (self.tensor(gate), self.tensor(up), self.tensor(out));
                activation::silu_mul(&g[range.clone()], &u[range.clone()], &mut o[range]);
            }
            Op::Add { a, b, out } => {
                let n = self.graph.tensor(out);
                let range = m.share(n.rows * n.cols);
                let (a, b, o) = (self.tensor(a), self.tensor(b), self.tensor(out));
                o[range.clone()].copy_from_slice(&a[range.clone()]);
                activation::add_inplace(&mut o[range.clone()], &b[range]);
            }
            Op::LastRow { x, out } => {
                if m.ith == 0 {
                    let d = self.graph.tensor(x);
                    let src = self.rows(x, d.rows - 1..d.rows);
                    self.tensor(out).copy_from_slice(src);
                }
            }
        }
    }

    unsafe fn matmul(
        &self,
        m: Member,
        barrier: &SpinBarrier,
        w: usize,
        x: TensorId,
        bias: Option<usize>,
        out: TensorId,
    ) {
        let wv = &self.weights[w];
        let xd = self.graph.tensor(x);
        let (n, k, n_out) = (xd.rows, xd.cols, wv.rows);
        let arb = activation_row_bytes(wv.ty, k);
        let acts = self.scratch.bytes(0, n * arb);

        // Quantize the activations once; every output row reuses them.
        let src = self.tensor(x);
        for r in m.share(n) {
            quant_dot::quantize_activation_into(
                wv.ty,
                &src[r * k..(r + 1) * k],
                &mut acts[r * arb..(r + 1) * arb],
            );
        }
        barrier.wait();

        // Each thread computes whole row blocks of the output, for every
        // token, in one call, writing straight into the tensor.
        let mine = m.share(n_out.div_ceil(TILE_ROWS));
        let rows = (mine.start * TILE_ROWS).min(n_out)..(mine.end * TILE_ROWS).min(n_out);
        if rows.is_empty() {
            return;
        }
        let dst = self.arena.f32_ptr(self.plan.offsets[out], n * n_out);
        quant_dot::matmul_rows_strided(
            wv.ty,
            k,
            wv.bytes(),
            rows.clone(),
            acts,
            n,
            dst.add(rows.start),
            n_out,
        );
        if let Some(b) = bias.map(|b| self.weights[b].f32s()) {
            for t in 0..n {
                let o = std::slice::from_raw_parts_mut(dst.add(t * n_out + rows.start), rows.len());
                activation::add_inplace(o, &b[rows.clone()]);
            }
        }
    }

    unsafe fn attention(&self, m: Member, layer: usize, q: TensorId, out: TensorId) {
        let spec = &self.graph.attention;
        let hd = spec.head_dim;
        let group = spec.n_head / spec.n_head_kv;
        let l = self.kv_layout;
        let n = self.graph.tensor(q).rows;
        // The whole cache block of the layer; only positions < n_kv are read,
        // and this op writes none of it.
        let k_cache: &[f16] = self.kv.f16s(l.k_offset(layer) * 2, l.block_elems());
        let v_cache: &[f16] = self.kv.f16s(l.v_offset(layer) * 2, l.block_elems());
        let qs = self.tensor(q);
        let outs = self.tensor(out);
        let scratch = self.thread_scratch(m);
        let scores =
            std::slice::from_raw_parts_mut(scratch.as_mut_ptr() as *mut f32, scratch.len() / 4);
        let q_dim = spec.n_head * hd;
        for item in m.share(n * spec.n_head) {
            let (t, h) = (item / spec.n_head, item % spec.n_head);
            let span = t * q_dim + h * hd..t * q_dim + (h + 1) * hd;
            attention::attend_head(
                &qs[span.clone()],
                k_cache,
                v_cache,
                l.kv_dim,
                (h / group) * hd,
                self.pos0 + t + 1,
                hd,
                spec.scale,
                &mut outs[span],
                scores,
            );
        }
    }
}
