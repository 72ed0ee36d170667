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
//!
//! Submodules: `split` holds that split-KV path (re-exported here) and
//! `cells_avx2` its AVX2 kernel; the helpers both paths share live here.

mod cells_avx2;
mod split;
#[cfg(test)]
mod tests;
mod tiled;
mod typed;

use half::f16;

pub use split::{
    attend_cells, cells_scratch_len, clip, merge_partials, partial_len, rows_of, KvSplit,
};
pub use tiled::{attend_tile, tiled_scratch_len, v_expf, Q_TILE};
pub use typed::{attend_head_typed, store_row, TypedKvHead, MAX_HEAD_DIM};

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
        softmax_step(
            simd,
            s,
            row(v_cache, at, head_dim),
            (&mut max, &mut sum),
            out,
        );
    }
    finish_head(out, max, sum, sink);
}

/// The end of a head's walk: the sink joins the denominator (ggml rescales
/// its f32 copy of the accumulator here, unrounded, and, as compiled, does
/// not fuse this sum), then the output is normalised (zeros for an empty
/// sum).
fn finish_head(out: &mut [f32], max: f32, mut sum: f32, sink: Option<f32>) {
    if let Some(s) = sink {
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

/// One position of ggml's online softmax: score `s`, V row `v`. A new
/// maximum rescales the f16 accumulator `acc`; the position then adds
/// `v * e^(s - max)` to it, and `sum` follows.
fn softmax_step(simd: bool, s: f32, v: &[f16], (max, sum): (&mut f32, &mut f32), acc: &mut [f32]) {
    let (mut ms, mut vs) = (1.0f32, 1.0f32);
    if s > *max {
        ms = (*max - s).exp();
        *max = s;
        scale_f16(simd, acc, ms);
    } else {
        vs = (s - *max).exp();
    }
    mad_f16(simd, acc, v, vs);
    *sum = softmax_sum(simd, *sum, ms, vs);
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
