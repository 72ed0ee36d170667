//! IQ1_S and IQ1_M: ternary weights (-1, 0, 1) 8 at a time as a point of a
//! 2048-entry lattice (`IQ1S_GRID`), shifted by ±1/8 and scaled.
//!
//! IQ1_S (50 bytes per 256, 1.56 bpw): `d: f16`, `qs[32]` (low 8 bits of
//! each 8-element group's 11-bit index), `qh: [u16; 8]`, one per 32
//! elements: the four groups' top 3 index bits at bits `3k`, the 3-bit scale
//! `s` at bits 12..14 and the shift sign at bit 15;
//! value = `d * (2s + 1) * (grid ± 1/8)`.
//!
//! IQ1_M (56 bytes, 1.75 bpw): `qs[32]` as IQ1_S, `qh[16]` (per 16 elements:
//! the two groups' top index bits in the low 3 bits of each nibble, their
//! shift signs in bits 3 and 7), `scales: [u16; 4]` with a 3-bit scale per 16
//! elements in the low 12 bits of each, and the binary16 super-scale spread
//! over the four top nibbles (low nibble first).
//!
//! ggml requires an importance matrix for IQ1_S; IQ1_M falls back to `x²`.

use super::iq_grids::{Lattice, IQ1S_GRID};
use super::iq_lattice::LatticeIndex;
use super::iq_search::c_max;
use super::{nearest_int, read_f16};

const DELTA: f32 = 0.125;
/// Level values with the group shifted up (`x_p`) or down (`x_m`).
const X_P: [f32; 3] = [-1.0 + DELTA, DELTA, 1.0 + DELTA];
const X_M: [f32; 3] = [-1.0 - DELTA, -DELTA, 1.0 - DELTA];

fn decode_group(index: usize, dl: f32, delta: f32, out: &mut [f32]) {
    let grid = IQ1S_GRID[index];
    for (j, o) in out[..8].iter_mut().enumerate() {
        *o = dl * ((grid >> (8 * j)) as u8 as i8 as f32 + delta);
    }
}

fn shift(negative: bool) -> f32 {
    if negative {
        -DELTA
    } else {
        DELTA
    }
}

pub(super) fn decode_iq1s(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for ib in 0..8 {
        let qh = u16::from_le_bytes([b[34 + 2 * ib], b[35 + 2 * ib]]) as usize;
        let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
        let delta = shift(qh & 0x8000 != 0);
        for l in 0..4 {
            let index = b[2 + 4 * ib + l] as usize | (((qh >> (3 * l)) & 7) << 8);
            let o = 32 * ib + 8 * l;
            decode_group(index, dl, delta, &mut out[o..o + 8]);
        }
    }
}

/// The IQ1_M super-block scale, reassembled from the top nibbles.
fn iq1m_scale(sc: &[u16; 4]) -> f32 {
    let bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    half::f16::from_bits(bits).to_f32()
}

fn iq1m_scales(b: &[u8]) -> [u16; 4] {
    std::array::from_fn(|i| u16::from_le_bytes([b[48 + 2 * i], b[49 + 2 * i]]))
}

pub(super) fn decode_iq1m(b: &[u8], out: &mut [f32]) {
    let sc = iq1m_scales(b);
    let d = iq1m_scale(&sc);
    for ib in 0..8 {
        let s = sc[ib / 2] as usize >> (6 * (ib % 2));
        let dl = [
            d * (2 * (s & 7) + 1) as f32,
            d * (2 * ((s >> 3) & 7) + 1) as f32,
        ];
        for l in 0..4 {
            let qh = b[32 + 2 * ib + l / 2] as usize;
            let hi = if l % 2 == 0 { qh << 8 } else { qh << 4 };
            let index = b[4 * ib + l] as usize | (hi & 0x700);
            let sign_bit = if l % 2 == 0 { 0x08 } else { 0x80 };
            let negative = qh & sign_bit != 0;
            let o = 32 * ib + 8 * l;
            decode_group(index, dl[l / 2], shift(negative), &mut out[o..o + 8]);
        }
    }
}

/// Element indices sorted by value, ties in index order (ggml's qsort is
/// glibc's merge sort, which is stable).
fn sorted_order<const N: usize>(xb: &[f32]) -> [usize; N] {
    let mut idx: [usize; N] = std::array::from_fn(|i| i);
    idx.sort_by(|&a, &b| {
        xb[a]
            .partial_cmp(&xb[b])
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    idx
}

/// Levels 0/1/2 from a split of the sorted order at `i1 <= i2`.
fn split_levels(idx: &[usize], i1: usize, i2: usize, l: &mut [i8]) {
    for (j, &i) in idx.iter().enumerate() {
        l[i] = if j < i1 {
            0
        } else if j < i2 {
            1
        } else {
            2
        };
    }
}

/// Puts each 8-element group of levels on the lattice (the best point by
/// weighted error at `scale` for those off it) and refits the scale if any
/// moved. `values[k]` are the level values of group `k`.
fn snap_to_lattice(
    xb: &[f32],
    weight: &[f32],
    l: &mut [i8],
    values: &[&[f32; 3]],
    scale: &mut f32,
) -> [u16; 4] {
    let lat = LatticeIndex::get(Lattice::Iq1S);
    let mut index = [0u16; 4];
    let mut all_on_grid = true;
    for (k, xx) in values.iter().enumerate() {
        let g = 8 * k..8 * k + 8;
        index[k] = match lat.lookup(&l[g.clone()]) {
            Ok(i) => i as u16,
            Err(cands) => {
                all_on_grid = false;
                lat.nearest_valued(
                    cands,
                    &xb[g.clone()],
                    &weight[g.clone()],
                    *scale,
                    xx,
                    &mut l[g],
                ) as u16
            }
        };
    }
    if !all_on_grid {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for (k, xx) in values.iter().enumerate() {
            for (j, &c) in lat.coords(index[k] as usize).iter().enumerate() {
                let w = weight[8 * k + j];
                let q = xx[((c - 1) / 2) as usize];
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
        if sumqx > 0.0 && sumq2 > 0.0 {
            *scale = sumqx / sumq2;
        }
    }
    index
}

fn sigma2(x: &[f32]) -> f32 {
    2.0 * x[..256].iter().fold(0.0f32, |s, &v| s + v * v) / 256.0
}

fn abs_max(xb: &[f32]) -> f32 {
    xb[1..].iter().fold(xb[0].abs(), |m, &v| c_max(m, v.abs()))
}

/// IQ1_S. `qw` is the importance of the block's 256 columns; ggml has no
/// quantizer without one.
///
/// Per 32 elements, the best ternary assignment for a given scale is a split
/// of the sorted values into three runs, so every split (and both shifts) is
/// scored exactly from prefix sums before the groups are moved onto the
/// lattice.
pub(super) fn encode_iq1s(x: &[f32], qw: &[f32], b: &mut [u8]) {
    b.fill(0);
    let sigma2 = sigma2(x);
    let mut scales = [0.0f32; 8];
    let mut negative_shift = [false; 8];
    let mut qh = [0u16; 8];
    for ib in 0..8 {
        let xb = &x[32 * ib..32 * ib + 32];
        let mut weight = [0.0f32; 32];
        for (i, w) in weight.iter_mut().enumerate() {
            *w = qw[32 * ib + i] * (sigma2 + xb[i] * xb[i]).sqrt();
        }
        if abs_max(xb) < 1e-12 {
            continue;
        }
        let idx = sorted_order::<32>(xb);
        let (mut sumx, mut sumw) = ([0.0f32; 33], [0.0f32; 33]);
        for (j, &i) in idx.iter().enumerate() {
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        let mut best = (-f32::MAX, 0usize, 0usize, 0i32);
        let mut scale = 0.0f32;
        for i1 in 0..=32 {
            for i2 in i1..=32 {
                for (xv, sh) in [(&X_P, 1), (&X_M, -1)] {
                    let sumqx = (sumx[i1] - sumx[0]) * xv[0]
                        + (sumx[i2] - sumx[i1]) * xv[1]
                        + (sumx[32] - sumx[i2]) * xv[2];
                    let sumq2 = (sumw[i1] - sumw[0]) * xv[0] * xv[0]
                        + (sumw[i2] - sumw[i1]) * xv[1] * xv[1]
                        + (sumw[32] - sumw[i2]) * xv[2] * xv[2];
                    if sumq2 > 0.0 && sumqx * sumqx > best.0 * sumq2 {
                        scale = sumqx / sumq2;
                        best = (scale * sumqx, i1, i2, sh);
                    }
                }
            }
        }
        let (_, i1, i2, mut sh) = best;
        if sh == 0 {
            continue;
        }
        let mut l = [0i8; 32];
        split_levels(&idx, i1, i2, &mut l);
        if scale < 0.0 {
            l.iter_mut().for_each(|q| *q = 2 - *q);
            scale = -scale;
            sh = -sh;
        }
        let xx = if sh == 1 { &X_P } else { &X_M };
        let index = snap_to_lattice(xb, &weight, &mut l, &[xx; 4], &mut scale);
        for (k, &i) in index.iter().enumerate() {
            b[2 + 4 * ib + k] = i as u8;
            qh[ib] |= (i >> 8) << (3 * k);
        }
        scales[ib] = scale;
        negative_shift[ib] = sh == -1;
    }
    let max_scale = scales.iter().fold(0.0f32, |m, &s| c_max(m, s));
    if max_scale != 0.0 {
        let d = max_scale / 15.0;
        // ggml's fudge factor.
        super::write_f16(b, 0, d * 1.125);
        let id = 1.0 / d;
        for ib in 0..8 {
            let mut l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7) as u16;
            if negative_shift[ib] {
                l |= 8;
            }
            qh[ib] |= l << 12;
        }
    }
    for (ib, h) in qh.iter().enumerate() {
        b[34 + 2 * ib..36 + 2 * ib].copy_from_slice(&h.to_le_bytes());
    }
}

/// IQ1_M's per-group weights: importance-based like IQ1_S, or `x²`.
fn iq1m_weights(xb: &[f32], qw: Option<&[f32]>, sigma2: f32) -> [f32; 16] {
    std::array::from_fn(|i| match qw {
        Some(qw) => qw[i] * (sigma2 + xb[i] * xb[i]).sqrt(),
        None => xb[i] * xb[i],
    })
}

/// The level values of IQ1_M's two 8-element halves for shift code `k`
/// (bit 1: first half down, bit 0: second half down).
fn iq1m_values(k: usize) -> [&'static [f32; 3]; 2] {
    [
        if k < 2 { &X_P } else { &X_M },
        if k.is_multiple_of(2) { &X_P } else { &X_M },
    ]
}

/// IQ1_M, with or without importance. Like IQ1_S per 16 elements, except that
/// each half picks its own shift (four combinations per split); the
/// super-block scale is then refitted over the whole block.
pub(super) fn encode_iq1m(x: &[f32], qw: Option<&[f32]>, b: &mut [u8]) {
    b.fill(0);
    let sigma2 = sigma2(x);
    let mut scales = [0.0f32; 16];
    let mut shifts = [0usize; 16];
    for ib in 0..16 {
        let xb = &x[16 * ib..16 * ib + 16];
        let weight = iq1m_weights(xb, qw.map(|q| &q[16 * ib..]), sigma2);
        if abs_max(xb) < 1e-7 {
            continue;
        }
        let idx = sorted_order::<16>(xb);
        // Prefix sums per half, since each half may use its own shift.
        let (mut px, mut pw) = ([[0.0f32; 17]; 2], [[0.0f32; 17]; 2]);
        for (j, &i) in idx.iter().enumerate() {
            let h = usize::from(i >= 8);
            px[h][j + 1] = px[h][j] + weight[i] * xb[i];
            px[1 - h][j + 1] = px[1 - h][j];
            pw[h][j + 1] = pw[h][j] + weight[i];
            pw[1 - h][j + 1] = pw[1 - h][j];
        }
        let txs = [px[0][16], px[1][16]];
        let tws = [pw[0][16], pw[1][16]];
        let (p2, m2) = (X_P[2], X_M[2]);
        // v0 - v1 = v1 - v2 = -1 for both shifts, so a split's sums collapse
        // to totals minus two prefix sums.
        let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
        let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
        let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
        let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
        let mut best = (-f32::MAX, 0usize, 0usize, None::<usize>);
        let mut scale = 0.0f32;
        for i1 in 0..=16 {
            for i2 in i1..=16 {
                let (mut qx_p, mut qx_m, mut q2_p, mut q2_m) =
                    ([0.0f32; 2], [0.0f32; 2], [0.0f32; 2], [0.0f32; 2]);
                for h in 0..2 {
                    let sx = px[h][i1] + px[h][i2];
                    qx_p[h] = txs[h] * p2 - sx;
                    qx_m[h] = txs[h] * m2 - sx;
                    q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                    q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                }
                let sumqx = [
                    qx_p[0] + qx_p[1],
                    qx_p[0] + qx_m[1],
                    qx_m[0] + qx_p[1],
                    qx_m[0] + qx_m[1],
                ];
                let sumq2 = [
                    q2_p[0] + q2_p[1],
                    q2_p[0] + q2_m[1],
                    q2_m[0] + q2_p[1],
                    q2_m[0] + q2_m[1],
                ];
                for k in 0..4 {
                    if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best.0 * sumq2[k] {
                        scale = sumqx[k] / sumq2[k];
                        best = (scale * sumqx[k], i1, i2, Some(k));
                    }
                }
            }
        }
        let (_, i1, i2, Some(mut k)) = best else {
            continue;
        };
        let mut l = [0i8; 16];
        split_levels(&idx, i1, i2, &mut l);
        if scale < 0.0 {
            l.iter_mut().for_each(|q| *q = 2 - *q);
            scale = -scale;
            k = 3 - k;
        }
        let index = snap_to_lattice(xb, &weight, &mut l, &iq1m_values(k), &mut scale);
        b[2 * ib] = index[0] as u8;
        b[2 * ib + 1] = index[1] as u8;
        b[32 + ib] = ((index[0] >> 8) | ((index[1] >> 8) << 4)) as u8;
        scales[ib] = scale;
        shifts[ib] = k;
    }
    let max_scale = scales.iter().fold(0.0f32, |m, &s| c_max(m, s));
    if max_scale == 0.0 {
        return;
    }
    let mut sc = [0u16; 4];
    let mut d = max_scale / 15.0;
    let id = 1.0 / d;
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    const MASKS: [u8; 4] = [0x00, 0x80, 0x08, 0x88];
    for ib in 0..16 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
        sc[ib / 4] |= (l as u16) << (3 * (ib % 4));
        b[32 + ib] |= MASKS[shifts[ib]];
        // The refit runs over every group, the skipped ones included (they
        // read lattice point 0), as ggml's does.
        let xb = &x[16 * ib..16 * ib + 16];
        let weight = iq1m_weights(xb, qw.map(|q| &q[16 * ib..]), sigma2);
        for (k, xx) in iq1m_values(shifts[ib]).iter().enumerate() {
            let hi = ((b[32 + ib] as usize) << (8 - 4 * k)) & 0x700;
            let grid = IQ1S_GRID[b[2 * ib + k] as usize + hi];
            for j in 0..8 {
                let c = (grid >> (8 * j)) as u8 as i8;
                let w = weight[8 * k + j];
                let q = xx[(c + 1) as usize] * (2 * l + 1) as f32;
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
    }
    if sumq2 > 0.0 {
        d = sumqx / sumq2;
    }
    // ggml's fudge factor.
    let s = half::f16::from_f32(d * 1.1125).to_bits();
    sc[0] |= (s & 0x000f) << 12;
    sc[1] |= (s & 0x00f0) << 8;
    sc[2] |= (s & 0x0f00) << 4;
    sc[3] |= s & 0xf000;
    for (i, v) in sc.iter().enumerate() {
        b[48 + 2 * i..50 + 2 * i].copy_from_slice(&v.to_le_bytes());
    }
}
