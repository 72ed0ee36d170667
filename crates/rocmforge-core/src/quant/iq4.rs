//! IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-uniform grid.
//!
//! The grid is denser near zero, where most weights are, so it beats a uniform
//! 4-bit grid at the same size; dot products look the 16 levels up with one
//! byte shuffle and then run as 8-bit integer products.
//!
//! IQ4_NL (18 bytes per 32 elements): `d: f16`, `qs[16]` with Q4_0's nibble
//! order (byte `j`: element `j` low, `j + 16` high);
//! value = `d * IQ4NL_VALUES[q]`.
//!
//! IQ4_XS (136 bytes per 256 elements): `d: f16`, `scales_h: u16`,
//! `scales_l[4]`, `qs[128]`. Each 32-element sub-block `ib` has a 6-bit scale
//! `ls`: low nibble in `scales_l[ib / 2]` (low nibble for even `ib`), top two
//! bits at bits `2 * ib` of `scales_h`; its 16 `qs` bytes use the IQ4_NL nibble
//! order; value = `d * (ls - 32) * IQ4NL_VALUES[q]`.

use super::kquant_search::GROUP_MAX_EPS;
use super::{nearest_int, read_f16, write_f16};

/// The IQ4_NL / IQ4_XS dequantization levels, ascending.
pub const IQ4NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Index of the level nearest to `x` (ties go up), comparing `2x` against the
/// sums of neighbouring levels so the midpoints are exact integers.
fn nearest_level(x: f32) -> u8 {
    let x2 = x + x;
    IQ4NL_VALUES
        .windows(2)
        .filter(|w| x2 >= (w[0] as i32 + w[1] as i32) as f32)
        .count() as u8
}

fn decode_nibbles(qs: &[u8], scale: f32, out: &mut [f32]) {
    for (j, &q) in qs[..16].iter().enumerate() {
        out[j] = scale * IQ4NL_VALUES[(q & 0x0F) as usize] as f32;
        out[j + 16] = scale * IQ4NL_VALUES[(q >> 4) as usize] as f32;
    }
}

fn pack_nibbles(l: &[u8], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = l[j] | (l[j + 16] << 4);
    }
}

pub(super) fn decode_iq4nl(b: &[u8], out: &mut [f32]) {
    decode_nibbles(&b[2..18], read_f16(b, 0), out);
}

pub(super) fn decode_iq4xs(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    for ib in 0..8 {
        let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = (low | (high << 4)) as i32 - 32;
        let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
        decode_nibbles(qs, d * ls as f32, &mut out[32 * ib..32 * ib + 32]);
    }
}

/// ggml's search for one 32-element sub-block's scale (weights `x²`): start
/// from `max / 127`, then try the mirrored scales that send `max` to the grid's
/// far end, `-127 ± 7` steps, keeping the least-squares scale of the best.
/// Returns 0 for an all-zero sub-block.
fn search_scale(x: &[f32]) -> f32 {
    const NTRY: i32 = 7;
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let first = IQ4NL_VALUES[0] as i32;
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = IQ4NL_VALUES[nearest_level(id * v) as usize] as f32;
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d0 = -max / first as f32;
    let (sumqx, sumq2) = sums(1.0 / d0);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let (sumqx, sumq2) = sums((itry + first) as f32 / max);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

fn levels_for(x: &[f32], inv_scale: f32, l: &mut [u8]) {
    for (q, &v) in l.iter_mut().zip(x) {
        *q = nearest_level(inv_scale * v);
    }
}

pub(super) fn encode_iq4nl(x: &[f32], b: &mut [u8]) {
    let d = search_scale(&x[..32]);
    write_f16(b, 0, d);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut l = [0u8; 32];
    levels_for(&x[..32], id, &mut l);
    pack_nibbles(&l, &mut b[2..18]);
}

pub(super) fn encode_iq4xs(x: &[f32], b: &mut [u8]) {
    let mut scales = [0.0f32; 8];
    let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
    for (ib, s) in scales.iter_mut().enumerate() {
        *s = search_scale(&x[32 * ib..32 * ib + 32]);
        if s.abs() > amax_scale {
            amax_scale = s.abs();
            max_scale = *s;
        }
    }
    let d = -max_scale / 32.0;
    write_f16(b, 0, d);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut scales_h = 0u16;
    let mut scales_l = [0u8; 4];
    let mut l = [0u8; 32];
    for (ib, &s) in scales.iter().enumerate() {
        let ls = nearest_int(id * s).clamp(-32, 31);
        // ggml requantizes against the unrounded super-scale here.
        let dl = d * ls as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        let xs = &x[32 * ib..32 * ib + 32];
        levels_for(xs, idl, &mut l);
        pack_nibbles(&l, &mut b[8 + 16 * ib..8 + 16 * ib + 16]);
        let ls = (ls + 32) as u8;
        scales_l[ib / 2] |= (ls & 0x0F) << (4 * (ib % 2));
        scales_h |= ((ls >> 4) as u16) << (2 * ib);
    }
    b[2..4].copy_from_slice(&scales_h.to_le_bytes());
    b[4..8].copy_from_slice(&scales_l);
}
