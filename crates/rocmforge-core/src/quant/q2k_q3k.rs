//! Q2_K and Q3_K: 256-element super-blocks of sixteen 16-element sub-blocks.
//!
//! Both store their 2-bit quant planes the same way: `qs` is two 32-byte
//! groups, one per 128 elements, and byte `l` of group `g` holds elements
//! `128g + l + 32s` in bits `2s..2s+2` for `s` in `0..4`. A kernel thus gets 32
//! consecutive elements from one 32-byte load and one shift.
//!
//! Q2_K (84 bytes, 2.625 bits/weight):
//! `scales[16]` (per sub-block: low nibble scale, high nibble min),
//! `qs[64]`, `d: f16`, `dmin: f16`;
//! value = `d * scale * q - dmin * min`.
//!
//! Q3_K (110 bytes, 3.4375 bits/weight):
//! `hmask[32]` (bit `b` of byte `l` is the third bit of element `32b + l`, so a
//! 32-byte load plus one mask per 32-element run gives the high bits),
//! `qs[64]` (low two bits, as above), `scales[12]` (sixteen 6-bit scales, see
//! [`unpack_q3k_scales`]), `d: f16`;
//! value = `d * (scale - 32) * (q - 4)` with `q` the full 3-bit quant.
//!
//! The byte arrays come first and the f16 super-scales last, as in ggml.

use super::kquant_search::{affine_weighted, symmetric_refined, AffineSearch};
use super::{nearest_int, read_f16, write_f16};

const Q2K_SEARCH: AffineSearch = AffineSearch {
    nmax: 3,
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: true,
};

/// Position of element `e` (`0..256`) in a 2-bit plane: (byte, shift).
#[inline(always)]
fn plane_pos(e: usize) -> (usize, u32) {
    (32 * (e / 128) + e % 32, 2 * ((e % 128) / 32) as u32)
}

fn pack_planes(l: &[u8; 256], qs: &mut [u8]) {
    for g in 0..2 {
        for i in 0..32 {
            let e = 128 * g + i;
            qs[32 * g + i] = l[e] | (l[e + 32] << 2) | (l[e + 64] << 4) | (l[e + 96] << 6);
        }
    }
}

pub(super) fn decode_q2k(b: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let d = read_f16(b, 80);
    let dmin = read_f16(b, 82);
    for (s, &sc) in scales.iter().enumerate() {
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        for (i, o) in out[16 * s..16 * s + 16].iter_mut().enumerate() {
            let (at, shift) = plane_pos(16 * s + i);
            *o = dl * ((qs[at] >> shift) & 3) as f32 - ml;
        }
    }
}

pub(super) fn encode_q2k(x: &[f32], b: &mut [u8]) {
    let mut l = [0u8; 256];
    let mut scales = [0.0f32; 16];
    let mut mins = [0.0f32; 16];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        let mut weights = [0.0f32; 16];
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = v.abs();
        }
        let (scale, min) = affine_weighted(xs, &weights, &Q2K_SEARCH, &mut l[16 * j..16 * j + 16]);
        scales[j] = scale;
        mins[j] = min;
        max_scale = max_scale.max(scale);
        max_min = max_min.max(min);
    }

    // Sub-block scales and mins are themselves 4-bit quants of the largest.
    let mut packed = [0u8; 16];
    let d = if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for (p, &s) in packed.iter_mut().zip(&scales) {
            *p = nearest_int(iscale * s) as u8;
        }
        write_f16(b, 80, max_scale / 15.0)
    } else {
        write_f16(b, 80, 0.0)
    };
    let dmin = if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for (p, &m) in packed.iter_mut().zip(&mins) {
            *p |= (nearest_int(iscale * m) << 4) as u8;
        }
        write_f16(b, 82, max_min / 15.0)
    } else {
        write_f16(b, 82, 0.0)
    };
    b[0..16].copy_from_slice(&packed);

    // Requantize against the scales as stored, so rounding of the scales
    // themselves is absorbed by the quants.
    for (j, &sc) in packed.iter().enumerate() {
        let dl = d * (sc & 0x0F) as f32;
        if dl == 0.0 {
            continue;
        }
        let ml = dmin * (sc >> 4) as f32;
        for i in 16 * j..16 * j + 16 {
            l[i] = nearest_int((x[i] + ml) / dl).clamp(0, 3) as u8;
        }
    }
    pack_planes(&l, &mut b[16..80]);
}

/// The sixteen signed Q3_K sub-block scales (already minus 32) from their
/// 12-byte packing: byte `j` (`j < 8`) holds the low nibbles of scales `j`
/// (low) and `j + 8` (high); bytes `8..12` hold the top two bits, scale `j` at
/// byte `8 + j % 4`, bits `2 * (j / 4)`.
#[inline]
pub fn unpack_q3k_scales(packed: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 {
            packed[j] & 0x0F
        } else {
            packed[j - 8] >> 4
        };
        let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

fn q3k_scales_of(b: &[u8]) -> [i8; 16] {
    let mut packed = [0u8; 12];
    packed.copy_from_slice(&b[96..108]);
    unpack_q3k_scales(&packed)
}

pub(super) fn decode_q3k(b: &[u8], out: &mut [f32]) {
    let (hmask, qs) = (&b[0..32], &b[32..96]);
    let scales = q3k_scales_of(b);
    let d = read_f16(b, 108);
    for (s, &sc) in scales.iter().enumerate() {
        let dl = d * sc as f32;
        for (i, o) in out[16 * s..16 * s + 16].iter_mut().enumerate() {
            let e = 16 * s + i;
            let (at, shift) = plane_pos(e);
            let high = (hmask[e % 32] >> (e / 32)) & 1;
            let q = ((qs[at] >> shift) & 3) as i32 - if high != 0 { 0 } else { 4 };
            *o = dl * q as f32;
        }
    }
}

pub(super) fn encode_q3k(x: &[f32], b: &mut [u8]) {
    let mut l = [0u8; 256];
    let mut scales = [0.0f32; 16];
    let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
    for (j, s) in scales.iter_mut().enumerate() {
        *s = symmetric_refined(&x[16 * j..16 * j + 16], 4, &mut l[16 * j..16 * j + 16]);
        if s.abs() > amax {
            amax = s.abs();
            max_scale = *s;
        }
    }

    let mut packed = [0u8; 12];
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for (j, &s) in scales.iter().enumerate() {
            let q = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                packed[j] = q & 0x0F;
            } else {
                packed[j - 8] |= (q & 0x0F) << 4;
            }
            packed[8 + j % 4] |= (q >> 4) << (2 * (j / 4));
        }
        write_f16(b, 108, 1.0 / iscale);
    } else {
        write_f16(b, 108, 0.0);
    }
    b[96..108].copy_from_slice(&packed);
    let d = read_f16(b, 108);

    for (j, &sc) in unpack_q3k_scales(&packed).iter().enumerate() {
        let dl = d * sc as f32;
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / dl).clamp(-4, 3) + 4) as u8;
        }
    }

    let mut hmask = [0u8; 32];
    for (e, q) in l.iter_mut().enumerate() {
        if *q > 3 {
            hmask[e % 32] |= 1 << (e / 32);
            *q -= 4;
        }
    }
    b[0..32].copy_from_slice(&hmask);
    pack_planes(&l, &mut b[32..96]);
}
