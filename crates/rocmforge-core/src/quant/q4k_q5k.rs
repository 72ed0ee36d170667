//! Q4_K and Q5_K: 256-element super-blocks of eight 32-element sub-blocks,
//! each with its own 6-bit scale and 6-bit min.
//!
//! Q4_K (144 bytes, 4.5 bits/weight):
//! `d: f16`, `dmin: f16`, `scales[12]` (see [`unpack_k_scales_mins`]),
//! `qs[128]`;
//! value = `d * scale * q - dmin * min`.
//! `qs` is four 32-byte groups; group `g` holds elements `64g + l` in the low
//! nibble of byte `l` and `64g + 32 + l` in the high nibble, so one 32-byte
//! load, a mask and a shift give two whole sub-blocks.
//!
//! Q5_K (176 bytes, 5.5 bits/weight): as Q4_K with `qh[32]` between `scales`
//! and `qs`: bit `b` of byte `l` is the fifth bit of element `32b + l`, one
//! bit-plane per sub-block; value = `d * scale * q - dmin * min`.
//!
//! `d` and `dmin` lead the block so they can be read as one 4-byte pair.

use super::kquant_search::{affine_weighted, AffineSearch};
use super::{nearest_int, read_f16, write_f16};

const Q4K_SEARCH: AffineSearch = AffineSearch {
    nmax: 15,
    rmin: -1.0,
    rdelta: 0.1,
    nstep: 20,
    use_mad: false,
};

const Q5K_SEARCH: AffineSearch = AffineSearch {
    nmax: 31,
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: false,
};

/// The eight (scale, min) pairs of a Q4_K/Q5_K block from their 12-byte
/// packing. Sub-blocks `0..4` keep their 6-bit scale in bytes `0..4` and min in
/// bytes `4..8` (low six bits); sub-blocks `4..8` keep the low nibbles of
/// scale and min in bytes `8..12` and their top two bits in the spare high
/// bits of bytes `0..4` (scale) and `4..8` (min).
#[inline]
pub fn unpack_k_scales_mins(packed: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = packed[j] & 63;
        mn[j] = packed[j + 4] & 63;
        sc[j + 4] = (packed[j + 8] & 0x0F) | ((packed[j] >> 6) << 4);
        mn[j + 4] = (packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4);
    }
    (sc, mn)
}

fn pack_k_scales_mins(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut p = [0u8; 12];
    for j in 0..4 {
        p[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        p[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
        p[j + 8] = (sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4);
    }
    p
}

fn scales_mins_of(b: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut packed = [0u8; 12];
    packed.copy_from_slice(&b[4..16]);
    unpack_k_scales_mins(&packed)
}

/// Position of element `e` in the 4-bit payload: (byte, shift).
#[inline(always)]
fn nibble_pos(e: usize) -> (usize, u32) {
    (32 * (e / 64) + e % 32, if e % 64 < 32 { 0 } else { 4 })
}

fn decode_k(b: &[u8], qs_at: usize, qh: Option<&[u8]>, out: &mut [f32]) {
    let d = read_f16(b, 0);
    let dmin = read_f16(b, 2);
    let (sc, mn) = scales_mins_of(b);
    let qs = &b[qs_at..qs_at + 128];
    for s in 0..8 {
        let dl = d * sc[s] as f32;
        let ml = dmin * mn[s] as f32;
        for (i, o) in out[32 * s..32 * s + 32].iter_mut().enumerate() {
            let (at, shift) = nibble_pos(32 * s + i);
            let mut q = (qs[at] >> shift) & 0x0F;
            if let Some(qh) = qh {
                q |= ((qh[i] >> s) & 1) << 4;
            }
            *o = dl * q as f32 - ml;
        }
    }
}

pub(super) fn decode_q4k(b: &[u8], out: &mut [f32]) {
    decode_k(b, 16, None, out);
}

pub(super) fn decode_q5k(b: &[u8], out: &mut [f32]) {
    decode_k(b, 48, Some(&b[16..48]), out);
}

/// Searches, quantizes and stores the scales of one Q4_K/Q5_K block, then
/// requantizes `x` against the stored scales into `l` (values `0..=nmax`).
fn encode_k(x: &[f32], search: &AffineSearch, b: &mut [u8], l: &mut [u8; 256]) {
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let sum_x2 = xs.iter().fold(0.0f32, |s, v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        // Weights favour large values but never ignore small ones.
        let mut weights = [0.0f32; 32];
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (scale, min) = affine_weighted(xs, &weights, search, &mut l[32 * j..32 * j + 32]);
        scales[j] = scale;
        mins[j] = min;
        max_scale = max_scale.max(scale);
        max_min = max_min.max(min);
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        // The u8 wrap before the clamp is ggml's: a negative scale becomes 63.
        sc[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        mn[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    b[4..16].copy_from_slice(&pack_k_scales_mins(&sc, &mn));
    let d = write_f16(b, 0, max_scale / 63.0);
    let dmin = write_f16(b, 2, max_min / 63.0);

    for j in 0..8 {
        let dl = d * sc[j] as f32;
        if dl == 0.0 {
            continue;
        }
        let ml = dmin * mn[j] as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + ml) / dl).clamp(0, search.nmax) as u8;
        }
    }
}

fn pack_nibbles(l: &[u8; 256], qs: &mut [u8]) {
    for g in 0..4 {
        for i in 0..32 {
            let e = 64 * g + i;
            qs[32 * g + i] = (l[e] & 0x0F) | ((l[e + 32] & 0x0F) << 4);
        }
    }
}

pub(super) fn encode_q4k(x: &[f32], b: &mut [u8]) {
    let mut l = [0u8; 256];
    encode_k(x, &Q4K_SEARCH, b, &mut l);
    pack_nibbles(&l, &mut b[16..144]);
}

/// [`encode_q4k`] without ggml's scale search: each sub-block's scale and
/// offset come from its min and max alone. About 15 times faster; for
/// benchmark models, whose speed does not depend on how well their random
/// values are approximated.
pub(super) fn encode_q4k_fast(x: &[f32], b: &mut [u8]) {
    let mut l = [0u8; 256];
    let search = AffineSearch {
        nstep: -1,
        ..Q4K_SEARCH
    };
    encode_k(x, &search, b, &mut l);
    pack_nibbles(&l, &mut b[16..144]);
}

pub(super) fn encode_q5k(x: &[f32], b: &mut [u8]) {
    let mut l = [0u8; 256];
    encode_k(x, &Q5K_SEARCH, b, &mut l);
    let mut qh = [0u8; 32];
    for (e, &q) in l.iter().enumerate() {
        qh[e % 32] |= (q >> 4) << (e / 32);
    }
    b[16..48].copy_from_slice(&qh);
    pack_nibbles(&l, &mut b[48..176]);
}

#[cfg(test)]
mod fast_tests {
    use crate::quant::{dequantize, quantize, quantize_fast, QuantType};

    /// The fast Q4_K is a valid encoding of the same values, a little
    /// coarser than ggml's searched one, and not the same bytes.
    #[test]
    fn fast_q4k_is_close_to_the_searched_one() {
        let x: Vec<f32> = (0..4096u32)
            .map(|i| ((i.wrapping_mul(2654435761) >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.1)
            .collect();
        let rms = |bytes: &[u8]| {
            let mut y = vec![0.0f32; x.len()];
            dequantize(QuantType::Q4K, bytes, &mut y).unwrap();
            let e: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
            (e / x.len() as f32).sqrt()
        };
        let mut searched = vec![0u8; 4096 / 256 * 144];
        let mut fast = searched.clone();
        quantize(QuantType::Q4K, &x, &mut searched).unwrap();
        quantize_fast(QuantType::Q4K, &x, &mut fast).unwrap();
        assert_ne!(searched, fast);
        let (s, f) = (rms(&searched), rms(&fast));
        assert!(f > 0.0 && f < 1.5 * s, "fast {f} vs searched {s}");
    }
}
