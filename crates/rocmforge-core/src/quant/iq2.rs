//! IQ2_XXS, IQ2_XS and IQ2_S: 8 weights at a time as a point of an E8-like
//! lattice with levels 8, 25, 43 (`iq_grids`), plus signs and a 4-bit scale.
//!
//! IQ2_XXS (66 bytes per 256, 2.06 bpw): `d: f16`, then per 32 elements two
//! little-endian `u32`s: the first holds four 8-bit indices into
//! `IQ2XXS_GRID`, the second four 7-bit sign fields (bits `7k..7k+7`,
//! expanded by `KSIGNS_IQ2XS`) and the scale `s` in bits 28..31;
//! value = `d * (0.5 + s) / 4 * grid * sign`.
//!
//! IQ2_XS (74 bytes, 2.31 bpw): `d`, `qs: [u16; 32]` (9-bit index into
//! `IQ2XS_GRID` | 7-bit sign field << 9, one per 8 elements), `scales[8]`
//! (a nibble per 16 elements, low nibble first); same value formula.
//!
//! IQ2_S (82 bytes, 2.56 bpw): `d`, `qs[32]` (low 8 bits of each 8-element
//! group's 10-bit index into `IQ2S_GRID`), `signs[32]` (all 8 sign bits),
//! `qh[8]` (the index's top 2 bits, bits `2(g % 4)` of `qh[g / 4]`),
//! `scales[8]` as IQ2_XS.
//!
//! ggml requires an importance matrix for IQ2_XXS and IQ2_XS (their
//! quantizers have no fallback weights); IQ2_S falls back to `σ²/4 + x²`.

use super::iq_grids::{Lattice, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, KSIGNS_IQ2XS};
use super::iq_search::{
    c_max, fold_signs, fold_signs_even, scale_code, GroupSearch, Requant, Start,
};
use super::kquant_search::GROUP_MAX_EPS;
use super::{read_f16, write_f16};

/// Writes 8 values `db * grid byte`, negated where `signs` has a bit set.
fn decode_group(grid: u64, signs: u8, db: f32, out: &mut [f32]) {
    for (j, o) in out[..8].iter_mut().enumerate() {
        let g = (grid >> (8 * j)) as u8 as f32;
        let sign = if signs & (1 << j) != 0 { -1.0 } else { 1.0 };
        *o = db * g * sign;
    }
}

/// `d * (0.5 + s) * 0.25`, in ggml's operation order.
fn group_scale(d: f32, s: u32) -> f32 {
    d * (0.5 + s as f32) * 0.25
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(super) fn decode_iq2xxs(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for ib in 0..8 {
        let idx = u32_at(b, 2 + 8 * ib);
        let aux = u32_at(b, 6 + 8 * ib);
        let db = group_scale(d, aux >> 28);
        for l in 0..4 {
            let grid = IQ2XXS_GRID[(idx >> (8 * l)) as u8 as usize];
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let at = 32 * ib + 8 * l;
            decode_group(grid, signs, db, &mut out[at..at + 8]);
        }
    }
}

pub(super) fn decode_iq2xs(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for ib in 0..8 {
        let sc = b[66 + ib];
        let db = [
            group_scale(d, (sc & 0xF) as u32),
            group_scale(d, (sc >> 4) as u32),
        ];
        for l in 0..4 {
            let q = u16::from_le_bytes([b[2 + 8 * ib + 2 * l], b[3 + 8 * ib + 2 * l]]);
            let grid = IQ2XS_GRID[(q & 511) as usize];
            let at = 32 * ib + 8 * l;
            decode_group(
                grid,
                KSIGNS_IQ2XS[(q >> 9) as usize],
                db[l / 2],
                &mut out[at..at + 8],
            );
        }
    }
}

pub(super) fn decode_iq2s(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
    for ib in 0..8 {
        let db = [
            group_scale(d, (scales[ib] & 0xF) as u32),
            group_scale(d, (scales[ib] >> 4) as u32),
        ];
        for l in 0..4 {
            let g = 4 * ib + l;
            let index = qs[g] as usize | (((qh[ib] as usize) << (8 - 2 * l)) & 0x300);
            decode_group(
                IQ2S_GRID[index],
                signs[g],
                db[l / 2],
                &mut out[8 * g..8 * g + 8],
            );
        }
    }
}

/// ggml's per-element weights: the importance times `sqrt(sigma2 + x²)`, or
/// `fallback` where the caller has no importance.
fn element_weights(
    x: &[f32],
    qw: Option<&[f32]>,
    sigma2: f32,
    fallback: impl Fn(f32) -> f32,
    weight: &mut [f32],
) {
    for (i, (w, &v)) in weight.iter_mut().zip(x).enumerate() {
        *w = match qw {
            Some(qw) => qw[i] * (sigma2 + v * v).sqrt(),
            None => fallback(v),
        };
    }
}

fn sum_squares(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |s, &v| s + v * v)
}

/// IQ2_XXS. `qw` is the importance of the block's 256 columns; ggml has no
/// quantizer without one.
pub(super) fn encode_iq2xxs(x: &[f32], qw: &[f32], b: &mut [u8]) {
    let search = GroupSearch {
        lattice: Lattice::Iq2Xxs,
        nmax: 3,
        tries: -6..=6,
        step: 0.1,
        start: Start::UniformFit,
        requant: Requant::Always,
    };
    b.fill(0);
    let sigma2 = sum_squares(&x[..256]) / 256.0;
    let mut q2 = [0u32; 16];
    let mut scales = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    let (mut weight, mut waux, mut xval) = ([0.0f32; 32], [0.0f32; 32], [0.0f32; 32]);
    for ib in 0..8 {
        let xb = &x[32 * ib..32 * ib + 32];
        element_weights(xb, Some(&qw[32 * ib..]), sigma2, |_| 0.0, &mut weight);
        for (a, &w) in waux.iter_mut().zip(&weight) {
            *a = w.sqrt();
        }
        let mut signs = [0u8; 4];
        for (k, s) in signs.iter_mut().enumerate() {
            let g = 8 * k..8 * k + 8;
            *s = fold_signs_even(&xb[g.clone()], &weight[g.clone()], &mut xval[g]);
        }
        let max = xval[1..].iter().fold(xval[0], |m, &v| c_max(m, v));
        if max < GROUP_MAX_EPS {
            continue;
        }
        let Some(fit) = search.fit(&xval, &weight, &waux, max) else {
            continue;
        };
        let mut scale = fit.scale;
        if scale < 0.0 {
            scale = -scale;
            signs.iter_mut().for_each(|s| *s = !*s & 127);
        }
        for (k, (&i, &s)) in fit.index.iter().zip(&signs).enumerate() {
            q2[2 * ib] |= (i as u32) << (8 * k);
            q2[2 * ib + 1] |= (s as u32) << (7 * k);
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    write_f16(b, 0, d);
    let id = 1.0 / d;
    for (ib, &s) in scales.iter().enumerate() {
        q2[2 * ib + 1] |= (scale_code(id, s, 15) as u32) << 28;
    }
    for (i, q) in q2.iter().enumerate() {
        b[2 + 4 * i..6 + 4 * i].copy_from_slice(&q.to_le_bytes());
    }
}

/// What separates IQ2_XS from IQ2_S in their otherwise shared quantizer.
struct Iq2Sixteen {
    search: GroupSearch,
    /// Sign fields of 7 bits with implied parity (XS) or all 8 bits (S).
    seven_signs: bool,
    eps: f32,
    /// `sigma2` is `k * sum(x²) / 256`.
    sigma_factor: f32,
    /// Stored super-scale is `max_scale / 31` times this.
    fudge: f32,
}

const IQ2XS: Iq2Sixteen = Iq2Sixteen {
    search: GroupSearch {
        lattice: Lattice::Iq2Xs,
        nmax: 3,
        tries: -9..=9,
        step: 0.1,
        start: Start::Max,
        requant: Requant::OffGrid,
    },
    seven_signs: true,
    eps: GROUP_MAX_EPS,
    sigma_factor: 1.0,
    fudge: 1.0,
};

const IQ2S: Iq2Sixteen = Iq2Sixteen {
    search: GroupSearch {
        lattice: Lattice::Iq2S,
        nmax: 3,
        tries: -9..=9,
        step: 0.1,
        start: Start::Max,
        requant: Requant::OffGrid,
    },
    seven_signs: false,
    eps: 1e-8,
    sigma_factor: 2.0,
    fudge: 0.9875,
};

/// Fits the 16 groups of 16; returns per group the scale, the two lattice
/// indices and the two sign bytes.
fn fit_sixteens(
    t: &Iq2Sixteen,
    x: &[f32],
    qw: Option<&[f32]>,
) -> ([f32; 16], [[u16; 2]; 16], [[u8; 2]; 16]) {
    let sigma2 = t.sigma_factor * sum_squares(&x[..256]) / 256.0;
    let mut scales = [0.0f32; 16];
    let mut index = [[0u16; 2]; 16];
    let mut signs = [[0u8; 2]; 16];
    let (mut weight, mut waux, mut xval) = ([0.0f32; 16], [0.0f32; 16], [0.0f32; 16]);
    for ib in 0..16 {
        let xb = &x[16 * ib..16 * ib + 16];
        let qb = qw.map(|q| &q[16 * ib..16 * ib + 16]);
        element_weights(xb, qb, sigma2, |v| 0.25 * sigma2 + v * v, &mut weight);
        for (a, &w) in waux.iter_mut().zip(&weight) {
            *a = w.sqrt();
        }
        let mut s = [0u8; 2];
        for (k, s) in s.iter_mut().enumerate() {
            let g = 8 * k..8 * k + 8;
            *s = if t.seven_signs {
                fold_signs_even(&xb[g.clone()], &weight[g.clone()], &mut xval[g])
            } else {
                fold_signs(&xb[g.clone()], &mut xval[g])
            };
        }
        let max = xval[1..].iter().fold(xval[0], |m, &v| c_max(m, v));
        // A negligible group stays all zero: index 0, no signs, scale 0.
        if max < t.eps {
            continue;
        }
        let Some(fit) = t.search.fit(&xval, &weight, &waux, max) else {
            continue;
        };
        let mut scale = fit.scale;
        if scale < 0.0 {
            scale = -scale;
            let mask = if t.seven_signs { 127 } else { 255 };
            s.iter_mut().for_each(|s| *s = !*s & mask);
        }
        signs[ib] = s;
        index[ib] = [fit.index[0], fit.index[1]];
        scales[ib] = scale;
    }
    (scales, index, signs)
}

/// The super-block scale and the 4-bit group scales, packed two per byte.
fn pack_scales(t: &Iq2Sixteen, scales: &[f32; 16], b: &mut [u8], scales_at: usize) -> bool {
    let max_scale = scales.iter().fold(0.0f32, |m, &s| c_max(m, s));
    if max_scale == 0.0 {
        return false;
    }
    let d = max_scale / 31.0;
    write_f16(b, 0, d * t.fudge);
    let id = 1.0 / d;
    for (ib, &s) in scales.iter().enumerate() {
        b[scales_at + ib / 2] |= scale_code(id, s, 15) << (4 * (ib % 2));
    }
    true
}

/// IQ2_XS. ggml has no quantizer without an importance.
pub(super) fn encode_iq2xs(x: &[f32], qw: &[f32], b: &mut [u8]) {
    b.fill(0);
    let (scales, index, signs) = fit_sixteens(&IQ2XS, x, Some(qw));
    if !pack_scales(&IQ2XS, &scales, b, 66) {
        // An all-zero super-block keeps d = 0 and zero indices; ggml leaves
        // its scale bytes zero too.
        return;
    }
    for ib in 0..16 {
        for k in 0..2 {
            let q = index[ib][k] | ((signs[ib][k] as u16) << 9);
            let at = 2 + 4 * ib + 2 * k;
            b[at..at + 2].copy_from_slice(&q.to_le_bytes());
        }
    }
}

/// IQ2_S, with or without importance.
pub(super) fn encode_iq2s(x: &[f32], qw: Option<&[f32]>, b: &mut [u8]) {
    b.fill(0);
    let (scales, index, signs) = fit_sixteens(&IQ2S, x, qw);
    for ib in 0..16 {
        for k in 0..2 {
            let g = 2 * ib + k;
            let i = index[ib][k];
            b[2 + g] = i as u8;
            b[66 + g / 4] |= ((i >> 8) as u8) << (2 * (g % 4));
            b[34 + g] = signs[ib][k];
        }
    }
    pack_scales(&IQ2S, &scales, b, 74);
}
