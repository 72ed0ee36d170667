//! ggml's split-KV decode path (the split of `ggml_flash_attn_ext` for
//! one-token steps), bit for bit: each thread runs the online softmax of
//! [`attend_head`](super::attend_head) over its chunk of cache cells for
//! every head ([`attend_cells`]), and the chunks' partial results are
//! merged in order ([`merge_partials`]).

use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use super::cells_avx2::cells_avx2;
use super::cells_avx2::HEAD_LANES;
#[cfg(target_arch = "x86_64")]
use super::LANES;
use super::{dot, has_simd, round_f16, softmax_step, KvHead};

/// ggml pads its view of the cache (`nek1`) to this many cells.
const CELL_PAD: usize = 256;

/// The smallest view ggml splits over threads.
const SPLIT_MIN_CELLS: usize = 512;

/// Most cells one chunk takes. ggml gives each thread one chunk, whose V
/// sum is an f16 accumulator: on few threads at depth a chunk adds up
/// thousands of cells, and small terms vanish into the f16 sum (on
/// tiny-gpt-oss at 16641 positions, llama.cpp on two threads puts logits
/// 0.6σ away from itself on sixteen). Past this the view is cut into more
/// chunks than threads, taken by the threads in turn: exactly what ggml
/// computes on that many threads.
pub const MAX_CHUNK_CELLS: usize = 512;

/// Length of one head's partial result: the running maximum `M`, the sum
/// `S`, then the `head_dim` accumulated values (f16 values held in f32).
pub fn partial_len(head_dim: usize) -> usize {
    head_dim + 2
}

/// How a one-token step's attention splits the cache's cells into chunks,
/// as ggml's split-KV path (`ggml_compute_forward_flash_attn_ext_f16`)
/// does with one chunk per thread: chunk `i` is cells
/// `i*chunk..(i+1)*chunk` of the view for every head. There are as many
/// chunks as threads, or more where a chunk would pass
/// [`MAX_CHUNK_CELLS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvSplit {
    /// Cells of ggml's view of the cache (its `nek1`).
    pub n_cells: usize,
    /// Cells per chunk.
    pub chunk: usize,
    /// Chunks (ggml's thread count for them).
    pub chunks: usize,
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
        (n_cells >= SPLIT_MIN_CELLS && nth > 0).then(|| {
            let chunks = nth.max(n_cells.div_ceil(MAX_CHUNK_CELLS));
            KvSplit {
                n_cells,
                chunk: n_cells.div_ceil(chunks),
                chunks,
            }
        })
    }

    /// Most chunks a step over a cache block of `rows` rows splits into
    /// among `nth` threads.
    pub fn max_chunks(rows: usize, nth: usize) -> usize {
        let cells = rows.checked_next_multiple_of(CELL_PAD).unwrap_or(rows);
        nth.max(cells.div_ceil(MAX_CHUNK_CELLS))
    }

    /// Chunk `i`'s cells (empty for a chunk past the view).
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
pub(super) fn block_len(head_dim: usize) -> usize {
    (2048 / head_dim.max(1)).clamp(8, 32)
}

/// f32 values of scratch [`attend_cells`] needs for `n_head` query heads.
pub fn cells_scratch_len(n_head: usize, head_dim: usize) -> usize {
    let b = block_len(head_dim);
    n_head * head_dim + 2 * b * head_dim + 3 * b * HEAD_LANES + 2 * HEAD_LANES * n_head
}

/// One chunk of ggml's split-KV path: the online softmax of
/// [`attend_head`](super::attend_head) for every query head (`q` holds them
/// one after another; `n_kv_heads` KV heads each serve an equal group of
/// them, KV head `g` at `kv.offset + g * head_dim` of a row) over cache rows
/// `cells` (runs in ascending order, rows of `kv` directly: its `ring` is
/// not consulted), leaving each head's partial result (see [`partial_len`])
/// in `partials`.
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
            softmax_step(simd, s, &kv.v[at..at + hd], (&mut max, &mut sum), acc);
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
