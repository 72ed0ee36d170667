//! Single-query attention over an f16 KV cache, following the numerics of
//! ggml's CPU flash-attention path (`flash_attn_ext`, F16 K and V):
//!
//! - Q is rounded to f16 before the dot products, because ggml converts Q to
//!   K's dot type (f16) first; the products are then taken in f32.
//! - Each `q·k` is summed exactly like `ggml_vec_dot_f16` on AVX2: four
//!   8-lane f32 accumulators over 32-element steps, reduced
//!   `(a0+a2)+(a1+a3)` then across lanes, with any tail (head_dim % 32)
//!   added in f64. The score is `dot * scale`.
//! - Softmax is online, in position order, with libm `expf`: a new maximum
//!   rescales what was accumulated so far. The running sum `S*ms + vs` is
//!   one fused multiply-add on FMA builds, as ggml's compilers contract it.
//! - V is accumulated in an **f16** buffer (f16 values held in f32), rounded
//!   after every multiply-add and rescale, exactly as ggml does with an F16
//!   V cache. An f32 accumulator would be closer to the exact result, but
//!   then logits drift from llama.cpp's by ~1% of their spread after a few
//!   positions, and the drift is enough to flip activation-quantization
//!   roundings downstream; matching the reference bit for bit is what lets
//!   the fixture tests use a tight tolerance and catch real bugs.
//! - A one-token step over a view of at least 512 cache cells takes ggml's
//!   split-KV path instead: each thread runs the same online softmax over
//!   its contiguous chunk of cells for every head ([`attend_cells`]), and
//!   the chunks' partial results are merged in order ([`merge_partials`]).
//!   With one chunk this is [`attend_head`] bit for bit.

use std::ops::Range;

use half::f16;

/// One KV head's rows in a layer's cache blocks: `k` / `v` hold f16 rows
/// of `stride` elements, this head starts `offset` into a row, and
/// position `p` is row `p % ring` (a sliding-window layer's ring; any
/// larger value for a block of every position).
#[derive(Clone, Copy, Debug)]
pub struct KvHead<'a> {
    pub k: &'a [f16],
    pub v: &'a [f16],
    pub stride: usize,
    pub offset: usize,
    pub ring: usize,
}

/// One query head of one token attending over cache positions `positions`
/// (causal masking is the caller ending them at `pos + 1`; a sliding window
/// starts them `window` before that).
///
/// `kv` locates the head's K and V rows. Writes
/// `softmax(q·k * scale) · v` into `out` (`head_dim` values). A `sink` logit
/// (gpt-oss) joins the softmax's denominator after the positions, as ggml
/// folds it in, and contributes no value. `scratch` holds
/// the rounded query and the scores: at least `head_dim + positions.end`
/// values, carved by the caller from a buffer allocated once. With no
/// positions the output is all zeros, as in ggml.
///
/// # Panics
/// If a slice is too short for the given geometry (a caller bug).
#[allow(clippy::too_many_arguments)]
pub fn attend_head(
    q: &[f32],
    kv: &KvHead,
    positions: std::ops::Range<usize>,
    head_dim: usize,
    scale: f32,
    sink: Option<f32>,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    assert_eq!(q.len(), head_dim, "attend_head: query length");
    assert_eq!(out.len(), head_dim, "attend_head: output length");
    let (k_cache, v_cache, kv_stride, kv_off) = (kv.k, kv.v, kv.stride, kv.offset);
    assert!(kv.ring > 0, "attend_head: empty ring");
    let row_end = kv_off
        .checked_add(head_dim)
        .expect("attend_head: offset overflow");
    assert!(
        row_end <= kv_stride,
        "attend_head: head {kv_off}+{head_dim} outside row {kv_stride}"
    );
    // Rows read: positions below the ring's size, or the whole ring.
    let n_kv = positions.end.min(kv.ring);
    if n_kv > 0 {
        let needed = (n_kv - 1)
            .checked_mul(kv_stride)
            .and_then(|v| v.checked_add(row_end))
            .expect("attend_head: cache size overflow");
        assert!(
            k_cache.len() >= needed,
            "attend_head: K cache shorter than {n_kv} positions"
        );
        assert!(
            v_cache.len() >= needed,
            "attend_head: V cache shorter than {n_kv} positions"
        );
    }
    fn row(cache: &[f16], start: usize, len: usize) -> &[f16] {
        &cache[start..start + len]
    }

    assert!(
        scratch.len() >= head_dim,
        "attend_head: scratch shorter than head_dim"
    );
    let q16 = &mut scratch[..head_dim];
    for (d, &s) in q16.iter_mut().zip(q) {
        *d = f16::from_f32(s).to_f32();
    }

    // Online softmax over the positions in order, as ggml's flash attention:
    // a new maximum rescales what was accumulated so far.
    let simd = has_simd();
    let mut max = f32::NEG_INFINITY;
    let mut sum = 0.0f32;
    out.fill(0.0);
    for p in positions {
        let at = (p % kv.ring) * kv_stride + kv_off;
        let s = dot(simd, row(k_cache, at, head_dim), q16) * scale;
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if s > max {
            ms = (max - s).exp();
            max = s;
            scale_f16(simd, out, ms);
        } else {
            vs = (s - max).exp();
        }
        mad_f16(simd, out, row(v_cache, at, head_dim), vs);
        sum = softmax_sum(simd, sum, ms, vs);
    }
    if let Some(s) = sink {
        // ggml rescales its f32 copy of the accumulator here, unrounded,
        // and (as compiled) does not fuse this sum.
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if s > max {
            ms = (max - s).exp();
            out.iter_mut().for_each(|o| *o *= ms);
        } else {
            vs = (s - max).exp();
        }
        sum = sum * ms + vs;
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// ggml pads its view of the cache (`nek1`) to this many cells.
const CELL_PAD: usize = 256;

/// The smallest view ggml splits over threads.
const SPLIT_MIN_CELLS: usize = 512;

/// Length of one head's partial result: the running maximum `M`, the sum
/// `S`, then the `head_dim` accumulated values (f16 values held in f32).
pub fn partial_len(head_dim: usize) -> usize {
    head_dim + 2
}

/// How a one-token step's attention splits the cache's cells over threads,
/// as ggml's split-KV path (`ggml_compute_forward_flash_attn_ext_f16`)
/// does: thread `i` takes cells `i*chunk..(i+1)*chunk` of the view for
/// every head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvSplit {
    /// Cells of ggml's view of the cache (its `nek1`).
    pub n_cells: usize,
    /// Cells per thread.
    pub chunk: usize,
}

impl KvSplit {
    /// The split of a step whose query is position `n_kv - 1`, over a cache
    /// block of `rows` rows, among `nth` threads; `None` where ggml keeps
    /// its per-head path (a view under 512 cells).
    ///
    /// ggml's view is the rows in use rounded up to 256 (at least 256),
    /// within the cache's size, which llama.cpp also rounds up to 256
    /// (the context size, or a window's ring).
    pub fn new(n_kv: usize, rows: usize, nth: usize) -> Option<KvSplit> {
        let size = rows.checked_next_multiple_of(CELL_PAD)?;
        let used = n_kv.min(rows).checked_next_multiple_of(CELL_PAD)?;
        let n_cells = size.min(used.max(CELL_PAD));
        (n_cells >= SPLIT_MIN_CELLS && nth > 0).then(|| KvSplit {
            n_cells,
            chunk: n_cells.div_ceil(nth),
        })
    }

    /// Chunk `i`'s cells (empty for a thread past the view).
    pub fn cells(&self, i: usize) -> Range<usize> {
        let start = i.saturating_mul(self.chunk).min(self.n_cells);
        start..start.saturating_add(self.chunk).min(self.n_cells)
    }
}

/// The rows of a cache of `ring` rows (position `p` in row `p % ring`) that
/// hold `positions`, in row order: at most two runs, the wrapped one first.
/// ggml visits its cells in this order, skipping masked ones.
///
/// # Panics
/// If the positions do not fit in the ring.
pub fn rows_of(positions: Range<usize>, ring: usize) -> [Range<usize>; 2] {
    let len = positions.len();
    assert!(len <= ring, "rows_of: {len} positions in a ring of {ring}");
    if len == 0 {
        return [0..0, 0..0];
    }
    let start = positions.start % ring;
    let end = start + len;
    if end <= ring {
        [start..end, 0..0]
    } else {
        [0..end - ring, start..ring]
    }
}

/// The part of `rows` inside `cells`.
pub fn clip(rows: &Range<usize>, cells: &Range<usize>) -> Range<usize> {
    let start = rows.start.max(cells.start);
    start..rows.end.min(cells.end).max(start)
}

/// Cells per block of the AVX2 kernel of [`attend_cells`]: the block's K
/// and V rows, converted to f32, take at most 16 KiB of L1.
fn block_len(head_dim: usize) -> usize {
    (2048 / head_dim.max(1)).clamp(8, 32)
}

/// f32 values of scratch [`attend_cells`] needs for `n_head` query heads.
pub fn cells_scratch_len(n_head: usize, head_dim: usize) -> usize {
    let b = block_len(head_dim);
    n_head * head_dim + 2 * b * head_dim + 3 * b * HEAD_LANES + 2 * HEAD_LANES * n_head
}

/// One chunk of ggml's split-KV path: the online softmax of
/// [`attend_head`] for every query head (`q` holds them one after another;
/// `n_kv_heads` KV heads each serve an equal group of them, KV head `g` at
/// `kv.offset + g * head_dim` of a row) over cache rows `cells` (runs in
/// ascending order, rows of `kv` directly: its `ring` is not consulted),
/// leaving each head's partial result (see [`partial_len`]) in `partials`.
///
/// Each position's K and V rows are read once for all query heads of
/// their KV head, and the KV heads of a run of positions one after
/// another, so the cache is read in order; every head still sees exactly
/// ggml's sequence of operations. `sinks` (one per head) join the chunk
/// that starts the view, as in ggml; the accumulator is then widened and
/// rescaled unrounded, as ggml does before writing a partial. `scratch`
/// holds at least [`cells_scratch_len`] values.
///
/// # Panics
/// If a slice is too short for the given geometry (a caller bug).
#[allow(clippy::too_many_arguments)]
pub fn attend_cells(
    q: &[f32],
    kv: &KvHead,
    n_kv_heads: usize,
    cells: &[Range<usize>],
    head_dim: usize,
    scale: f32,
    sinks: Option<&[f32]>,
    partials: &mut [f32],
    scratch: &mut [f32],
) {
    attend_cells_with(
        has_simd(),
        q,
        kv,
        n_kv_heads,
        cells,
        head_dim,
        scale,
        sinks,
        partials,
        scratch,
    );
}

#[allow(clippy::too_many_arguments)]
fn attend_cells_with(
    simd: bool,
    q: &[f32],
    kv: &KvHead,
    n_kv_heads: usize,
    cells: &[Range<usize>],
    head_dim: usize,
    scale: f32,
    sinks: Option<&[f32]>,
    partials: &mut [f32],
    scratch: &mut [f32],
) {
    let hd = head_dim;
    assert!(
        hd > 0 && q.len().is_multiple_of(hd),
        "attend_cells: query length {} for head_dim {hd}",
        q.len()
    );
    let n_head = q.len() / hd;
    assert!(
        n_kv_heads > 0 && n_head.is_multiple_of(n_kv_heads),
        "attend_cells: {n_head} heads over {n_kv_heads} KV heads"
    );
    let group = n_head / n_kv_heads;
    let plen = partial_len(hd);
    assert_eq!(
        partials.len(),
        n_head * plen,
        "attend_cells: partials length"
    );
    if let Some(s) = sinks {
        assert_eq!(s.len(), n_head, "attend_cells: one sink per head");
    }
    assert!(
        scratch.len() >= cells_scratch_len(n_head, hd),
        "attend_cells: scratch too short"
    );
    let row_end = n_kv_heads
        .checked_mul(hd)
        .and_then(|w| w.checked_add(kv.offset))
        .expect("attend_cells: offset overflow");
    assert!(
        row_end <= kv.stride,
        "attend_cells: heads {}+{n_kv_heads}*{hd} outside row {}",
        kv.offset,
        kv.stride
    );
    for r in cells.iter().filter(|r| !r.is_empty()) {
        let needed = (r.end - 1)
            .checked_mul(kv.stride)
            .and_then(|v| v.checked_add(row_end))
            .expect("attend_cells: cache size overflow");
        assert!(
            kv.k.len() >= needed && kv.v.len() >= needed,
            "attend_cells: cache shorter than row {}",
            r.end - 1
        );
    }

    let (q16, rest) = scratch.split_at_mut(n_head * hd);
    for (d, &s) in q16.iter_mut().zip(q) {
        *d = round_f16(s);
    }
    for p in partials.chunks_exact_mut(plen) {
        p[0] = f32::NEG_INFINITY;
        p[1] = 0.0;
        p[2..].fill(0.0);
    }

    #[cfg(target_arch = "x86_64")]
    if simd && hd.is_multiple_of(LANES) {
        // SAFETY: `simd` is only true when AVX2, FMA and F16C are present;
        // every row of `cells` lies in both caches for every KV head
        // (checked above), and the scratch holds the kernel's buffers
        // (checked above).
        unsafe { cells_avx2(q16, kv, n_kv_heads, cells, hd, scale, partials, rest) };
        finish_cells(sinks, hd, partials);
        return;
    }
    let _ = rest;
    for (h, p) in partials.chunks_exact_mut(plen).enumerate() {
        let qh = &q16[h * hd..(h + 1) * hd];
        let offset = kv.offset + (h / group) * hd;
        let (head, acc) = p.split_at_mut(2);
        let (mut max, mut sum) = (head[0], head[1]);
        for row in cells.iter().flat_map(|r| r.clone()) {
            let at = row * kv.stride + offset;
            let s = dot(simd, &kv.k[at..at + hd], qh) * scale;
            let (mut ms, mut vs) = (1.0f32, 1.0f32);
            if s > max {
                ms = (max - s).exp();
                max = s;
                scale_f16(simd, acc, ms);
            } else {
                vs = (s - max).exp();
            }
            mad_f16(simd, acc, &kv.v[at..at + hd], vs);
            sum = softmax_sum(simd, sum, ms, vs);
        }
        head[0] = max;
        head[1] = sum;
    }
    finish_cells(sinks, hd, partials);
}

/// A chunk's sinks, as ggml applies them before writing its partial.
fn finish_cells(sinks: Option<&[f32]>, hd: usize, partials: &mut [f32]) {
    let Some(sinks) = sinks else {
        return;
    };
    for (p, &s) in partials.chunks_exact_mut(partial_len(hd)).zip(sinks) {
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if s > p[0] {
            ms = (p[0] - s).exp();
            p[0] = s;
            p[2..].iter_mut().for_each(|o| *o *= ms);
        } else {
            vs = (s - p[0]).exp();
        }
        p[1] = p[1] * ms + vs;
    }
}

/// ggml's merge of split partials (`ggml_flash_attn_ext_reduce_partials`)
/// for one head: chunks in order, empty ones (`S == 0`) skipped, each
/// rescaled to the running maximum in f32, then the sum's reciprocal
/// applied. The two rescaled terms are added with one fused multiply-add
/// on FMA builds, as ggml's compilers contract `a*x + b*y`; every value of
/// `out` is written.
///
/// # Panics
/// If a partial's length is not `out.len() + 2`.
pub fn merge_partials<'a>(partials: impl IntoIterator<Item = &'a [f32]>, out: &mut [f32]) {
    // Without FMA, ggml's build cannot fuse.
    let fused = has_simd();
    let mad = |a: f32, x: f32, b: f32, y: f32| {
        if fused {
            a.mul_add(x, b * y)
        } else {
            a * x + b * y
        }
    };
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0.0f32);
    out.fill(0.0);
    for p in partials {
        assert_eq!(p.len(), partial_len(out.len()), "merge_partials: length");
        let (m, s) = (p[0], p[1]);
        if s == 0.0 {
            continue;
        }
        let new_max = max.max(m);
        let scale_old = (max - new_max).exp();
        let scale_new = (m - new_max).exp();
        for (o, &v) in out.iter_mut().zip(&p[2..]) {
            *o = mad(*o, scale_old, v, scale_new);
        }
        sum = mad(sum, scale_old, s, scale_new);
        max = new_max;
    }
    if sum != 0.0 {
        let inv = 1.0 / sum;
        out.iter_mut().for_each(|o| *o *= inv);
    }
}

/// Query heads one pass of the AVX2 kernel takes: one per f32 lane.
const HEAD_LANES: usize = 8;

/// The AVX2 kernel of [`attend_cells`] for a head size of whole 32-lane
/// steps. Cells go in blocks; per KV head, the block's K and V rows are
/// widened to f32 once, then, for up to eight of its query heads at a time,
/// one head per lane: the block's scores (the dot products' cross-lane sums
/// transposed so that a vector holds one position's scores for eight
/// heads), the online softmax of all eight together, and each head's
/// accumulator over the block. Each head's operations are
/// [`attend_head`]'s, in the same order.
///
/// # Safety
/// AVX2, FMA and F16C are present; every row of `cells` lies in `kv.k` and
/// `kv.v` for all `n_kv_heads`; `q16` holds whole heads of `hd` (a multiple
/// of 32) values, an equal group per KV head; `partials` is initialized and
/// holds one partial per head; `buf` holds [`cells_scratch_len`] less the
/// query's values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn cells_avx2(
    q16: &[f32],
    kv: &KvHead,
    n_kv_heads: usize,
    cells: &[Range<usize>],
    hd: usize,
    scale: f32,
    partials: &mut [f32],
    buf: &mut [f32],
) {
    use std::arch::x86_64::*;
    let n_head = q16.len() / hd;
    let group = n_head / n_kv_heads;
    let plen = partial_len(hd);
    let blk = block_len(hd);
    let (kf, rest) = buf.split_at_mut(blk * hd);
    let (vf, rest) = rest.split_at_mut(blk * hd);
    let (scores, rest) = rest.split_at_mut(blk * HEAD_LANES);
    let (rescales, rest) = rest.split_at_mut(blk * HEAD_LANES);
    let (weights, rest) = rest.split_at_mut(blk * HEAD_LANES);
    // Each lane group's running maximum and sum (eight lanes each),
    // carried across blocks; lane group `j` of KV head `g` is entry
    // `g * per_kv + j`.
    let per_kv = group.div_ceil(HEAD_LANES);
    let state = &mut rest[..2 * HEAD_LANES * n_kv_heads * per_kv];
    for (lg, st) in state.chunks_exact_mut(2 * HEAD_LANES).enumerate() {
        let (g, j) = (lg / per_kv, lg % per_kv);
        let h0 = g * group + j * HEAD_LANES;
        let nh = HEAD_LANES.min(group - j * HEAD_LANES);
        st[..HEAD_LANES].fill(f32::NEG_INFINITY);
        st[HEAD_LANES..].fill(0.0);
        for (l, p) in partials[h0 * plen..(h0 + nh) * plen]
            .chunks_exact(plen)
            .enumerate()
        {
            (st[l], st[HEAD_LANES + l]) = (p[0], p[1]);
        }
    }
    let fast_exp = exp_avx2_matches_libm();
    let (kp, vp) = (kv.k.as_ptr(), kv.v.as_ptr());
    let scale_v = _mm256_set1_ps(scale);
    let one = _mm256_set1_ps(1.0);
    let sign = _mm256_set1_ps(-0.0);
    for run in cells {
        let mut start = run.start;
        while start < run.end {
            let n = blk.min(run.end - start);
            for g in 0..n_kv_heads {
                let offset = kv.offset + g * hd;
                for i in 0..n {
                    let at = (start + i) * kv.stride + offset;
                    for d in (0..hd).step_by(8) {
                        // SAFETY: row `start + i` is in `cells`, so KV head
                        // `g`'s `at + hd` is within both caches (this fn's
                        // contract); `i < blk` and `d + 8 <= hd` keep the
                        // stores in `kf` and `vf`.
                        unsafe {
                            let k = _mm256_cvtph_ps(_mm_loadu_si128(kp.add(at + d).cast()));
                            let v = _mm256_cvtph_ps(_mm_loadu_si128(vp.add(at + d).cast()));
                            _mm256_storeu_ps(kf.as_mut_ptr().add(i * hd + d), k);
                            _mm256_storeu_ps(vf.as_mut_ptr().add(i * hd + d), v);
                        }
                    }
                }
                for j in 0..per_kv {
                    let h0 = g * group + j * HEAD_LANES;
                    let nh = HEAD_LANES.min(group - j * HEAD_LANES);
                    for i in 0..n {
                        // SAFETY: `nh` heads from `h0` are in `q16`, row `i`
                        // in `kf`; the store is row `i` of `scores`.
                        unsafe {
                            let s = dot8_avx2(
                                kf.as_ptr().add(i * hd),
                                q16.as_ptr().add(h0 * hd),
                                hd,
                                nh,
                            );
                            _mm256_storeu_ps(
                                scores.as_mut_ptr().add(i * HEAD_LANES),
                                _mm256_mul_ps(s, scale_v),
                            );
                        }
                    }
                    // The online softmax, eight heads at once: s > M:
                    // ms = exp(M - s), M = s, vs = 1; else vs = exp(s - M).
                    // Both exponents are -|s - M| exactly.
                    let st = state[(g * per_kv + j) * 2 * HEAD_LANES..].as_mut_ptr();
                    // SAFETY: each lane group has 16 values of `state`.
                    let (mut max, mut sum) =
                        unsafe { (_mm256_loadu_ps(st), _mm256_loadu_ps(st.add(HEAD_LANES))) };
                    let mut any_new = 0;
                    for i in 0..n {
                        // SAFETY: row `i` of the block's buffers.
                        unsafe {
                            let s = _mm256_loadu_ps(scores.as_ptr().add(i * HEAD_LANES));
                            let new = _mm256_cmp_ps::<_CMP_GT_OQ>(s, max);
                            let e = exp_avx2(fast_exp, _mm256_or_ps(_mm256_sub_ps(s, max), sign));
                            max = _mm256_blendv_ps(max, s, new);
                            let ms = _mm256_blendv_ps(one, e, new);
                            let vs = _mm256_blendv_ps(e, one, new);
                            // `softmax_sum`: with ms = 1 the fused form is
                            // the plain sum.
                            sum = _mm256_fmadd_ps(sum, ms, vs);
                            any_new |= _mm256_movemask_ps(new);
                            _mm256_storeu_ps(rescales.as_mut_ptr().add(i * HEAD_LANES), ms);
                            _mm256_storeu_ps(weights.as_mut_ptr().add(i * HEAD_LANES), vs);
                        }
                    }
                    // SAFETY: as for the loads.
                    unsafe {
                        _mm256_storeu_ps(st, max);
                        _mm256_storeu_ps(st.add(HEAD_LANES), sum);
                    }
                    let rescale = any_new != 0;
                    let mut h = 0;
                    while h < nh {
                        // Three heads at a time: twelve accumulator
                        // vectors in flight hide the latency of each one's
                        // multiply-add and two conversions.
                        let take = (nh - h).min(3);
                        // SAFETY: heads `h0 + h..h0 + h + take` have
                        // partials of `hd` values from `acc`; `vf`,
                        // `rescales` and `weights` hold `n` rows.
                        unsafe {
                            let w = (rescales.as_ptr().add(h), weights.as_ptr().add(h));
                            let acc = partials.as_mut_ptr().add((h0 + h) * plen + 2);
                            let v = vf.as_ptr();
                            match take {
                                3 => accumulate_heads::<3>(acc, plen, v, hd, n, w, rescale),
                                2 => accumulate_heads::<2>(acc, plen, v, hd, n, w, rescale),
                                _ => accumulate_heads::<1>(acc, plen, v, hd, n, w, rescale),
                            }
                        }
                        h += take;
                    }
                }
            }
            start += n;
        }
    }
    for (lg, st) in state.chunks_exact(2 * HEAD_LANES).enumerate() {
        let (g, j) = (lg / per_kv, lg % per_kv);
        let h0 = g * group + j * HEAD_LANES;
        let nh = HEAD_LANES.min(group - j * HEAD_LANES);
        for (l, p) in partials[h0 * plen..(h0 + nh) * plen]
            .chunks_exact_mut(plen)
            .enumerate()
        {
            (p[0], p[1]) = (st[l], st[HEAD_LANES + l]);
        }
    }
}

/// One position's scores (before scaling) for `nh <= 8` heads, one per
/// lane (0 past `nh`): each is ggml's f16 dot product on AVX2 of the
/// widened K row `k` and head `h`'s query at `q + h*hd`, `hd` a multiple
/// of 32. The cross-lane sums of [`lane_reduce`] are taken for eight heads
/// at once: halves added in pairs of heads, then two horizontal adds.
///
/// # Safety
/// AVX2 and FMA are present; `k` points at `hd` readable values and `q`
/// at `nh * hd`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot8_avx2(
    k: *const f32,
    q: *const f32,
    hd: usize,
    nh: usize,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // Accumulators (a0+a2)+(a1+a3) of head h, as in `dot_avx2`.
    let head = |h: usize| {
        if h >= nh {
            return _mm256_setzero_ps();
        }
        let mut acc = [_mm256_setzero_ps(); 4];
        for i in (0..hd).step_by(LANES) {
            for (j, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + 8j + 8 <= hd, head h < nh (this fn's contract).
                unsafe {
                    let kv = _mm256_loadu_ps(k.add(i + 8 * j));
                    let qv = _mm256_loadu_ps(q.add(h * hd + i + 8 * j));
                    *a = _mm256_fmadd_ps(kv, qv, *a);
                }
            }
        }
        _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]))
    };
    // [v_a[l] + v_a[l+4] | v_b[l] + v_b[l+4]], l = 0..4.
    let halves = |a: __m256, b: __m256| {
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(a, b),
            _mm256_permute2f128_ps::<0x31>(a, b),
        )
    };
    let t04 = halves(head(0), head(4));
    let t15 = halves(head(1), head(5));
    let t26 = halves(head(2), head(6));
    let t37 = halves(head(3), head(7));
    // Lanes (t0+t1, t2+t3) of heads 0,1 | 4,5, then of 2,3 | 6,7; the
    // second add leaves heads 0..8 in order.
    let h01 = _mm256_hadd_ps(t04, t15);
    let h23 = _mm256_hadd_ps(t26, t37);
    _mm256_hadd_ps(h01, h23)
}

/// One 32-value slice of `NH` heads' f16 accumulators through a block's
/// `n` positions: at a new maximum (`rescale` says the block has one) a
/// head whose `ms` is not 1 is rescaled (by 1 it would be left as it is),
/// then `acc = f16(v * w + acc)`, as [`scale_f16_avx2`] and
/// [`mad_f16_avx2`] do. Head `k`'s `ms` and `w` of position `i` are at
/// `i * 8 + k` from `mw`'s pointers.
///
/// # Safety
/// AVX2, FMA and F16C are present; each `acc` points at 32 values; `v` at
/// `n` rows of 32, `stride` apart; `mw` at `n` rows of eight values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn accumulate_avx2<const NH: usize>(
    acc: [*mut f32; NH],
    v: *const f32,
    stride: usize,
    n: usize,
    mw: (*const f32, *const f32),
    rescale: bool,
) {
    use std::arch::x86_64::*;
    let round = |x: __m256| _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x));
    let mut a = [[_mm256_setzero_ps(); 4]; NH];
    for (ah, p) in a.iter_mut().zip(acc) {
        for (j, a) in ah.iter_mut().enumerate() {
            // SAFETY: 32 values at each `acc` (this fn's contract).
            *a = unsafe { _mm256_loadu_ps(p.add(8 * j)) };
        }
    }
    for i in 0..n {
        if rescale {
            for (k, ah) in a.iter_mut().enumerate() {
                // SAFETY: row `i` of `n` (this fn's contract).
                let m = unsafe { *mw.0.add(i * HEAD_LANES + k) };
                if m != 1.0 {
                    let mv = _mm256_set1_ps(m);
                    for a in ah.iter_mut() {
                        *a = round(_mm256_mul_ps(*a, mv));
                    }
                }
            }
        }
        let mut w = [_mm256_setzero_ps(); NH];
        for (k, w) in w.iter_mut().enumerate() {
            // SAFETY: as above.
            *w = unsafe { _mm256_broadcast_ss(&*mw.1.add(i * HEAD_LANES + k)) };
        }
        for j in 0..4 {
            // SAFETY: row `i` of `n`, 32 values each (this fn's contract).
            let x = unsafe { _mm256_loadu_ps(v.add(i * stride + 8 * j)) };
            for (ah, w) in a.iter_mut().zip(&w) {
                ah[j] = round(_mm256_fmadd_ps(x, *w, ah[j]));
            }
        }
    }
    for (ah, p) in a.iter().zip(acc) {
        for (j, a) in ah.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { _mm256_storeu_ps(p.add(8 * j), *a) };
        }
    }
}

/// [`accumulate_avx2`] over every 32-value slice of `NH` heads whose
/// accumulators start at `acc`, `plen` apart.
///
/// # Safety
/// As for [`accumulate_avx2`], for `hd` (a multiple of 32) values at each
/// head's accumulator and in each row of `v`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn accumulate_heads<const NH: usize>(
    acc: *mut f32,
    plen: usize,
    v: *const f32,
    hd: usize,
    n: usize,
    mw: (*const f32, *const f32),
    rescale: bool,
) {
    for d in (0..hd).step_by(LANES) {
        // SAFETY: `d + 32 <= hd` values of each head and row (this fn's
        // contract).
        unsafe {
            let heads = std::array::from_fn(|k| acc.add(k * plen + d));
            accumulate_avx2::<NH>(heads, v.add(d), hd, n, mw, rescale);
        }
    }
}

/// glibc's `expf` (the FMA build its x86-64 dispatch picks, since 2.28)
/// for arguments below 88 in magnitude: `2^(k/32) * 2^(r/32)` from a table
/// of 32 entries and a cubic, in f64, each step with the roundings its
/// compiled code has.
#[cfg(target_arch = "x86_64")]
mod glibc_expf {
    pub const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
    pub const SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000);
    pub const C: [f64; 3] = [
        f64::from_bits(0x3ebc_6af8_4b91_2394),
        f64::from_bits(0x3f2e_bfce_50fa_c4f3),
        f64::from_bits(0x3f96_2e42_ff0c_52d6),
    ];
    pub const TABLE: [u64; 32] = [
        0x3ff0000000000000,
        0x3fefd9b0d3158574,
        0x3fefb5586cf9890f,
        0x3fef9301d0125b51,
        0x3fef72b83c7d517b,
        0x3fef54873168b9aa,
        0x3fef387a6e756238,
        0x3fef1e9df51fdee1,
        0x3fef06fe0a31b715,
        0x3feef1a7373aa9cb,
        0x3feedea64c123422,
        0x3feece086061892d,
        0x3feebfdad5362a27,
        0x3feeb42b569d4f82,
        0x3feeab07dd485429,
        0x3feea47eb03a5585,
        0x3feea09e667f3bcd,
        0x3fee9f75e8ec5f74,
        0x3feea11473eb0187,
        0x3feea589994cce13,
        0x3feeace5422aa0db,
        0x3feeb737b0cdc5e5,
        0x3feec49182a3f090,
        0x3feed503b23e255d,
        0x3feee89f995ad3ad,
        0x3feeff76f2fb5e47,
        0x3fef199bdd85529c,
        0x3fef3720dcef9069,
        0x3fef5818dcfba487,
        0x3fef7c97337b9b5f,
        0x3fefa4afa2a490da,
        0x3fefd0765b6e4540,
    ];
    /// Arguments whose magnitude's bits reach this take glibc's special
    /// cases (overflow, underflow, infinities, NaN).
    pub const SPECIAL_BITS: i32 = 0x42b0_0000;
}

/// `expf` of eight lanes: the replica of glibc's where `fast` (it matched
/// this process's libm, see [`exp_avx2_matches_libm`]) and the argument is
/// in its main range, else libm's own.
///
/// # Safety
/// AVX2 and FMA are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn exp_avx2(fast: bool, x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let special = if fast {
        let abs = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(i32::MAX));
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(
            abs,
            _mm256_set1_epi32(glibc_expf::SPECIAL_BITS - 1),
        )))
    } else {
        0xff
    };
    let mut r = if fast {
        // SAFETY: AVX2 and FMA are present (this fn's contract).
        let (lo, hi) = unsafe {
            (
                exp_pd_avx2(_mm256_cvtps_pd(_mm256_castps256_ps128(x))),
                exp_pd_avx2(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x))),
            )
        };
        _mm256_set_m128(hi, lo)
    } else {
        x
    };
    if special != 0 {
        let (mut xs, mut rs) = ([0.0f32; 8], [0.0f32; 8]);
        // SAFETY: eight values each.
        unsafe {
            _mm256_storeu_ps(xs.as_mut_ptr(), x);
            _mm256_storeu_ps(rs.as_mut_ptr(), r);
        }
        for (l, (r, x)) in rs.iter_mut().zip(xs).enumerate() {
            if special & (1 << l) != 0 {
                *r = x.exp();
            }
        }
        // SAFETY: eight values.
        r = unsafe { _mm256_loadu_ps(rs.as_ptr()) };
    }
    r
}

/// The main path of glibc's `expf` on four arguments widened to f64.
///
/// # Safety
/// AVX2 and FMA are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn exp_pd_avx2(xd: std::arch::x86_64::__m256d) -> std::arch::x86_64::__m128 {
    use glibc_expf::*;
    use std::arch::x86_64::*;
    let inv = _mm256_set1_pd(INV_LN2_N);
    let shift = _mm256_set1_pd(SHIFT);
    // kd = round(x*N/ln2) through the shift, its bits holding k.
    let kd = _mm256_fmadd_pd(inv, xd, shift);
    let ki = _mm256_castpd_si256(kd);
    let r = _mm256_fmsub_pd(inv, xd, _mm256_sub_pd(kd, shift));
    let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    // SAFETY: every index is below 32, the table's length.
    let t = unsafe { _mm256_i64gather_epi64::<8>(TABLE.as_ptr().cast(), idx) };
    let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
    let z = _mm256_fmadd_pd(r, _mm256_set1_pd(C[0]), _mm256_set1_pd(C[1]));
    let r2 = _mm256_mul_pd(r, r);
    let y = _mm256_fmadd_pd(r, _mm256_set1_pd(C[2]), _mm256_set1_pd(1.0));
    let y = _mm256_fmadd_pd(z, r2, y);
    _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
}

/// Whether [`exp_avx2`]'s replica gives this process's libm `expf` bit for
/// bit, checked once on a spread of the arguments attention takes (0 down
/// to -88, every binade). Another libm (or glibc before 2.28) falls back to
/// calling its own.
#[cfg(target_arch = "x86_64")]
fn exp_avx2_matches_libm() -> bool {
    static MATCHES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MATCHES.get_or_init(|| {
        if !has_simd() {
            return false;
        }
        let n = 1u32 << 14;
        let top = glibc_expf::SPECIAL_BITS as u32;
        (0..n).step_by(8).all(|i| {
            let xs: [f32; 8] = std::array::from_fn(|l| {
                f32::from_bits(0x8000_0000 | ((i + l as u32) as u64 * top as u64 / n as u64) as u32)
            });
            let mut got = [0.0f32; 8];
            // SAFETY: `has_simd` said AVX2 and FMA are present; eight values.
            unsafe {
                use std::arch::x86_64::*;
                let r = exp_avx2(true, _mm256_loadu_ps(xs.as_ptr()));
                _mm256_storeu_ps(got.as_mut_ptr(), r);
            }
            got.iter()
                .zip(xs)
                .all(|(g, x)| g.to_bits() == x.exp().to_bits())
        })
    })
}

/// The running softmax sum after one position, `sum * ms + vs`. With FMA,
/// ggml's compilers (GCC and Clang contract by default) fuse it into one
/// rounding; built without, they cannot. `ms` is 1 except at a new maximum,
/// where the fused and unfused sums can differ in the last bit.
#[inline]
fn softmax_sum(simd: bool, sum: f32, ms: f32, vs: f32) -> f32 {
    if ms == 1.0 {
        sum + vs
    } else if simd {
        sum.mul_add(ms, vs)
    } else {
        sum * ms + vs
    }
}

/// AVX2 with FMA and F16C, as detected for every kernel.
fn has_simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::isa::detected_isa() == super::isa::Isa::Avx2;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn dot(simd: bool, k: &[f16], q: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when AVX2, FMA and F16C are present.
        return unsafe { dot_avx2(k, q) };
    }
    let _ = simd;
    dot_scalar(k, q)
}

/// `acc = f16(acc + w * v)`: the accumulator holds f16 values (stored in
/// f32), as ggml's f16 V accumulator does.
fn mad_f16(simd: bool, acc: &mut [f32], v: &[f16], w: f32) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when AVX2, FMA and F16C are present.
        return unsafe { mad_f16_avx2(acc, v, w) };
    }
    let _ = simd;
    mad_f16_scalar(acc, v, w)
}

/// `acc = f16(acc * w)`.
fn scale_f16(simd: bool, acc: &mut [f32], w: f32) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when AVX2, FMA and F16C are present.
        return unsafe { scale_f16_avx2(acc, w) };
    }
    let _ = simd;
    for a in acc.iter_mut() {
        *a = round_f16(*a * w);
    }
}

fn round_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// Lanes of ggml's f16 dot: four accumulators of eight.
const LANES: usize = 32;

/// Same summation tree as [`dot_avx2`], with separate multiply and add (what
/// ggml does when built without FMA).
fn dot_scalar(k: &[f16], q: &[f32]) -> f32 {
    debug_assert_eq!(k.len(), q.len());
    let mut acc = [0.0f32; LANES];
    let body = k.len() - k.len() % LANES;
    for (kc, qc) in k[..body]
        .chunks_exact(LANES)
        .zip(q[..body].chunks_exact(LANES))
    {
        for ((a, kv), &qv) in acc.iter_mut().zip(kc).zip(qc) {
            *a += kv.to_f32() * qv;
        }
    }
    // Accumulator j holds lanes 8j..8j+8: add 2→0, 3→1, then 1→0.
    let mut v = [0.0f32; 8];
    for (l, out) in v.iter_mut().enumerate() {
        let a02 = acc[l] + acc[16 + l];
        let a13 = acc[8 + l] + acc[24 + l];
        *out = a02 + a13;
    }
    let reduced = lane_reduce(v);
    tail_f64(reduced, &k[body..], &q[body..])
}

/// The cross-lane part of ggml's reduction: halves added, then two
/// horizontal adds.
fn lane_reduce(v: [f32; 8]) -> f32 {
    let t = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (t[0] + t[1]) + (t[2] + t[3])
}

fn tail_f64(reduced: f32, k: &[f16], q: &[f32]) -> f32 {
    let mut sum = f64::from(reduced);
    for (kv, &qv) in k.iter().zip(q) {
        sum += f64::from(kv.to_f32() * qv);
    }
    sum as f32
}

/// ggml's vector body fuses the multiply-add; its tail (past a multiple of
/// 32) does not.
fn mad_f16_scalar(acc: &mut [f32], v: &[f16], w: f32) {
    let body = acc.len() - acc.len() % LANES;
    for (i, (a, x)) in acc.iter_mut().zip(v).enumerate() {
        *a = if i < body {
            round_f16(x.to_f32().mul_add(w, *a))
        } else {
            round_f16(*a + x.to_f32() * w)
        };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2(k: &[f16], q: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    debug_assert_eq!(k.len(), q.len());
    let body = k.len() - k.len() % LANES;
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..body).step_by(LANES) {
        for (j, a) in acc.iter_mut().enumerate() {
            let at = i + 8 * j;
            // SAFETY: at + 8 <= body <= k.len() == q.len(); unaligned loads.
            unsafe {
                let kv = _mm256_cvtph_ps(_mm_loadu_si128(k.as_ptr().add(at).cast()));
                let qv = _mm256_loadu_ps(q.as_ptr().add(at));
                *a = _mm256_fmadd_ps(kv, qv, *a);
            }
        }
    }
    let a0 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let mut v = [0.0f32; 8];
    // SAFETY: `v` holds exactly eight f32.
    unsafe { _mm256_storeu_ps(v.as_mut_ptr(), a0) };
    tail_f64(lane_reduce(v), &k[body..], &q[body..])
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mad_f16_avx2(acc: &mut [f32], v: &[f16], w: f32) {
    use std::arch::x86_64::*;
    let n = acc.len().min(v.len());
    let body = n - n % LANES;
    let wv = _mm256_set1_ps(w);
    for i in (0..body).step_by(8) {
        // SAFETY: i + 8 <= body <= both lengths; unaligned loads and stores.
        unsafe {
            let x = _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(i).cast()));
            let a = _mm256_loadu_ps(acc.as_ptr().add(i));
            let r = _mm256_fmadd_ps(x, wv, a);
            let r = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r));
            _mm256_storeu_ps(acc.as_mut_ptr().add(i), r);
        }
    }
    for (a, x) in acc[body..n].iter_mut().zip(&v[body..n]) {
        *a = round_f16(*a + x.to_f32() * w);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_f16_avx2(acc: &mut [f32], w: f32) {
    use std::arch::x86_64::*;
    let n = acc.len();
    let body = n - n % LANES;
    let wv = _mm256_set1_ps(w);
    for i in (0..body).step_by(8) {
        // SAFETY: i + 8 <= body <= n; unaligned loads and stores.
        unsafe {
            let r = _mm256_mul_ps(_mm256_loadu_ps(acc.as_ptr().add(i)), wv);
            let r = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r));
            _mm256_storeu_ps(acc.as_mut_ptr().add(i), r);
        }
    }
    for a in &mut acc[body..] {
        *a = round_f16(*a * w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_noise as noise;

    fn to_f16(v: &[f32]) -> Vec<f16> {
        v.iter().map(|&x| f16::from_f32(x)).collect()
    }

    /// Straightforward f64 attention over f16-rounded inputs.
    fn reference(
        q: &[f32],
        k: &[f16],
        v: &[f16],
        stride: usize,
        off: usize,
        positions: std::ops::Range<usize>,
        scale: f32,
    ) -> Vec<f64> {
        reference_sink(q, k, v, stride, off, positions, scale, None)
    }

    /// [`reference`] with a sink logit in the softmax's denominator.
    #[allow(clippy::too_many_arguments)]
    fn reference_sink(
        q: &[f32],
        k: &[f16],
        v: &[f16],
        stride: usize,
        off: usize,
        positions: std::ops::Range<usize>,
        scale: f32,
        sink: Option<f32>,
    ) -> Vec<f64> {
        let d = q.len();
        let qr: Vec<f64> = q
            .iter()
            .map(|&x| f64::from(f16::from_f32(x).to_f32()))
            .collect();
        let scores: Vec<f64> = positions
            .clone()
            .map(|p| {
                let kr = &k[p * stride + off..][..d];
                qr.iter()
                    .zip(kr)
                    .map(|(a, b)| a * f64::from(b.to_f32()))
                    .sum::<f64>()
                    * f64::from(scale)
            })
            .collect();
        let sink = sink.map(f64::from);
        let max = scores
            .iter()
            .cloned()
            .chain(sink)
            .fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f64 = w.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
        (0..d)
            .map(|i| {
                positions
                    .clone()
                    .zip(&w)
                    .map(|(p, wp)| wp * f64::from(v[p * stride + off + i].to_f32()))
                    .sum::<f64>()
                    / total
            })
            .collect()
    }

    #[test]
    fn single_position_returns_v() {
        let d = 40;
        let q = noise(d, 1, 2.0);
        let v = to_f16(&noise(d, 2, 3.0));
        let k = to_f16(&noise(d, 3, 1.0));
        let mut out = vec![f32::NAN; d];
        attend_head(
            &q,
            &KvHead {
                k: &k,
                v: &v,
                stride: d,
                offset: 0,
                ring: usize::MAX,
            },
            0..1,
            d,
            0.3,
            None,
            &mut out,
            &mut vec![0.0; 4096],
        );
        let expect: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
        assert_eq!(out, expect);
    }

    #[test]
    fn uniform_scores_average_v() {
        // A zero query scores every position 0: the output is the mean of V.
        let (d, n) = (8, 5);
        let q = vec![0.0f32; d];
        let k = to_f16(&noise(d * n, 4, 1.0));
        let v: Vec<f16> = (0..d * n).map(|i| f16::from_f32((i / d) as f32)).collect();
        let mut out = vec![0.0; d];
        attend_head(
            &q,
            &KvHead {
                k: &k,
                v: &v,
                stride: d,
                offset: 0,
                ring: usize::MAX,
            },
            0..n,
            d,
            1.0,
            None,
            &mut out,
            &mut vec![0.0; 4096],
        );
        for o in out {
            assert!((o - 2.0).abs() < 1e-6, "{o}");
        }
    }

    #[test]
    fn query_is_rounded_to_f16() {
        // q0 = 1 + 2^-12 rounds to 1 in f16, so both positions score 0 and
        // share the weight equally; unrounded, position 0 would score 1.
        let q = [1.0 + 2f32.powi(-12), -1.0];
        let k = to_f16(&[1.0, 1.0, 0.0, 0.0]);
        let v = to_f16(&[1.0, 0.0, 0.0, 0.0]);
        let mut out = [0.0f32; 2];
        attend_head(
            &q,
            &KvHead {
                k: &k,
                v: &v,
                stride: 2,
                offset: 0,
                ring: usize::MAX,
            },
            0..2,
            2,
            4096.0,
            None,
            &mut out,
            &mut vec![0.0; 4096],
        );
        assert_eq!(out, [0.5, 0.0]);
    }

    #[test]
    fn no_positions_gives_zeros() {
        let mut out = [1.0f32; 4];
        attend_head(
            &[1.0; 4],
            &KvHead {
                k: &[],
                v: &[],
                stride: 4,
                offset: 0,
                ring: usize::MAX,
            },
            0..0,
            4,
            1.0,
            None,
            &mut out,
            &mut vec![0.0; 4096],
        );
        assert_eq!(out, [0.0; 4]);
    }

    #[test]
    fn matches_f64_reference_with_offset_heads() {
        // Two KV heads of 72 dims per row (72 = 2*32 + 8 exercises the tail);
        // attend with the second one.
        let (d, n_kv_heads, n) = (72usize, 2usize, 300usize);
        let stride = d * n_kv_heads;
        let k = to_f16(&noise(stride * n, 5, 2.0));
        let v = to_f16(&noise(stride * n, 6, 2.0));
        // A peaked softmax, so the output is of order one and a wrong weight
        // or position shows as an error of order one.
        let q = noise(d, 7, 6.0);
        let scale = 1.0 / (d as f32).sqrt();
        let mut out = vec![0.0; d];
        let mut scratch = vec![0.0; 4096];
        attend_head(
            &q,
            &KvHead {
                k: &k,
                v: &v,
                stride,
                offset: d,
                ring: usize::MAX,
            },
            0..n,
            d,
            scale,
            None,
            &mut out,
            &mut scratch,
        );
        let expect = reference(&q, &k, &v, stride, d, 0..n, scale);
        // The f16 accumulator rounds (relative 2^-11) at every step that
        // carries weight; a peaked softmax has few such steps.
        let tol = |e: f64| 4e-3 * (1.0 + e.abs());
        assert!(
            expect.iter().any(|e| e.abs() > 0.3),
            "softmax not peaked enough to test"
        );
        for (i, (o, e)) in out.iter().zip(&expect).enumerate() {
            assert!((f64::from(*o) - e).abs() < tol(*e), "[{i}] {o} vs {e}");
        }
        // Causal prefix and a sliding window: fewer positions is a
        // different, still correct answer.
        for positions in [0..17, 250..300] {
            attend_head(
                &q,
                &KvHead {
                    k: &k,
                    v: &v,
                    stride,
                    offset: d,
                    ring: usize::MAX,
                },
                positions.clone(),
                d,
                scale,
                None,
                &mut out,
                &mut scratch,
            );
            let expect = reference(&q, &k, &v, stride, d, positions, scale);
            for (o, e) in out.iter().zip(&expect) {
                assert!((f64::from(*o) - e).abs() < tol(*e), "{o} vs {e}");
            }
        }
    }

    #[test]
    fn scalar_dot_matches_exact_sum() {
        for n in [1usize, 31, 32, 64, 100, 128] {
            let k = to_f16(&noise(n, 8, 4.0));
            let q: Vec<f32> = to_f16(&noise(n, 9, 4.0))
                .iter()
                .map(|x| x.to_f32())
                .collect();
            let exact: f64 = k
                .iter()
                .zip(&q)
                .map(|(a, &b)| f64::from(a.to_f32()) * f64::from(b))
                .sum();
            let got = f64::from(dot_scalar(&k, &q));
            assert!(
                (got - exact).abs() < 1e-5 * (n as f64),
                "n={n}: {got} vs {exact}"
            );
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_matches_scalar() {
        if !has_simd() {
            return;
        }
        for n in [1usize, 7, 8, 31, 32, 33, 64, 80, 128, 256] {
            let k = to_f16(&noise(n, 10 + n as u64, 4.0));
            let q: Vec<f32> = to_f16(&noise(n, 11, 4.0))
                .iter()
                .map(|x| x.to_f32())
                .collect();
            let a = dot_scalar(&k, &q);
            // SAFETY: features checked above.
            let b = unsafe { dot_avx2(&k, &q) };
            // Same summation tree; only FMA's single rounding differs.
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "n={n}: {a} vs {b}");

            let w = 0.37f32;
            let mut acc_s: Vec<f32> = noise(n, 12, 1.0).into_iter().map(round_f16).collect();
            let mut acc_v = acc_s.clone();
            mad_f16_scalar(&mut acc_s, &k, w);
            scale_f16(false, &mut acc_s, 0.7);
            // SAFETY: features checked above.
            unsafe {
                mad_f16_avx2(&mut acc_v, &k, w);
                scale_f16_avx2(&mut acc_v, 0.7);
            }
            // Both fuse the body and round to f16 the same way: bit-identical.
            assert_eq!(acc_s, acc_v, "n={n}");
        }
    }

    /// A window over a ring of rows (position p in row p % ring) gives the
    /// bits of the same window over a block of every position.
    #[test]
    fn a_ring_reads_the_same_positions() {
        let (d, n, ring) = (40usize, 12usize, 5usize);
        let k = to_f16(&noise(d * n, 11, 2.0));
        let v = to_f16(&noise(d * n, 12, 2.0));
        let mut k_ring = vec![f16::ZERO; d * ring];
        let mut v_ring = vec![f16::ZERO; d * ring];
        for p in n - ring..n {
            let slot = p % ring;
            k_ring[slot * d..(slot + 1) * d].copy_from_slice(&k[p * d..(p + 1) * d]);
            v_ring[slot * d..(slot + 1) * d].copy_from_slice(&v[p * d..(p + 1) * d]);
        }
        let q = noise(d, 13, 4.0);
        let run = |kv: &KvHead| {
            let mut out = vec![0.0; d];
            attend_head(
                &q,
                kv,
                n - ring..n,
                d,
                0.2,
                Some(0.3),
                &mut out,
                &mut vec![0.0; 4096],
            );
            out
        };
        let whole = KvHead {
            k: &k,
            v: &v,
            stride: d,
            offset: 0,
            ring: usize::MAX,
        };
        let ringed = KvHead {
            k: &k_ring,
            v: &v_ring,
            stride: d,
            offset: 0,
            ring,
        };
        assert_eq!(run(&whole), run(&ringed));
    }

    /// ggml's split path with `split`'s chunks run one after another, then
    /// merged: what `nth` threads compute, in one.
    #[allow(clippy::too_many_arguments)]
    fn split_attend(
        q: &[f32],
        kv: &KvHead,
        n_kv_heads: usize,
        positions: Range<usize>,
        hd: usize,
        scale: f32,
        sinks: Option<&[f32]>,
        split: KvSplit,
        nth: usize,
    ) -> Vec<f32> {
        let n_head = q.len() / hd;
        let plen = partial_len(hd);
        let rows = rows_of(positions, kv.ring);
        let mut parts = vec![vec![f32::NAN; n_head * plen]; nth];
        let mut scratch = vec![f32::NAN; cells_scratch_len(n_head, hd)];
        for (c, part) in parts.iter_mut().enumerate() {
            let cells = split.cells(c);
            let rows = rows.clone().map(|r| clip(&r, &cells));
            let sinks = sinks.filter(|_| cells.start == 0);
            attend_cells(
                q,
                kv,
                n_kv_heads,
                &rows,
                hd,
                scale,
                sinks,
                part,
                &mut scratch,
            );
        }
        let mut out = vec![f32::NAN; n_head * hd];
        for (h, o) in out.chunks_exact_mut(hd).enumerate() {
            let chunks = (0..nth).filter(|&c| !split.cells(c).is_empty());
            merge_partials(chunks.map(|c| &parts[c][h * plen..(h + 1) * plen]), o);
        }
        out
    }

    fn even_split(n_cells: usize, nth: usize) -> KvSplit {
        KvSplit {
            n_cells,
            chunk: n_cells.div_ceil(nth),
        }
    }

    #[test]
    fn split_geometry_follows_ggml() {
        // Decode at 3500 in a 4096 context on two threads: the view is
        // padded to 3584 cells, 1792 each.
        let s = KvSplit::new(3501, 4096, 2).unwrap();
        assert_eq!(s, even_split(3584, 2));
        assert_eq!(
            (s.cells(0), s.cells(1), s.cells(2)),
            (0..1792, 1792..3584, 3584..3584)
        );
        // Under 512 cells ggml keeps its per-head path.
        assert_eq!(KvSplit::new(256, 4096, 2), None);
        assert_eq!(KvSplit::new(257, 4096, 2), Some(even_split(512, 2)));
        // The view stops at the cache, itself padded to 256.
        assert_eq!(KvSplit::new(300, 300, 3), Some(even_split(512, 3)));
        assert_eq!(KvSplit::new(5000, 4000, 1), Some(even_split(4096, 1)));
        // A window's ring: the rows in use, however far the positions went.
        assert_eq!(KvSplit::new(100_000, 700, 4), Some(even_split(768, 4)));
        assert_eq!(KvSplit::new(200, 1000, 4), None);
        // More threads than cells: the last chunks are empty.
        let s = KvSplit::new(600, 4096, 700).unwrap();
        assert_eq!((s.chunk, s.cells(699)), (2, 768..768));
    }

    #[test]
    fn rows_of_a_ring_wrap_in_row_order() {
        assert_eq!(rows_of(3..9, usize::MAX), [3..9, 0..0]);
        assert_eq!(rows_of(3..3, 5), [0..0, 0..0]);
        assert_eq!(rows_of(7..12, 5), [0..2, 2..5]);
        assert_eq!(rows_of(10..15, 5), [0..5, 0..0]);
        assert_eq!(rows_of(11..14, 5), [1..4, 0..0]);
        assert_eq!(clip(&(3..9), &(5..20)), 5..9);
        assert_eq!(clip(&(3..9), &(10..20)), 10..10);
    }

    /// Heads of `group` over `n_kv_heads`, `d` values each, `n` positions.
    struct Case {
        d: usize,
        n_kv_heads: usize,
        group: usize,
        k: Vec<f16>,
        v: Vec<f16>,
        q: Vec<f32>,
    }

    impl Case {
        fn new(d: usize, n_kv_heads: usize, group: usize, n: usize, seed: u64) -> Case {
            let stride = d * n_kv_heads;
            Case {
                d,
                n_kv_heads,
                group,
                k: to_f16(&noise(stride * n, seed, 2.0)),
                v: to_f16(&noise(stride * n, seed + 1, 2.0)),
                // Peaked softmaxes: a wrong weight or position shows as an
                // error of order one.
                q: noise(d * n_kv_heads * group, seed + 2, 6.0),
            }
        }

        fn kv(&self) -> KvHead<'_> {
            KvHead {
                k: &self.k,
                v: &self.v,
                stride: self.d * self.n_kv_heads,
                offset: 0,
                ring: usize::MAX,
            }
        }

        fn scale(&self) -> f32 {
            1.0 / (self.d as f32).sqrt()
        }

        /// Every head through `attend_head`.
        fn per_head(&self, positions: Range<usize>, sinks: Option<&[f32]>) -> Vec<f32> {
            let d = self.d;
            let mut out = vec![f32::NAN; self.q.len()];
            for (h, o) in out.chunks_exact_mut(d).enumerate() {
                let kv = KvHead {
                    offset: (h / self.group) * d,
                    ..self.kv()
                };
                attend_head(
                    &self.q[h * d..(h + 1) * d],
                    &kv,
                    positions.clone(),
                    d,
                    self.scale(),
                    sinks.map(|s| s[h]),
                    o,
                    &mut vec![0.0; d + positions.end],
                );
            }
            out
        }

        fn split(
            &self,
            positions: Range<usize>,
            sinks: Option<&[f32]>,
            split: KvSplit,
            nth: usize,
        ) -> Vec<f32> {
            let kv = self.kv();
            let (d, scale) = (self.d, self.scale());
            split_attend(
                &self.q,
                &kv,
                self.n_kv_heads,
                positions,
                d,
                scale,
                sinks,
                split,
                nth,
            )
        }

        fn check_reference(&self, out: &[f32], positions: Range<usize>, sinks: Option<&[f32]>) {
            let d = self.d;
            let stride = d * self.n_kv_heads;
            let mut peaked = false;
            for (h, o) in out.chunks_exact(d).enumerate() {
                let q = &self.q[h * d..(h + 1) * d];
                let off = (h / self.group) * d;
                let sink = sinks.map(|s| s[h]);
                let expect = reference_sink(
                    q,
                    &self.k,
                    &self.v,
                    stride,
                    off,
                    positions.clone(),
                    self.scale(),
                    sink,
                );
                peaked |= expect.iter().any(|e| e.abs() > 0.3);
                for (i, (o, e)) in o.iter().zip(&expect).enumerate() {
                    // The f16 accumulator rounds (relative 2^-11) at every
                    // step that carries weight.
                    assert!(
                        (f64::from(*o) - e).abs() < 4e-3 * (1.0 + e.abs()),
                        "head {h} [{i}]: {o} vs {e}"
                    );
                }
            }
            assert!(
                peaked || positions.is_empty(),
                "softmax not peaked enough to test"
            );
        }
    }

    #[test]
    fn split_matches_f64_reference() {
        // 64 takes the AVX2 kernel where there is one, 72 (two 32-value
        // steps and a tail) the per-head path; 10 heads per KV head fill
        // more than one vector of heads.
        for (d, n_kv_heads, group) in [(64, 2, 7), (72, 2, 3), (32, 1, 10), (128, 3, 1)] {
            let n = 700;
            let c = Case::new(d, n_kv_heads, group, n, d as u64);
            for nth in [1, 2, 3, 5] {
                let split = KvSplit::new(n, 1024, nth).unwrap();
                c.check_reference(&c.split(0..n, None, split, nth), 0..n, None);
            }
        }
    }

    #[test]
    fn one_chunk_is_attend_head_bit_for_bit() {
        for (d, n_kv_heads, group) in [(64, 2, 7), (72, 2, 3), (32, 1, 10), (128, 1, 2)] {
            let n = 300;
            let c = Case::new(d, n_kv_heads, group, n, 40 + d as u64);
            let sinks = noise(n_kv_heads * group, 41, 3.0);
            for positions in [0..n, 0..1, 37..300, 250..251] {
                for sinks in [None, Some(&sinks[..])] {
                    let whole = c.split(positions.clone(), sinks, even_split(512, 1), 1);
                    let expect = c.per_head(positions.clone(), sinks);
                    assert!(
                        whole
                            .iter()
                            .zip(&expect)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "d={d} group={group} {positions:?}"
                    );
                }
            }
        }
    }

    /// Sinks join the first chunk's partial only: the split's result is
    /// the softmax with each sink counted once, whatever the chunking.
    #[test]
    fn sinks_join_once() {
        let (d, n) = (64, 600);
        let c = Case::new(d, 2, 2, n, 50);
        // Sinks from below the scores to above them.
        let sinks = [-30.0, 2.0, 8.0, 40.0];
        let one = c.split(0..n, Some(&sinks), even_split(768, 1), 1);
        for nth in [2, 3, 4] {
            let out = c.split(0..n, Some(&sinks), even_split(768, nth), nth);
            c.check_reference(&out, 0..n, Some(&sinks));
            // Chunks change only the f16 accumulators' roundings (a sink
            // counted twice would change a weight by its own size).
            for (a, b) in out.iter().zip(&one) {
                assert!((a - b).abs() < 8e-3 * (1.0 + b.abs()), "{a} vs {b}");
            }
        }
        // A sink above every score takes nearly all the weight.
        let out = c.split(0..n, Some(&[200.0; 4]), even_split(768, 3), 3);
        assert!(out.iter().all(|o| o.abs() < 1e-6), "{out:?}");
    }

    /// A sliding window, on a block of every position and on a ring.
    #[test]
    fn windows() {
        let (d, n, window) = (64, 1500, 600);
        let c = Case::new(d, 1, 4, n, 60);
        let positions = n - window..n;
        for nth in [1, 2, 4] {
            let split = KvSplit::new(n, usize::MAX / 2, nth).unwrap();
            c.check_reference(
                &c.split(positions.clone(), None, split, nth),
                positions.clone(),
                None,
            );
        }
        // The same window over a ring of 700 rows (position p in row
        // p % 700): the cells are the ring's rows, the wrapped run first.
        let ring = 700;
        let mut k_ring = vec![f16::ZERO; d * ring];
        let mut v_ring = vec![f16::ZERO; d * ring];
        for p in n - ring..n {
            let slot = p % ring;
            k_ring[slot * d..(slot + 1) * d].copy_from_slice(&c.k[p * d..(p + 1) * d]);
            v_ring[slot * d..(slot + 1) * d].copy_from_slice(&c.v[p * d..(p + 1) * d]);
        }
        let kv = KvHead {
            k: &k_ring,
            v: &v_ring,
            stride: d,
            offset: 0,
            ring,
        };
        for nth in [1, 2, 3] {
            let split = KvSplit::new(n, ring, nth).unwrap();
            let out = split_attend(
                &c.q,
                &kv,
                1,
                positions.clone(),
                d,
                c.scale(),
                None,
                split,
                nth,
            );
            c.check_reference(&out, positions.clone(), None);
        }
    }

    /// Chunks with no visible position (past the positions, or past the
    /// view) leave empty partials, which the merge skips; no positions at
    /// all give zeros, as in ggml.
    #[test]
    fn empty_chunks() {
        let (d, n) = (64, 300);
        let c = Case::new(d, 1, 3, n, 70);
        let split = KvSplit::new(n, 4096, 7).unwrap();
        assert!(split.cells(5).start >= n);
        c.check_reference(&c.split(0..n, None, split, 7), 0..n, None);
        let split = KvSplit::new(n, 4096, 600).unwrap();
        assert!(split.cells(599).is_empty());
        c.check_reference(&c.split(0..n, None, split, 600), 0..n, None);
        let out = c.split(0..0, None, even_split(512, 2), 2);
        assert!(out.iter().all(|&o| o == 0.0), "{out:?}");
        // Only sinks: zeros too (the sink carries no value).
        let out = c.split(0..0, Some(&[1.0, 2.0, 3.0]), even_split(512, 2), 2);
        assert!(out.iter().all(|&o| o == 0.0), "{out:?}");
    }

    /// The exponential of the AVX2 kernel is libm's, bit for bit, on the
    /// arguments the softmax takes (and falls back to libm elsewhere).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_exp_is_libm() {
        if !has_simd() {
            return;
        }
        assert!(exp_avx2_matches_libm(), "this libm is not glibc's expf");
        let mut xs: Vec<f32> = noise(1 << 16, 80, 1.0)
            .iter()
            .map(|u| -u.abs() * 90.0)
            .collect();
        xs.extend(noise(1 << 12, 81, 1.0).iter().map(|u| -u.abs() * 1e-3));
        xs.extend([
            0.0,
            -0.0,
            -88.0,
            -87.99,
            -103.5,
            -150.0,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1.0,
            88.5,
            f32::INFINITY,
        ]);
        xs.resize(xs.len().next_multiple_of(8), 0.0);
        for x in xs.chunks_exact(8) {
            let mut got = [0.0f32; 8];
            // SAFETY: `has_simd` said AVX2 and FMA are present; eight
            // values each.
            unsafe {
                use std::arch::x86_64::*;
                let r = exp_avx2(true, _mm256_loadu_ps(x.as_ptr()));
                _mm256_storeu_ps(got.as_mut_ptr(), r);
            }
            for (g, &x) in got.iter().zip(x) {
                let e = x.exp();
                assert!(
                    g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                    "exp({x}) = {g}, libm {e}"
                );
            }
        }
    }

    /// Every non-positive f32 in the replica's range (about 1.1e9 values);
    /// `cargo test --release -- --ignored`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore]
    fn vector_exp_is_libm_exhaustively() {
        if !has_simd() {
            return;
        }
        let top = glibc_expf::SPECIAL_BITS as u32;
        let mut bad = 0u64;
        for base in (0..top).step_by(8) {
            let xs: [f32; 8] =
                std::array::from_fn(|l| f32::from_bits(0x8000_0000 | (base + l as u32)));
            let mut got = [0.0f32; 8];
            // SAFETY: as in `vector_exp_is_libm`.
            unsafe {
                use std::arch::x86_64::*;
                let r = exp_avx2(true, _mm256_loadu_ps(xs.as_ptr()));
                _mm256_storeu_ps(got.as_mut_ptr(), r);
            }
            bad += got
                .iter()
                .zip(xs)
                .filter(|(g, x)| g.to_bits() != x.exp().to_bits())
                .count() as u64;
        }
        assert_eq!(bad, 0);
    }
}
