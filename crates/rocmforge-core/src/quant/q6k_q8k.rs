//! Q6_K (weights) and Q8_K (the activation type K-quant dot products use).
//!
//! Q6_K (210 bytes, 6.5625 bits/weight): `ql[128]`, `qh[64]`,
//! `scales: [i8; 16]` (one per 16 elements), `d: f16`;
//! value = `d * scale * (q - 32)` with `q` the 6-bit quant.
//! Each 128-element half has 64 bytes of `ql` and 32 of `qh`. In half `h`,
//! element `128h + 32s + l` (`s` in `0..4`, `l` in `0..32`) keeps its low
//! nibble in `ql[64h + 32(s & 1) + l]` (low nibble for `s < 2`, high for
//! `s >= 2`) and its top two bits in `qh[32h + l]` at bits `2s..2s+2`: four
//! 32-element runs come out of two 32-byte `ql` loads and one `qh` load.
//!
//! Q8_K (292 bytes): `d: f32`, `qs: [i8; 256]`, `bsums: [i16; 16]` (sum of
//! each 16 consecutive quants). `d` is f32 because activations have a wide
//! range and this type never goes to disk; `bsums` let a dot product with an
//! offset format (Q2_K, Q4_K, Q5_K) apply the per-sub-block min with 16
//! multiplies instead of 256.

use super::kquant_search::{symmetric_weighted, GROUP_MAX_EPS};
use super::{nearest_int, read_f16, write_f16};

/// Where element `e` (`0..256`) of a Q6_K block lives:
/// (`ql` byte, `ql` shift, `qh` byte, `qh` shift), relative to each array.
#[inline(always)]
fn q6k_pos(e: usize) -> (usize, u32, usize, u32) {
    let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
    (
        64 * h + 32 * (s & 1) + l,
        4 * (s as u32 >> 1),
        32 * h + l,
        2 * s as u32,
    )
}

pub(super) fn decode_q6k(b: &[u8], out: &mut [f32]) {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    let scales = &b[192..208];
    let d = read_f16(b, 208);
    for (s, &sc) in scales.iter().enumerate() {
        let dl = d * sc as i8 as f32;
        for (i, o) in out[16 * s..16 * s + 16].iter_mut().enumerate() {
            let (lo_at, lo_shift, hi_at, hi_shift) = q6k_pos(16 * s + i);
            let q = ((ql[lo_at] >> lo_shift) & 0x0F) | (((qh[hi_at] >> hi_shift) & 3) << 4);
            *o = dl * (q as i32 - 32) as f32;
        }
    }
}

pub(super) fn encode_q6k(x: &[f32], b: &mut [u8]) {
    let mut l = [0u8; 256];
    let mut scales = [0.0f32; 16];
    let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
    for (j, s) in scales.iter_mut().enumerate() {
        *s = symmetric_weighted(&x[16 * j..16 * j + 16], 32, &mut l[16 * j..16 * j + 16]);
        if s.abs() > max_abs {
            max_abs = s.abs();
            max_scale = *s;
        }
    }
    b[..210].fill(0);
    if max_abs < GROUP_MAX_EPS {
        return;
    }

    let iscale = -128.0 / max_scale;
    let d = write_f16(b, 208, 1.0 / iscale);
    let mut sc = [0i8; 16];
    for (q, &s) in sc.iter_mut().zip(&scales) {
        *q = nearest_int(iscale * s).clamp(-128, 127) as i8;
    }
    for (dst, &q) in b[192..208].iter_mut().zip(&sc) {
        *dst = q as u8;
    }

    for (j, &q) in sc.iter().enumerate() {
        let dl = d * q as f32;
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / dl).clamp(-32, 31) + 32) as u8;
        }
    }

    for (e, &q) in l.iter().enumerate() {
        let (lo_at, lo_shift, hi_at, hi_shift) = q6k_pos(e);
        b[lo_at] |= (q & 0x0F) << lo_shift;
        b[128 + hi_at] |= (q >> 4) << hi_shift;
    }
}

pub(super) fn decode_q8k(b: &[u8], out: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (o, &q) in out[..256].iter_mut().zip(&b[4..260]) {
        *o = d * q as i8 as f32;
    }
}

pub(super) fn encode_q8k(x: &[f32], b: &mut [u8]) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in &x[..256] {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    b[..292].fill(0);
    if amax == 0.0 {
        return;
    }
    // -127 rather than -128 keeps quants symmetric, so products with sign-flipped
    // weight grids (ggml's IQ2 kernels) cannot overflow.
    let iscale = -127.0 / max;
    for (dst, &v) in b[4..260].iter_mut().zip(x) {
        *dst = nearest_int(iscale * v).clamp(-128, 127) as i8 as u8;
    }
    for j in 0..16 {
        let sum: i32 = b[4 + 16 * j..4 + 16 * j + 16]
            .iter()
            .map(|&q| q as i8 as i32)
            .sum();
        let at = 260 + 2 * j;
        b[at..at + 2].copy_from_slice(&(sum as i16).to_le_bytes());
    }
    b[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
}
