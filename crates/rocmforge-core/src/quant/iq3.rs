//! IQ3_XXS and IQ3_S: 4 weights at a time as a point of a D4-like lattice
//! (`iq_grids`), plus signs and a 4-bit scale per 32 weights.
//!
//! IQ3_XXS (98 bytes per 256, 3.06 bpw): `d: f16`, `qs[64]` (8-bit indices
//! into `IQ3XXS_GRID`, two per 8 elements), then per 32 elements a
//! little-endian `u32` with four 7-bit sign fields (expanded by
//! `KSIGNS_IQ2XS`) and the scale `s` in bits 28..31;
//! value = `d * (0.5 + s) / 2 * grid * sign`.
//!
//! IQ3_S (110 bytes, 3.44 bpw): `d`, `qs[64]` (low 8 bits of 9-bit indices
//! into `IQ3S_GRID`), `qh[8]` (bit `k` of `qh[g]`: the top bit of group `g`'s
//! index `k`), `signs[32]` (all 8 bits), `scales[4]` (a nibble per 32
//! elements, low first); value = `d * (1 + 2s) * grid * sign`.
//!
//! Both quantize without an importance matrix (weights `x²`).
//!
//! One deliberate difference from ggml: its IQ3_S quantizer does not advance
//! its `qs`/`signs` write position past a 32-element group that is exactly
//! zero, so the groups after it land one slot early and decode wrongly. Here
//! every group is written at its own position. Blocks without such a group
//! (every block of real weights, and every block of the parity tests) come out
//! byte-identical.

use super::iq_grids::{Lattice, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS};
use super::iq_search::{
    c_max, fold_signs, fold_signs_even, scale_code, GroupSearch, Requant, Start,
};
use super::{read_f16, write_f16};

/// Writes 4 values `db * grid byte`, negated where bit `first + j` of
/// `signs` is set.
fn decode_quad(grid: u32, signs: u8, first: usize, db: f32, out: &mut [f32]) {
    for (j, o) in out[..4].iter_mut().enumerate() {
        let g = (grid >> (8 * j)) as u8 as f32;
        let sign = if signs & (1 << (first + j)) != 0 {
            -1.0
        } else {
            1.0
        };
        *o = db * g * sign;
    }
}

pub(super) fn decode_iq3xxs(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for ib in 0..8 {
        let at = 66 + 4 * ib;
        let aux = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let qs = 2 + 8 * ib + 2 * l;
            let o = 32 * ib + 8 * l;
            decode_quad(
                IQ3XXS_GRID[b[qs] as usize],
                signs,
                0,
                db,
                &mut out[o..o + 4],
            );
            decode_quad(
                IQ3XXS_GRID[b[qs + 1] as usize],
                signs,
                4,
                db,
                &mut out[o + 4..o + 8],
            );
        }
    }
}

pub(super) fn decode_iq3s(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    for ib in 0..8 {
        let s = (scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
        let db = d * (1 + 2 * s as i32) as f32;
        for l in 0..4 {
            let q = 8 * ib + 2 * l;
            let hi = qh[ib] as usize;
            let i1 = qs[q] as usize | ((hi << (8 - 2 * l)) & 256);
            let i2 = qs[q + 1] as usize | ((hi << (7 - 2 * l)) & 256);
            let sg = signs[4 * ib + l];
            let o = 32 * ib + 8 * l;
            decode_quad(IQ3S_GRID[i1], sg, 0, db, &mut out[o..o + 4]);
            decode_quad(IQ3S_GRID[i2], sg, 4, db, &mut out[o + 4..o + 8]);
        }
    }
}

/// A 32-element group's fit: scale, 8 lattice indices, 4 sign bytes.
struct Group {
    scale: f32,
    index: [u16; 8],
    signs: [u8; 4],
}

/// Fits one 32-element group, or `None` where ggml stores it as zero.
fn fit_group(xb: &[f32], qw: Option<&[f32]>, sigma2: f32, xxs: bool) -> Option<Group> {
    let mut weight = [0.0f32; 32];
    for (i, (w, &v)) in weight.iter_mut().zip(xb).enumerate() {
        *w = match qw {
            Some(qw) => qw[i] * (sigma2 + v * v).sqrt(),
            None => v * v,
        };
    }
    let mut waux = [0.0f32; 32];
    for (a, &w) in waux.iter_mut().zip(&weight) {
        *a = w.sqrt();
    }
    let mut xval = [0.0f32; 32];
    let mut signs = [0u8; 4];
    for (k, s) in signs.iter_mut().enumerate() {
        let g = 8 * k..8 * k + 8;
        *s = if xxs {
            fold_signs_even(&xb[g.clone()], &weight[g.clone()], &mut xval[g])
        } else {
            fold_signs(&xb[g.clone()], &mut xval[g])
        };
    }
    let max = xval[1..].iter().fold(xval[0], |m, &v| c_max(m, v));
    let negligible = if xxs { max < 1e-8 } else { max == 0.0 };
    if negligible {
        return None;
    }
    let search = GroupSearch {
        lattice: if xxs { Lattice::Iq3Xxs } else { Lattice::Iq3S },
        nmax: 8,
        tries: if xxs { -15..=15 } else { -9..=9 },
        step: 0.2,
        start: Start::Max,
        requant: if xxs {
            Requant::OffGrid
        } else {
            Requant::AllIfAnyOffGrid
        },
    };
    let fit = search.fit(&xval, &weight, &waux, max)?;
    let mut scale = fit.scale;
    if scale < 0.0 {
        scale = -scale;
        let mask = if xxs { 127 } else { 255 };
        signs.iter_mut().for_each(|s| *s = !*s & mask);
    }
    Some(Group {
        scale,
        index: fit.index,
        signs,
    })
}

fn sigma2(x: &[f32]) -> f32 {
    2.0 * x[..256].iter().fold(0.0f32, |s, &v| s + v * v) / 256.0
}

/// IQ3_XXS, with or without importance.
pub(super) fn encode_iq3xxs(x: &[f32], qw: Option<&[f32]>, b: &mut [u8]) {
    b.fill(0);
    let sigma2 = sigma2(x);
    let mut scales = [0.0f32; 8];
    let mut words = [0u32; 8];
    for ib in 0..8 {
        let Some(g) = fit_group(
            &x[32 * ib..32 * ib + 32],
            qw.map(|q| &q[32 * ib..]),
            sigma2,
            true,
        ) else {
            continue;
        };
        for (k, &i) in g.index.iter().enumerate() {
            b[2 + 8 * ib + k] = i as u8;
        }
        let s = &g.signs;
        words[ib] = s[0] as u32 | (s[1] as u32) << 7 | (s[2] as u32) << 14 | (s[3] as u32) << 21;
        scales[ib] = g.scale;
    }
    let max_scale = scales.iter().fold(0.0f32, |m, &s| c_max(m, s));
    if max_scale == 0.0 {
        b.fill(0);
        return;
    }
    let d = max_scale / 31.0;
    // ggml's fudge factor: the stored scale is a little larger than the fit.
    write_f16(b, 0, d * 1.0125);
    let id = 1.0 / d;
    for (ib, w) in words.iter_mut().enumerate() {
        *w |= (scale_code(id, scales[ib], 15) as u32) << 28;
        b[66 + 4 * ib..70 + 4 * ib].copy_from_slice(&w.to_le_bytes());
    }
}

/// IQ3_S, with or without importance.
pub(super) fn encode_iq3s(x: &[f32], qw: Option<&[f32]>, b: &mut [u8]) {
    b.fill(0);
    let sigma2 = sigma2(x);
    let mut scales = [0.0f32; 8];
    for ib in 0..8 {
        let Some(g) = fit_group(
            &x[32 * ib..32 * ib + 32],
            qw.map(|q| &q[32 * ib..]),
            sigma2,
            false,
        ) else {
            continue;
        };
        for (k, &i) in g.index.iter().enumerate() {
            b[2 + 8 * ib + k] = i as u8;
            b[66 + ib] |= ((i >> 8) as u8) << k;
        }
        b[74 + 4 * ib..78 + 4 * ib].copy_from_slice(&g.signs);
        scales[ib] = g.scale;
    }
    let max_scale = scales.iter().fold(0.0f32, |m, &s| c_max(m, s));
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    write_f16(b, 0, d * 1.033);
    let id = 1.0 / d;
    for ib in (0..8).step_by(2) {
        b[106 + ib / 2] =
            scale_code(id, scales[ib], 15) | (scale_code(id, scales[ib + 1], 15) << 4);
    }
}
