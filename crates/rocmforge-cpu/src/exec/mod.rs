//! Executes a planned graph: every thread of the team walks the op list and
//! does its share of each op; a barrier separates ops.

use std::sync::atomic::{AtomicUsize, Ordering};

use rocmforge_core::graph::fusion::group_starting_at;
use rocmforge_core::graph::{Graph, Op, TensorId};
use rocmforge_core::model::WeightId;
use rocmforge_core::plan::{ArenaPlan, KvLayout, KvTypes};
use rocmforge_core::quant::{dequantize, QuantType};

mod moe;

use crate::kernels::{activation, attention, norm, quant_dot, rope::RopeTable};
use crate::memory::SharedMem;
use crate::team::{Member, SpinBarrier};
use crate::weights::WeightView;

/// Granularity of the output rows threads split a prefill matmul by: whole
/// 8-row panels of the prefill kernel.
const TILE_ROWS: usize = 32;

/// Chunks per thread a decode matmul's rows are cut into: few and long, so
/// each thread streams long runs of contiguous weights from memory (every
/// new run starts cold, before the prefetchers catch up: Qwen3-30B-A3B Q4_0
/// decoded at 15.8 t/s with 64-row chunks, 21 with these), with one to
/// spare so a thread held up elsewhere leaves little tail.
const DECODE_CHUNKS_PER_THREAD: usize = 2;

/// Fewest rows of a decode chunk: small matrices are not cut finer.
const DECODE_MIN_CHUNK_ROWS: usize = 64;

/// Rows of each claimed chunk when `nth` threads split `rows` weight rows of
/// a decode step: whole 8-row groups (the interleaved Q4_0 panels).
fn decode_chunk_rows(rows: usize, nth: usize) -> usize {
    rows.div_ceil(nth * DECODE_CHUNKS_PER_THREAD)
        .next_multiple_of(8)
        .max(DECODE_MIN_CHUNK_ROWS)
}

/// Chunks per thread in prefill.
const PREFILL_CHUNKS_PER_THREAD: usize = 4;

/// Chunks of a split attention one thread takes at most: a context of
/// `n_ctx` cut into chunks (`attention::KvSplit`) dealt to `nth` threads.
fn split_slots(n_ctx: usize, nth: usize) -> usize {
    attention::KvSplit::max_chunks(n_ctx, nth.max(1)).div_ceil(nth.max(1))
}

/// Where each thread's private scratch lives, after the shared region that
/// holds quantized activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScratchLayout {
    pub act_bytes: usize,
    pub per_thread_bytes: usize,
}

impl ScratchLayout {
    /// The layout for `graph` run by `nth` threads over a context of `n_ctx`.
    pub fn for_graph(
        graph: &Graph,
        weights: &[WeightView],
        n_ctx: usize,
        nth: usize,
    ) -> ScratchLayout {
        let mut act_bytes = 0;
        for op in &graph.ops {
            match *op {
                Op::MatMul { w, x, .. } => {
                    let t = graph.tensor(x);
                    act_bytes = act_bytes.max(t.rows * activation_row_bytes(weights[w].ty, t.cols));
                }
                Op::MatMulId { w, x, out, .. } => {
                    let (t, o) = (graph.tensor(x), graph.tensor(out));
                    let arb = activation_row_bytes(weights[w].ty, t.cols);
                    act_bytes =
                        act_bytes.max(moe::GroupedScratch::new(t.rows, o.rows, arb, o.cols).total);
                }
                _ => {}
            }
        }
        // Attention: the f16-rounded query, then one score per position;
        // or, split over the cache (one token), every head's partial result
        // for each chunk the thread takes, and the kernel's buffers.
        let a = &graph.attention;
        let scores = (a.head_dim + n_ctx) * 4;
        let split = (split_slots(n_ctx, nth) * a.n_head * attention::partial_len(a.head_dim)
            + attention::cells_scratch_len(a.n_head, a.head_dim))
            * 4;
        // A prompt chunk's tiles: the tile's queries and outputs, and the
        // tiled kernel's buffers.
        let tiled =
            (2 * attention::Q_TILE * a.head_dim + attention::tiled_scratch_len(a.head_dim)) * 4;
        ScratchLayout {
            act_bytes: act_bytes.next_multiple_of(64),
            per_thread_bytes: scores.max(split).max(tiled).next_multiple_of(64),
        }
    }

    pub fn total(&self, nth: usize) -> usize {
        self.act_bytes + nth * self.per_thread_bytes
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
    /// The table of `local` Rope ops, where they have their own.
    pub rope_local: Option<&'a RopeTable>,
    pub weights: &'a [WeightView],
    pub kv_layout: &'a KvLayout,
    pub kv: SharedMem,
    pub arena: SharedMem,
    pub scratch: SharedMem,
    pub scratch_layout: ScratchLayout,
    /// Core's fusion groups of this graph (see `matmuls`).
    pub groups: &'a [std::ops::Range<usize>],
    /// The step-input region (positions and token ids), read-only here.
    pub step_inputs: SharedMem,
    /// The next unclaimed row chunk of the running matmul (see `matmul`).
    pub next_chunk: AtomicUsize,
    /// The ops this step runs: all of them, or one part of a split graph.
    pub ops: std::ops::Range<usize>,
}

impl Step<'_> {
    /// The step's first position and token ids, read from the step-input
    /// region as a GPU kernel would.
    fn inputs(&self) -> (usize, &[u32]) {
        let layout = self.plan.step_inputs;
        // SAFETY: the region is written before the team starts and only
        // read while it runs.
        let words = unsafe { self.step_inputs.u32s_ref(0, layout.words()) };
        layout.decode(words)
    }

    /// The matmul kernels this step may take: a batched step's rows must
    /// get the same bits whatever else the step holds, so it takes no
    /// panels (`quant_dot::Panels`).
    fn panels(&self) -> quant_dot::Panels {
        match self.graph.batched {
            true => quant_dot::Panels::Never,
            false => quant_dot::Panels::WhenTheyPay,
        }
    }

    /// A batched step's (sequence, position) word pairs and picked rows.
    fn batch_rows(&self) -> Option<(&[u32], &[u32])> {
        let layout = self.plan.step_inputs;
        // SAFETY: as for `inputs`.
        let words = unsafe { self.step_inputs.u32s_ref(0, layout.words()) };
        layout.decode_rows(words)
    }

    /// Row `r`'s sequence and position: its own in a batched step, else
    /// sequence 0 at `pos0 + r`.
    fn row_pos(&self, r: usize) -> (usize, usize) {
        match self.batch_rows() {
            Some((rows, _)) => (rows[2 * r] as usize, rows[2 * r + 1] as usize),
            None => (0, self.inputs().0 + r),
        }
    }

    /// The whole of tensor `t`, read-only.
    ///
    /// # Safety
    /// Nobody writes `t` during the current op (it is an input).
    unsafe fn input<'b>(&self, t: TensorId) -> &'b [f32] {
        let d = self.graph.tensor(t);
        // SAFETY: nobody writes `t` during the current op (this fn's
        // contract).
        unsafe { self.arena.f32s_ref(self.plan.offsets[t], d.rows * d.cols) }
    }

    /// Elements `elems` of tensor `t`, to write.
    ///
    /// # Safety
    /// No other thread touches these elements during the current op.
    unsafe fn output<'b>(&self, t: TensorId, elems: std::ops::Range<usize>) -> &'b mut [f32] {
        let d = self.graph.tensor(t);
        assert!(
            elems.end <= d.rows * d.cols,
            "output range outside the tensor"
        );
        // SAFETY: the elements are this thread's alone during the current
        // op (this fn's contract).
        unsafe {
            self.arena
                .f32s(self.plan.offsets[t] + elems.start * 4, elems.len())
        }
    }

    /// # Safety
    /// As for `output`: the row range must be this thread's.
    unsafe fn rows<'b>(&self, t: TensorId, rows: std::ops::Range<usize>) -> &'b mut [f32] {
        let d = self.graph.tensor(t);
        // SAFETY: the rows are this thread's alone during the current op
        // (this fn's contract).
        unsafe {
            self.arena.f32s(
                self.plan.offsets[t] + rows.start * d.cols * 4,
                rows.len() * d.cols,
            )
        }
    }

    /// Member `m`'s private scratch, as f32 (64-byte aligned).
    ///
    /// # Safety
    /// Only member `m` may call this, and only one view may be alive at a
    /// time.
    unsafe fn thread_scratch<'b>(&self, m: Member) -> &'b mut [f32] {
        let l = self.scratch_layout;
        // SAFETY: per-thread regions are disjoint, and only member `m` uses
        // this one, through one view at a time (this fn's contract);
        // regions start 64-byte aligned.
        unsafe {
            self.scratch.f32s(
                l.act_bytes + m.ith * l.per_thread_bytes,
                l.per_thread_bytes / 4,
            )
        }
    }

    /// Sequence `seq`'s region of layer `layer`'s K and V cache blocks of
    /// an f16 cache, each head at offset 0; only positions below n_kv are
    /// read.
    ///
    /// # Safety
    /// No op writes the cache while the view is alive (attention writes
    /// none of it).
    unsafe fn layer_cache<'b>(&self, layer: usize, seq: usize) -> attention::KvHead<'b> {
        let l = self.kv_layout;
        let (kb, vb) = (l.k_seq_bytes(layer), l.v_seq_bytes(layer));
        // SAFETY: inside the cache (its layout: the sequence's region of
        // the layer's blocks); no writer (this fn's contract).
        let (k, v) = unsafe {
            (
                self.kv.f16s_ref(l.k_at(layer) + seq * kb, kb / 2),
                self.kv.f16s_ref(l.v_at(layer) + seq * vb, vb / 2),
            )
        };
        attention::KvHead {
            k,
            v,
            stride: l.kv_dim,
            offset: 0,
            ring: l.capacity(layer),
        }
    }

    /// Runs the step's ops as member `m` of the team.
    pub fn run(&self, m: Member, barrier: &SpinBarrier) {
        let ops = &self.graph.ops;
        let mut i = self.ops.start;
        while i < self.ops.end {
            // A fusion group never crosses a part's end (core's split cuts
            // only where ops change backends, never inside a run of
            // matmuls of one input), but a cut one would run short here.
            let group = self.matmul_group_len(i).min(self.ops.end - i);
            // SAFETY: each op partitions its writes by member, and the
            // barrier orders them before the next op's reads.
            unsafe {
                if group > 0 {
                    self.matmuls(m, barrier, &ops[i..i + group]);
                } else {
                    self.run_op(&ops[i], m, barrier);
                }
            }
            i += group.max(1);
            barrier.wait();
        }
    }

    /// How many matmuls from op `i` on run as one phase: core's fusion
    /// group starting there (Q/K/V, gate/up), cut where the activation type
    /// changes since the phase shares one quantized input. 0 if op `i` is
    /// not a matmul.
    fn matmul_group_len(&self, i: usize) -> usize {
        let ops = &self.graph.ops;
        let Op::MatMul { w, .. } = ops[i] else {
            return 0;
        };
        let Some(group) = group_starting_at(self.groups, i) else {
            return 1;
        };
        let act = quant_dot::activation_type(self.weights[w].ty);
        ops[group]
            .iter()
            .take_while(|op| {
                matches!(op, Op::MatMul { w, .. } if quant_dot::activation_type(self.weights[*w].ty) == act)
            })
            .count()
    }

    /// Does member `m`'s share of `op`.
    ///
    /// # Safety
    /// Every member of the team runs the same op between two barriers, and
    /// nobody writes the op's inputs meanwhile (see `run`).
    unsafe fn run_op(&self, op: &Op, m: Member, barrier: &SpinBarrier) {
        let eps = self.graph.rms_eps;
        // SAFETY: every `input` below is an input of `op`, which nobody
        // writes during it; every `output`/`rows`/`kv.f16s` view lies in
        // the share `m.share` gives this member (member 0 alone writes
        // `LastRow`), so no other thread touches it; `matmuls` and
        // `attention` get this fn's own contract.
        unsafe {
            match *op {
                Op::Embed { table, out } => {
                    let w = &self.weights[table];
                    let (_, tokens) = self.inputs();
                    let rows = m.share(tokens.len());
                    let dst = self.rows(out, rows.clone());
                    for (i, r) in rows.enumerate() {
                        let id = (tokens[r] as usize).min(w.rows - 1);
                        let row = &mut dst[i * w.cols..(i + 1) * w.cols];
                        if w.interleaved {
                            quant_dot::q4_0x8::dequantize_row(w.bytes(), w.cols, id, row);
                            continue;
                        }
                        let src = &w.bytes()[id * w.row_bytes()..(id + 1) * w.row_bytes()];
                        dequantize(w.ty, src, row).expect("embedding type checked at load");
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
                    let src = self.input(x);
                    let w = self.weights[weight].f32s();
                    for g in range {
                        let s = g * group..(g + 1) * group;
                        norm::rms_norm(&src[s.clone()], w, eps, self.output(out, s));
                    }
                }
                Op::MatMul { .. } => self.matmuls(m, barrier, std::slice::from_ref(op)),
                Op::Rope { x, n_heads, local } => {
                    let table = match (local, self.rope_local) {
                        (true, Some(t)) => t,
                        _ => self.rope,
                    };
                    let d = self.graph.tensor(x);
                    let head_dim = d.cols / n_heads;
                    let rows = m.share(d.rows);
                    let data = self.rows(x, rows.clone());
                    for (i, r) in rows.enumerate() {
                        let row = &mut data[i * d.cols..(i + 1) * d.cols];
                        table.apply(row, n_heads, head_dim, self.row_pos(r).1);
                    }
                }
                Op::AttnTemperature { x, scale, floor } => {
                    let d = self.graph.tensor(x);
                    let rows = m.share(d.rows);
                    let data = self.rows(x, rows.clone());
                    for (i, r) in rows.enumerate() {
                        let f = activation::attn_temperature(self.row_pos(r).1, scale, floor);
                        for v in &mut data[i * d.cols..(i + 1) * d.cols] {
                            *v *= f;
                        }
                    }
                }
                Op::StoreKv { layer, k, v } => {
                    let d = self.graph.tensor(k);
                    let l = self.kv_layout;
                    let rows = m.share(d.rows);
                    let (k_src, v_src) = (self.input(k), self.input(v));
                    for r in rows {
                        let (seq, pos) = self.row_pos(r);
                        let slot = l.cell(layer, seq, pos);
                        let (kb, vb) = (l.k_row_bytes(), l.v_row_bytes());
                        let kd = self.kv.bytes(l.k_at(layer) + slot * kb, kb);
                        let vd = self.kv.bytes(l.v_at(layer) + slot * vb, vb);
                        let row = r * d.cols..(r + 1) * d.cols;
                        attention::store_row(l.types.k, &k_src[row.clone()], kd);
                        attention::store_row(l.types.v, &v_src[row], vd);
                    }
                }
                Op::Attention {
                    layer,
                    q,
                    out,
                    window,
                    sinks,
                } => self.attention(m, barrier, layer, (q, out), window, sinks),
                Op::SwiGlu { gate, up, out } => {
                    let n = self.graph.tensor(out);
                    let range = m.share(n.rows * n.cols);
                    let (g, u) = (self.input(gate), self.input(up));
                    let o = self.output(out, range.clone());
                    activation::silu_mul(&g[range.clone()], &u[range], o);
                }
                Op::SwiGluOai {
                    gate,
                    up,
                    out,
                    alpha,
                    limit,
                } => {
                    let n = self.graph.tensor(out);
                    let range = m.share(n.rows * n.cols);
                    let (g, u) = (self.input(gate), self.input(up));
                    let o = self.output(out, range.clone());
                    activation::swiglu_oai(&g[range.clone()], &u[range], o, alpha, limit);
                }
                Op::GeGlu { gate, up, out } => {
                    let n = self.graph.tensor(out);
                    let range = m.share(n.rows * n.cols);
                    let (g, u) = (self.input(gate), self.input(up));
                    let o = self.output(out, range.clone());
                    activation::gelu_mul(&g[range.clone()], &u[range], o);
                }
                Op::SigmoidGate { x, gate, out } => {
                    let n = self.graph.tensor(out);
                    let range = m.share(n.rows * n.cols);
                    let (src, g) = (self.input(x), self.input(gate));
                    let o = self.output(out, range.clone());
                    for (o, i) in o.iter_mut().zip(range) {
                        *o = src[i] * activation::sigmoid_as_silu_ratio(g[i / n.cols]);
                    }
                }
                Op::Scale { x, out, factor } => {
                    let n = self.graph.tensor(out);
                    let range = m.share(n.rows * n.cols);
                    let src = &self.input(x)[range.clone()];
                    for (o, &v) in self.output(out, range).iter_mut().zip(src) {
                        *o = v * factor;
                    }
                }
                Op::Add { a, b, out } => {
                    let n = self.graph.tensor(out);
                    let range = m.share(n.rows * n.cols);
                    let (a, b) = (self.input(a), self.input(b));
                    let o = self.output(out, range.clone());
                    o.copy_from_slice(&a[range.clone()]);
                    activation::add_inplace(o, &b[range]);
                }
                Op::TopKGate {
                    logits,
                    ids,
                    weights,
                    k,
                    normalize,
                } => self.top_k_gate(m, logits, (ids, weights), k, normalize),
                Op::MatMulId {
                    w,
                    x,
                    ids,
                    bias,
                    out,
                } => self.matmul_id(m, barrier, (w, x, ids, out), bias),
                Op::MoeSum { x, weights, out } => self.moe_sum(m, x, weights, out),
                Op::LastRow { x, out } => {
                    if m.ith == 0 {
                        let d = self.graph.tensor(x);
                        let src = &self.input(x)[(d.rows - 1) * d.cols..];
                        self.output(out, 0..d.cols).copy_from_slice(src);
                    }
                }
                Op::PickRows { x, out } => {
                    let d = self.graph.tensor(x);
                    let picked = self.batch_rows().map_or(&[][..], |(_, o)| o);
                    let rows = m.share(self.graph.tensor(out).rows);
                    let src = self.input(x);
                    let dst = self.rows(out, rows.clone());
                    for (i, r) in rows.enumerate() {
                        // Kernels clamp what they index with.
                        let from = (picked[r] as usize).min(d.rows - 1);
                        dst[i * d.cols..(i + 1) * d.cols]
                            .copy_from_slice(&src[from * d.cols..(from + 1) * d.cols]);
                    }
                }
            }
        }
    }

    /// Runs `ops`, matmuls of one input (see `matmul_group_len`), as one
    /// phase: the input is quantized once, then threads claim row chunks of
    /// all of them until none are left, so one slowed by the memory system
    /// or the OS does less instead of stalling the other at the next barrier.
    ///
    /// # Safety
    /// As for `run_op`, for every op of `ops`.
    unsafe fn matmuls(&self, m: Member, barrier: &SpinBarrier, ops: &[Op]) {
        let parts = ops.iter().map(|op| match *op {
            Op::MatMul { w, x, bias, out } => (w, x, bias, out),
            _ => unreachable!("matmul groups hold matmuls only"),
        });
        let Some((w0, x, _, _)) = parts.clone().next() else {
            return;
        };
        let w0 = &self.weights[w0];
        let xd = self.graph.tensor(x);
        let (n, k) = (xd.rows, xd.cols);
        let arb = activation_row_bytes(w0.ty, k);
        // SAFETY: `x` is an input of the phase, which nobody writes (this
        // fn's contract); the scratch rows are this member's share, and the
        // previous phase's reads of them ended at the barrier before this
        // one.
        unsafe {
            let src = self.input(x);
            for r in m.share(n) {
                let row = self.scratch.bytes(r * arb, arb);
                quant_dot::quantize_activation_into(w0.ty, &src[r * k..(r + 1) * k], row);
            }
        }
        // Nobody claims chunks before the barrier below, and the previous
        // phase's claims ended at the barrier after it.
        if m.ith == 0 {
            self.next_chunk.store(0, Ordering::Relaxed);
        }
        barrier.wait();
        // SAFETY: the rows were written before the barrier above; nobody
        // writes them again until the next phase, after another barrier.
        let acts = unsafe { self.scratch.bytes_ref(0, n * arb) };

        // Decode streams small chunks; prefill takes a few big ones, since
        // each call prepares its tokens anew.
        let chunk_rows = |n_out: usize| {
            if n < 4 {
                decode_chunk_rows(n_out, m.nth)
            } else {
                n_out
                    .div_ceil(m.nth * PREFILL_CHUNKS_PER_THREAD)
                    .next_multiple_of(TILE_ROWS)
            }
        };
        'claim: loop {
            let mut c = self.next_chunk.fetch_add(1, Ordering::Relaxed);
            for (w, _, bias, out) in parts.clone() {
                let wv = &self.weights[w];
                let n_out = wv.rows;
                let rows_per = chunk_rows(n_out);
                let chunks = n_out.div_ceil(rows_per);
                if c >= chunks {
                    c -= chunks;
                    continue;
                }
                let rows = c * rows_per..((c + 1) * rows_per).min(n_out);
                let dst = self.arena.f32_ptr(self.plan.offsets[out], n * n_out);
                // SAFETY: chunk `c` was claimed by this member alone (one
                // `fetch_add`), so columns `rows` of the `n` rows of `out` (in
                // range, checked by `f32_ptr`) are its alone to write.
                unsafe {
                    let out_rows = dst.add(rows.start);
                    if wv.interleaved {
                        let w = wv.bytes();
                        quant_dot::q4_0x8::matmul_rows_strided(
                            k,
                            w,
                            rows.clone(),
                            acts,
                            n,
                            out_rows,
                            n_out,
                        );
                    } else {
                        let (ty, w) = (wv.ty, wv.bytes());
                        quant_dot::matmul_rows_strided(
                            ty,
                            k,
                            w,
                            rows.clone(),
                            acts,
                            n,
                            out_rows,
                            n_out,
                            self.panels(),
                        );
                    }
                    if let Some(b) = bias.map(|b| self.weights[b].f32s()) {
                        for t in 0..n {
                            let o = std::slice::from_raw_parts_mut(
                                dst.add(t * n_out + rows.start),
                                rows.len(),
                            );
                            activation::add_inplace(o, &b[rows.clone()]);
                        }
                    }
                }
                continue 'claim;
            }
            break;
        }
    }

    /// # Safety
    /// As for `run_op`.
    unsafe fn attention(
        &self,
        m: Member,
        barrier: &SpinBarrier,
        layer: usize,
        (q, out): (TensorId, TensorId),
        window: Option<usize>,
        sinks: Option<WeightId>,
    ) {
        let sinks = sinks.map(|s| self.weights[s].f32s());
        let l = self.kv_layout;
        let n = self.graph.tensor(q).rows;
        // A quantized cache: ggml walks every (token, head) in order.
        if l.types != KvTypes::default() {
            // SAFETY: this fn's contract.
            unsafe { self.attention_typed(m, layer, (q, out), window, sinks) };
            return;
        }
        // One token, or a batched step (several sequences): each row on its
        // own, split over the cache where its view is long (ggml's split-KV
        // path), else a walk of its heads. In a batched step a row's
        // arithmetic is then the same in a step of one row or of many, so a
        // sequence served beside others gets exactly the tokens it gets
        // alone. The choice depends only on the row, so every member makes
        // the same one (and meets the same barriers).
        if self.graph.batched || n == 1 {
            for t in 0..n {
                let n_kv = self.row_pos(t).1 + 1;
                match attention::KvSplit::new(n_kv, l.capacity(layer), m.nth) {
                    // SAFETY: this fn's contract; the barrier after a row
                    // that is not the last ends every member's reads of the
                    // others' partials before the next row writes its own
                    // (after the last, the step's barrier after the op).
                    Some(split) => unsafe {
                        self.attention_split(m, barrier, layer, (q, out), window, sinks, split, t);
                        if t + 1 < n {
                            barrier.wait();
                        }
                    },
                    // SAFETY: this fn's contract.
                    None => unsafe {
                        self.attention_heads(m, layer, (q, out), sinks, window, t..t + 1)
                    },
                }
            }
            return;
        }
        if n >= attention::Q_TILE {
            // SAFETY: this fn's contract.
            unsafe { self.attention_tiled(m, layer, (q, out), window, sinks) };
            return;
        }
        // SAFETY: this fn's contract.
        unsafe { self.attention_heads(m, layer, (q, out), sinks, window, 0..n) };
    }

    /// The f16 cache's per-(token, head) walk (`attention::attend_head`)
    /// of the step's rows `rows`.
    ///
    /// # Safety
    /// As for `run_op`.
    unsafe fn attention_heads(
        &self,
        m: Member,
        layer: usize,
        (q, out): (TensorId, TensorId),
        sinks: Option<&[f32]>,
        window: Option<usize>,
        rows: std::ops::Range<usize>,
    ) {
        let spec = &self.graph.attention;
        let hd = spec.head_dim;
        // SAFETY: this op writes none of the cache or `q`; the scratch is
        // this member's, 64-byte aligned and sized for the scores (see
        // `ScratchLayout`); item `(t, h)` of `out` is written by the one
        // member that takes it (this fn's contract).
        unsafe {
            let qs = self.input(q);
            let scores = self.thread_scratch(m);
            self.head_items(m, rows, window, |seq, h, span, positions, offset| {
                let blocks = self.layer_cache(layer, seq);
                let kv = attention::KvHead { offset, ..blocks };
                attention::attend_head(
                    &qs[span.clone()],
                    &kv,
                    positions,
                    hd,
                    spec.scale,
                    sinks.map(|s| s[h]),
                    self.output(out, span),
                    scores,
                );
            });
        }
    }

    /// Attention over a cache with a quantized K or V (ggml's one-chunk
    /// walk, `attention::attend_head_typed`), items (token, head) taken
    /// strided as in the f16 walk.
    ///
    /// # Safety
    /// As for `run_op`.
    unsafe fn attention_typed(
        &self,
        m: Member,
        layer: usize,
        (q, out): (TensorId, TensorId),
        window: Option<usize>,
        sinks: Option<&[f32]>,
    ) {
        let spec = &self.graph.attention;
        let hd = spec.head_dim;
        let l = self.kv_layout;
        let n = self.graph.tensor(q).rows;
        // SAFETY: this op writes none of the cache or `q`; item `(t, h)`
        // of `out` is written by the one member that takes it (this fn's
        // contract); the blocks lie inside the cache (its layout).
        unsafe {
            let (kb, vb) = (l.k_seq_bytes(layer), l.v_seq_bytes(layer));
            let qs = self.input(q);
            self.head_items(m, 0..n, window, |seq, h, span, positions, offset| {
                let kv = attention::TypedKvHead {
                    k: self.kv.bytes_ref(l.k_at(layer) + seq * kb, kb),
                    v: self.kv.bytes_ref(l.v_at(layer) + seq * vb, vb),
                    types: l.types,
                    k_row: l.k_row_bytes(),
                    v_row: l.v_row_bytes(),
                    offset,
                    ring: l.capacity(layer),
                };
                attention::attend_head_typed(
                    &qs[span.clone()],
                    &kv,
                    positions,
                    hd,
                    spec.scale,
                    sinks.map(|s| s[h]),
                    self.output(out, span),
                );
            });
        }
    }

    /// The (token, head) items of the step's rows `rows` that member `m`
    /// takes in a per-head walk: `f(the token's sequence, head, its span of q
    /// and out, the positions it attends to, its KV head's offset in a
    /// cache row)`. Strided, not contiguous: with the causal mask a late
    /// token costs more than an early one, and taking every nth item gives
    /// each thread the same mix of both.
    fn head_items(
        &self,
        m: Member,
        rows: std::ops::Range<usize>,
        window: Option<usize>,
        mut f: impl FnMut(usize, usize, std::ops::Range<usize>, std::ops::Range<usize>, usize),
    ) {
        let spec = &self.graph.attention;
        let hd = spec.head_dim;
        let (q_dim, group) = (spec.n_head * hd, spec.n_head / spec.n_head_kv);
        for item in (m.ith..rows.len() * spec.n_head).step_by(m.nth) {
            let (t, h) = (rows.start + item / spec.n_head, item % spec.n_head);
            let (seq, pos) = self.row_pos(t);
            let span = t * q_dim + h * hd..t * q_dim + (h + 1) * hd;
            let n_kv = pos + 1;
            let first = window.map_or(0, |w| n_kv.saturating_sub(w));
            f(seq, h, span, first..n_kv, (h / group) * hd);
        }
    }

    /// ggml's tiled attention of a step of at least `Q_TILE` tokens (a
    /// prompt chunk): items are (head, tile of `Q_TILE` tokens), taken
    /// strided so every member gets early and late (cheap and dear) tiles.
    ///
    /// # Safety
    /// As for `run_op`.
    unsafe fn attention_tiled(
        &self,
        m: Member,
        layer: usize,
        (q, out): (TensorId, TensorId),
        window: Option<usize>,
        sinks: Option<&[f32]>,
    ) {
        let spec = &self.graph.attention;
        let hd = spec.head_dim;
        let group = spec.n_head / spec.n_head_kv;
        let q_dim = spec.n_head * hd;
        let n = self.graph.tensor(q).rows;
        let tiles = n.div_ceil(attention::Q_TILE);
        // A step of one sequence (batched steps take each row on its own).
        let past = self.inputs().0;
        // SAFETY: this op writes none of the cache or `q`; the scratch is
        // this member's (see `ScratchLayout`); item `(h, tile)` writes head
        // `h` of the tile's tokens in `out`, and one member takes it (this
        // fn's contract).
        unsafe {
            let qs = self.input(q);
            let scratch = self.thread_scratch(m);
            let (q_tile, rest) = scratch.split_at_mut(attention::Q_TILE * hd);
            let (o_tile, rest) = rest.split_at_mut(attention::Q_TILE * hd);
            let blocks = self.layer_cache(layer, 0);
            for item in (m.ith..spec.n_head * tiles).step_by(m.nth) {
                let (h, j) = (item % spec.n_head, item / spec.n_head);
                let tokens = j * attention::Q_TILE..((j + 1) * attention::Q_TILE).min(n);
                let positions: [std::ops::Range<usize>; attention::Q_TILE] =
                    std::array::from_fn(|r| {
                        let end = past + tokens.start + r + 1;
                        window.map_or(0, |w| end.saturating_sub(w))..end
                    });
                for (r, t) in tokens.clone().enumerate() {
                    q_tile[r * hd..(r + 1) * hd]
                        .copy_from_slice(&qs[t * q_dim + h * hd..t * q_dim + (h + 1) * hd]);
                }
                let kv = attention::KvHead {
                    offset: (h / group) * hd,
                    ..blocks
                };
                attention::attend_tile(
                    q_tile,
                    &positions[..tokens.len()],
                    &kv,
                    hd,
                    spec.scale,
                    sinks.map(|s| s[h]),
                    o_tile,
                    rest,
                );
                for (r, t) in tokens.enumerate() {
                    let span = t * q_dim + h * hd..t * q_dim + (h + 1) * hd;
                    self.output(out, span)
                        .copy_from_slice(&o_tile[r * hd..(r + 1) * hd]);
                }
            }
        }
    }

    /// ggml's split-KV attention of row `t` (a one-token step's, or one row
    /// of a batched step): member `i` runs the
    /// online softmax of every head over chunks `i`, `i + nth`, ... of the
    /// cache's cells (all query heads of a KV head together, see
    /// `attention::attend_cells`), leaving each head's partial result for
    /// each chunk in its scratch; after a barrier, each member merges the
    /// chunks of its heads (strided, as ggml) in chunk order.
    ///
    /// # Safety
    /// As for `run_op`; every member calls this with the same `split`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn attention_split(
        &self,
        m: Member,
        barrier: &SpinBarrier,
        layer: usize,
        (q, out): (TensorId, TensorId),
        window: Option<usize>,
        sinks: Option<&[f32]>,
        split: attention::KvSplit,
        t: usize,
    ) {
        let spec = &self.graph.attention;
        let hd = spec.head_dim;
        let l = self.kv_layout;
        let ring = l.capacity(layer);
        let plen = attention::partial_len(hd);
        let slot = spec.n_head * plen;
        let q_row = t * spec.n_head * hd;
        let (seq, pos) = self.row_pos(t);
        let n_kv = pos + 1;
        let first = window.map_or(0, |w| n_kv.saturating_sub(w));
        let visible = attention::rows_of(first..n_kv, ring);
        // SAFETY: this op writes none of the cache or `q`; the scratch is
        // this member's (see `ScratchLayout`: a slot per chunk it takes),
        // and its view ends before the barrier.
        unsafe {
            let kv = self.layer_cache(layer, seq);
            let qs = self.input(q);
            let (partials, rest) = self
                .thread_scratch(m)
                .split_at_mut(split.chunks.div_ceil(m.nth) * slot);
            for (c, part) in (m.ith..split.chunks)
                .step_by(m.nth)
                .zip(partials.chunks_exact_mut(slot))
            {
                // Cells a position is visible in (others are masked, as in
                // ggml), cut to chunk `c`.
                let cells = split.cells(c);
                let rows = visible.clone().map(|r| attention::clip(&r, &cells));
                attention::attend_cells(
                    &qs[q_row..q_row + spec.n_head * hd],
                    &kv,
                    spec.n_head_kv,
                    &rows,
                    hd,
                    spec.scale,
                    sinks.filter(|_| cells.start == 0),
                    part,
                    rest,
                );
            }
        }
        barrier.wait();
        let lay = self.scratch_layout;
        for h in (m.ith..spec.n_head).step_by(m.nth) {
            // SAFETY: every member wrote its partials before the barrier
            // above and writes no scratch again until the next op; head
            // `h`'s output is this member's alone. Chunk `c` is member
            // `c % nth`'s slot `c / nth`.
            unsafe {
                let parts = (0..split.chunks)
                    .filter(|&c| !split.cells(c).is_empty())
                    .map(|c| {
                        self.scratch.f32s_ref(
                            lay.act_bytes
                                + (c % m.nth) * lay.per_thread_bytes
                                + ((c / m.nth) * slot + h * plen) * 4,
                            plen,
                        )
                    });
                attention::merge_partials(
                    parts,
                    self.output(out, q_row + h * hd..q_row + (h + 1) * hd),
                );
            }
        }
    }
}
