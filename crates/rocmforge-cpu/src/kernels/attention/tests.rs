use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use super::cells_avx2::{exp_avx2, exp_avx2_matches_libm, glibc_expf};
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
    let q16: Vec<f32> = q.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
    let kv = KvHead {
        k,
        v,
        stride,
        offset: off,
        ring: usize::MAX,
    };
    reference_f32_query(&q16, &kv, positions, scale, sink)
}

/// f64 attention of `q` as given (the tiled path keeps it in f32; the
/// per-head path rounds it to f16 first) over `positions` of one KV head,
/// with a sink logit in the softmax's denominator.
fn reference_f32_query(
    q: &[f32],
    kv: &KvHead,
    positions: Range<usize>,
    scale: f32,
    sink: Option<f32>,
) -> Vec<f64> {
    let d = q.len();
    let row = |cache: &[f16], p: usize| -> Vec<f64> {
        let at = (p % kv.ring) * kv.stride + kv.offset;
        cache[at..at + d]
            .iter()
            .map(|x| f64::from(x.to_f32()))
            .collect()
    };
    let scores: Vec<f64> = positions
        .clone()
        .map(|p| {
            let k = row(kv.k, p);
            q.iter()
                .zip(&k)
                .map(|(a, b)| f64::from(*a) * b)
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
    let mut out = vec![0f64; d];
    for (p, wp) in positions.zip(&w) {
        for (o, v) in out.iter_mut().zip(row(kv.v, p)) {
            *o += wp * v / total;
        }
    }
    out
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
/// merged: what as many threads as chunks compute, in one.
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
) -> Vec<f32> {
    let n_head = q.len() / hd;
    let plen = partial_len(hd);
    let rows = rows_of(positions, kv.ring);
    let mut parts = vec![vec![f32::NAN; n_head * plen]; split.chunks];
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
        let chunks = (0..split.chunks).filter(|&c| !split.cells(c).is_empty());
        merge_partials(chunks.map(|c| &parts[c][h * plen..(h + 1) * plen]), o);
    }
    out
}

fn even_split(n_cells: usize, chunks: usize) -> KvSplit {
    KvSplit {
        n_cells,
        chunk: n_cells.div_ceil(chunks),
        chunks,
    }
}

#[test]
fn split_geometry_follows_ggml() {
    // Decode at 1000 in a 4096 context on two threads: the view is
    // padded to 1024 cells, 512 each.
    let s = KvSplit::new(1001, 4096, 2).unwrap();
    assert_eq!(s, even_split(1024, 2));
    assert_eq!(
        (s.cells(0), s.cells(1), s.cells(2)),
        (0..512, 512..1024, 1024..1024)
    );
    // At 3500 the 3584 cells go in 7 chunks of 512 (as on ggml's 7
    // threads), not 2 of 1792.
    let s = KvSplit::new(3501, 4096, 2).unwrap();
    assert_eq!(s, even_split(3584, 7));
    assert_eq!(KvSplit::max_chunks(4096, 2), 8);
    assert_eq!(KvSplit::max_chunks(4000, 16), 16);
    // Under 512 cells ggml keeps its per-head path.
    assert_eq!(KvSplit::new(256, 4096, 2), None);
    assert_eq!(KvSplit::new(257, 4096, 2), Some(even_split(512, 2)));
    // The view stops at the cache, itself padded to 256.
    assert_eq!(KvSplit::new(300, 300, 3), Some(even_split(512, 3)));
    assert_eq!(KvSplit::new(5000, 4000, 1), Some(even_split(4096, 8)));
    // A window's ring: the rows in use, however far the positions went.
    assert_eq!(KvSplit::new(100_000, 700, 4), Some(even_split(768, 4)));
    assert_eq!(KvSplit::new(100_000, 700, 1), Some(even_split(768, 2)));
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

    fn split(&self, positions: Range<usize>, sinks: Option<&[f32]>, split: KvSplit) -> Vec<f32> {
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
            c.check_reference(&c.split(0..n, None, split), 0..n, None);
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
                let whole = c.split(positions.clone(), sinks, even_split(512, 1));
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
    let one = c.split(0..n, Some(&sinks), even_split(768, 1));
    for nth in [2, 3, 4] {
        let out = c.split(0..n, Some(&sinks), even_split(768, nth));
        c.check_reference(&out, 0..n, Some(&sinks));
        // Chunks change only the f16 accumulators' roundings (a sink
        // counted twice would change a weight by its own size).
        for (a, b) in out.iter().zip(&one) {
            assert!((a - b).abs() < 8e-3 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
    // A sink above every score takes nearly all the weight.
    let out = c.split(0..n, Some(&[200.0; 4]), even_split(768, 3));
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
            &c.split(positions.clone(), None, split),
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
        let out = split_attend(&c.q, &kv, 1, positions.clone(), d, c.scale(), None, split);
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
    c.check_reference(&c.split(0..n, None, split), 0..n, None);
    let split = KvSplit::new(n, 4096, 600).unwrap();
    assert!(split.cells(599).is_empty());
    c.check_reference(&c.split(0..n, None, split), 0..n, None);
    let out = c.split(0..0, None, even_split(512, 2));
    assert!(out.iter().all(|&o| o == 0.0), "{out:?}");
    // Only sinks: zeros too (the sink carries no value).
    let out = c.split(0..0, Some(&[1.0, 2.0, 3.0]), even_split(512, 2));
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
        let xs: [f32; 8] = std::array::from_fn(|l| f32::from_bits(0x8000_0000 | (base + l as u32)));
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

/// ggml's tiled path (steps of 64 tokens or more) computes attention in
/// f32: each row of a tile within f32 rounding of the f64 result, for
/// causal rows, a sliding window over a ring, and a sink.
#[test]
fn tiled_matches_f64_reference() {
    for (d, ring, window, sink) in [
        (64, usize::MAX, None, None),
        (128, usize::MAX, None, Some(3.0)),
        (72, 160, Some(100), None),
    ] {
        let n = 300;
        let rows = 40;
        let c = Case::new(d, 1, rows, n, d as u64 + 7);
        let kv = KvHead { ring, ..c.kv() };
        // Row r is the token at position 250 + r (a ring holds the last
        // 160: window plus the tile's tokens).
        let positions: Vec<Range<usize>> = (0..rows)
            .map(|r| {
                let end = 250 + r + 1;
                window.map_or(0, |w| end - w)..end
            })
            .collect();
        let mut out = vec![f32::NAN; rows * d];
        let mut scratch = vec![f32::NAN; tiled_scratch_len(d)];
        attend_tile(
            &c.q,
            &positions,
            &kv,
            d,
            c.scale(),
            sink,
            &mut out,
            &mut scratch,
        );
        for (r, o) in out.chunks_exact(d).enumerate() {
            let q = &c.q[r * d..(r + 1) * d];
            let want = reference_f32_query(q, &kv, positions[r].clone(), c.scale(), sink);
            for (i, (o, e)) in o.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*o) - e).abs() < 2e-5 * (1.0 + e.abs()),
                    "d {d} row {r} [{i}]: {o} vs {e}"
                );
            }
        }
    }
}

/// ggml's vector `expf`, replicated lane by lane: within two units in the
/// last place of e^x over softmax's range, 0 at -∞, and 1 at 0.
#[test]
fn v_expf_is_expf() {
    let mut x = -103.0f32;
    while x <= 0.0 {
        let (got, want) = (f64::from(v_expf(x)), f64::from(x).exp());
        assert!(
            (got - want).abs() <= 2.5e-7 * want || (want < 1e-37 && got < 1e-37),
            "{x}: {got} vs {want}"
        );
        x += 0.0137;
    }
    assert_eq!(v_expf(f32::NEG_INFINITY), 0.0);
    assert_eq!(v_expf(0.0), 1.0);
}
