//! ggml's tiled flash attention (`ggml_compute_forward_flash_attn_ext_tiled`),
//! which its CPU backend runs for every step of at least [`Q_TILE`] query
//! tokens (prompt chunks; llama.cpp's ubatch is 512): all in f32, unlike the
//! per-head path of [`attend_head`](super::attend_head).
//!
//! - Q stays f32; K and V are widened from f16.
//! - Cells go in tiles of [`KV_TILE`] from cell 0. A tile's scores are
//!   `q·k` summed by one fused multiply-add per dimension in order (ggml's
//!   `simd_gemm`), times the scale; cells a token does not see are -∞.
//! - The online softmax moves once per tile: the running maximum rescales
//!   the accumulator (libm `expf`), the tile's weights are ggml's vector
//!   `expf` (`ggml_v_expf`, [`v_expf`]) of `score - max`, summed eight at a
//!   time as its AVX2 reduction does and added up in f64.
//! - The accumulator is f32 and takes each cell's `weight * v` as one fused
//!   multiply-add, in cell order.
//!
//! Over thousands of positions the per-head path's f16 accumulator drifts
//! from this by a fifth of the logits' spread (measured against llama.cpp
//! at 4.5k positions, `tests/long_reference.rs` in the conformance crate),
//! so a long prompt must take this path to give llama.cpp's logits.

use std::ops::Range;

use half::f16;

use super::split::rows_of;
use super::KvHead;

/// Query tokens of one tile, and the fewest a step must have to take this
/// path (ggml's `GGML_FA_TILE_Q`).
pub const Q_TILE: usize = 64;

/// Cache cells of one tile (ggml's `GGML_FA_TILE_KV`).
pub const KV_TILE: usize = 64;

/// f32 values of scratch [`attend_tile`] needs.
pub fn tiled_scratch_len(head_dim: usize) -> usize {
    2 * KV_TILE * head_dim + Q_TILE * KV_TILE + 2 * Q_TILE
}

/// One head of up to [`Q_TILE`] query tokens over the cache: row `r` of `q`
/// (`head_dim` values each) sees `positions[r]`, and its normalised output
/// goes to row `r` of `out`. `kv` locates the KV head (position `p` in row
/// `p % kv.ring`); a `sink` logit (gpt-oss) joins each row's denominator
/// after the cells, as ggml folds it in. `scratch` holds at least
/// [`tiled_scratch_len`] values.
///
/// # Panics
/// If a slice is too short for the given geometry (a caller bug).
#[allow(clippy::too_many_arguments)]
pub fn attend_tile(
    q: &[f32],
    positions: &[Range<usize>],
    kv: &KvHead,
    head_dim: usize,
    scale: f32,
    sink: Option<f32>,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let rows = positions.len();
    assert!(rows <= Q_TILE, "attend_tile: {rows} rows in a tile");
    assert!(q.len() >= rows * head_dim, "attend_tile: query rows");
    assert!(out.len() >= rows * head_dim, "attend_tile: output rows");
    assert!(
        scratch.len() >= tiled_scratch_len(head_dim),
        "attend_tile: scratch"
    );
    assert!(
        kv.offset + head_dim <= kv.stride,
        "attend_tile: head outside its row"
    );
    // Each row's visible cells: at most two runs of the ring.
    let cells: [[Range<usize>; 2]; Q_TILE] = std::array::from_fn(|r| {
        positions
            .get(r)
            .map_or([0..0, 0..0], |p| rows_of(p.clone(), kv.ring))
    });
    let cells = &cells[..rows];
    let n_cells = cells.iter().flatten().map(|r| r.end).max().unwrap_or(0);
    if n_cells > 0 {
        let needed = (n_cells - 1) * kv.stride + kv.offset + head_dim;
        assert!(
            kv.k.len() >= needed && kv.v.len() >= needed,
            "attend_tile: cache shorter than {n_cells} cells"
        );
    }
    let tile = Tile {
        q,
        cells,
        n_cells,
        kv,
        hd: head_dim,
        scale,
        sink,
    };
    #[cfg(target_arch = "x86_64")]
    if super::has_simd() {
        // SAFETY: `has_simd` found AVX2, FMA and F16C; the geometry was
        // checked above.
        unsafe {
            return tile_fma(&tile, out, scratch);
        }
    }
    run_tile(&tile, out, scratch);
}

/// One call's inputs, as [`attend_tile`] checked them.
struct Tile<'a> {
    q: &'a [f32],
    /// Each row's visible cells.
    cells: &'a [[Range<usize>; 2]],
    n_cells: usize,
    kv: &'a KvHead<'a>,
    hd: usize,
    scale: f32,
    sink: Option<f32>,
}

/// [`run_tile`] compiled with FMA, so each `mul_add` is one instruction.
///
/// # Safety
/// AVX2, FMA and F16C are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_fma(tile: &Tile, out: &mut [f32], scratch: &mut [f32]) {
    run_tile(tile, out, scratch);
}

#[inline(always)]
fn run_tile(tile: &Tile, out: &mut [f32], scratch: &mut [f32]) {
    let Tile {
        q,
        cells,
        n_cells,
        kv,
        hd,
        scale,
        sink,
    } = *tile;
    let rows = cells.len();
    let (kt, rest) = scratch.split_at_mut(KV_TILE * hd);
    let (v32, rest) = rest.split_at_mut(KV_TILE * hd);
    let (kq, rest) = rest.split_at_mut(Q_TILE * KV_TILE);
    let (max, rest) = rest.split_at_mut(Q_TILE);
    let sum = &mut rest[..Q_TILE];
    max.fill(f32::NEG_INFINITY);
    sum.fill(0.0);
    let out = &mut out[..rows * hd];
    out.fill(0.0);
    let sees = |r: usize, c: usize| cells[r].iter().any(|run| run.contains(&c));
    for c0 in (0..n_cells).step_by(KV_TILE) {
        let block = c0..(c0 + KV_TILE).min(n_cells);
        let n = block.len();
        // ggml skips a tile no row sees.
        if !(0..rows).any(|r| {
            cells[r]
                .iter()
                .any(|run| run.start < block.end && block.start < run.end)
        }) {
            continue;
        }
        // K transposed, so a tile's cells are contiguous for each dimension.
        for (tk, c) in block.clone().enumerate() {
            let at = c * kv.stride + kv.offset;
            for (d, &k) in kv.k[at..at + hd].iter().enumerate() {
                kt[d * KV_TILE + tk] = k.to_f32();
            }
        }
        for r in 0..rows {
            let s = &mut kq[r * KV_TILE..(r + 1) * KV_TILE];
            s.fill(0.0);
            let qr = &q[r * hd..(r + 1) * hd];
            for (d, &qd) in qr.iter().enumerate() {
                let krow = &kt[d * KV_TILE..d * KV_TILE + n];
                for (acc, &k) in s[..n].iter_mut().zip(krow) {
                    *acc = k.mul_add(qd, *acc);
                }
            }
            for (tk, x) in s.iter_mut().enumerate() {
                *x = if tk < n && sees(r, c0 + tk) {
                    *x * scale
                } else {
                    f32::NEG_INFINITY
                };
            }
            let tile_max = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            if tile_max == f32::NEG_INFINITY {
                // The row sees none of the tile: no weight at all.
                s.fill(0.0);
                continue;
            }
            let new_max = max[r].max(tile_max);
            if new_max > max[r] {
                let ms = (max[r] - new_max).exp();
                out[r * hd..(r + 1) * hd].iter_mut().for_each(|o| *o *= ms);
                sum[r] *= ms;
            }
            max[r] = new_max;
            let mut total = 0f64;
            for lanes in s.chunks_exact_mut(8) {
                for x in lanes.iter_mut() {
                    *x = v_expf(*x - new_max);
                }
                // ggml's AVX2 reduction of eight lanes.
                let h: [f32; 4] = std::array::from_fn(|i| lanes[i + 4] + lanes[i]);
                total += f64::from((h[0] + h[2]) + (h[1] + h[3]));
            }
            sum[r] = (f64::from(sum[r]) + total) as f32;
        }
        for (tk, c) in block.clone().enumerate() {
            let at = c * kv.stride + kv.offset;
            widen(&kv.v[at..at + hd], &mut v32[tk * hd..(tk + 1) * hd]);
        }
        for r in 0..rows {
            let acc = &mut out[r * hd..(r + 1) * hd];
            for (tk, &p) in kq[r * KV_TILE..r * KV_TILE + n].iter().enumerate() {
                if p == 0.0 {
                    // fma(acc, v, 0) is acc: masked and skipped cells.
                    continue;
                }
                for (a, &v) in acc.iter_mut().zip(&v32[tk * hd..(tk + 1) * hd]) {
                    *a = v.mul_add(p, *a);
                }
            }
        }
    }
    for r in 0..rows {
        let acc = &mut out[r * hd..(r + 1) * hd];
        if let Some(s) = sink {
            let (mut ms, mut vs) = (1.0f32, 1.0f32);
            if s > max[r] {
                ms = (max[r] - s).exp();
                acc.iter_mut().for_each(|o| *o *= ms);
            } else {
                vs = (s - max[r]).exp();
            }
            sum[r] = sum[r] * ms + vs;
        }
        let inv = if sum[r] == 0.0 { 0.0 } else { 1.0 / sum[r] };
        acc.iter_mut().for_each(|o| *o *= inv);
    }
}

#[inline(always)]
fn widen(src: &[f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// ggml's vector `expf` (`ggml_v_expf` in `ggml-cpu/vec.h`, its AVX2 form)
/// on one lane: every lane is computed alone, so this is it bit for bit
/// where `mul_add` is a fused multiply-add.
#[inline(always)]
pub fn v_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // 0x1.715476p+0
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),                  // 0x1.7f7d1cp-20
        (-n).mul_add(f32::from_bits(0x3f31_7200), x), // 0x1.62e4p-1
    );
    let e = z.to_bits().wrapping_shl(23);
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits()));
    let u = b * b;
    let j = f32::from_bits(0x3c07_2010) // 0x1.0e4020p-7
        .mul_add(b, f32::from_bits(0x3d2b_9f17)) // 0x1.573e2ep-5
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)), // 0x1.555e66p-3, 0x1.fffdb6p-2
        )
        .mul_add(u, f32::from_bits(0x3f7f_fff6) * b); // 0x1.ffffecp-1
    if n.abs() <= 126.0 {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    if n.abs() > 192.0 {
        return s1 * s1;
    }
    let s2 = f32::from_bits(e.wrapping_sub(g));
    s2.mul_add(j, s2) * s1
}
