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
//!   rescales what was accumulated so far.
//! - V is accumulated in an **f16** buffer (f16 values held in f32), rounded
//!   after every multiply-add and rescale, exactly as ggml does with an F16
//!   V cache. An f32 accumulator would be closer to the exact result, but
//!   then logits drift from llama.cpp's by ~1% of their spread after a few
//!   positions, and the drift is enough to flip activation-quantization
//!   roundings downstream; matching the reference bit for bit is what lets
//!   the fixture tests use a tight tolerance and catch real bugs.

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
        sum = sum * ms + vs;
    }
    if let Some(s) = sink {
        // ggml rescales its f32 copy of the accumulator here, unrounded.
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
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f64 = w.iter().sum();
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

    /// Timing of decode attention at depth over 24 layers (not a check).
    #[test]
    #[ignore]
    fn bench_decode_layer() {
        let (d, n_kv_heads, group, n, layers) = (64usize, 2usize, 7usize, 3500usize, 24usize);
        let stride = d * n_kv_heads;
        let ks: Vec<Vec<f16>> = (0..layers)
            .map(|l| to_f16(&noise(stride * n, 5 + l as u64, 2.0)))
            .collect();
        let vs: Vec<Vec<f16>> = (0..layers)
            .map(|l| to_f16(&noise(stride * n, 60 + l as u64, 2.0)))
            .collect();
        let n_head = n_kv_heads * group;
        let q = noise(d * n_head, 7, 3.0);
        let mut out = vec![0.0; d * n_head];
        let mut scratch = vec![0.0; 8192];
        let reps = 5;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            for l in 0..layers {
                for h in 0..n_head {
                    let kv = KvHead {
                        k: &ks[l],
                        v: &vs[l],
                        stride,
                        offset: (h / group) * d,
                        ring: usize::MAX,
                    };
                    attend_head(
                        &q[h * d..(h + 1) * d],
                        &kv,
                        0..n,
                        d,
                        0.125,
                        None,
                        &mut out[h * d..(h + 1) * d],
                        &mut scratch,
                    );
                }
            }
        }
        let ns = t.elapsed().as_secs_f64() * 1e9 / (reps * layers * n_head * n) as f64;
        eprintln!(
            "attend_head: {ns:.2} ns per (head, position); {:.2} ms per token",
            ns * (layers * n_head * n) as f64 * 1e-6
        );
    }
}
