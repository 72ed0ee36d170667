//! The original 32-element ggml formats.
//!
//! All of them start with a binary16 scale `d` so a block is self-contained.
//! The 4-bit payload `qs` is 16 bytes where byte `j` holds element `j` in its
//! low nibble and element `j + 16` in its high nibble: one AND and one shift of
//! a 16-byte vector yield the two halves of the block in order, which is why
//! ggml interleaves halves rather than neighbours.
//!
//! | type | bytes | layout | value |
//! |---|---|---|---|
//! | Q4_0 | 18 | `d`, `qs[16]` | `d * (q - 8)` |
//! | Q4_1 | 20 | `d`, `m`, `qs[16]` | `d * q + m` |
//! | Q5_0 | 22 | `d`, `qh: u32`, `qs[16]` | `d * (q - 16)` |
//! | Q5_1 | 24 | `d`, `m`, `qh: u32`, `qs[16]` | `d * q + m` |
//! | Q8_0 | 34 | `d`, `qs: [i8; 32]` | `d * q` |
//! | Q8_1 | 36 | `d`, `s`, `qs: [i8; 32]` | `d * q` |
//!
//! In the 5-bit types bit `i` of the little-endian `qh` is the fifth bit of
//! element `i`. Q8_1's `s = d * sum(q)` is only used by dot products: it lets a
//! Q4_1/Q5_1 block fold its offset `m` in with one multiply per block.

use super::{read_f16, write_f16};

/// The signed value of largest magnitude (the first one on ties), which the
/// symmetric formats map to the most negative quant so that it is exact.
fn signed_abs_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (v.min(lo), v.max(hi)))
}

fn inverse_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

pub(super) fn decode_q4_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    let qs = &b[2..18];
    for (j, &q) in qs.iter().enumerate() {
        out[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        out[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

pub(super) fn encode_q4_0(x: &[f32], b: &mut [u8]) {
    let d = signed_abs_max(x) / -8.0;
    let id = inverse_or_zero(d);
    write_f16(b, 0, d);
    for j in 0..16 {
        // Truncation after +8.5 is ggml's rounding; the extreme value lands on 16.
        let lo = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let hi = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        b[2 + j] = lo | (hi << 4);
    }
}

pub(super) fn decode_q4_1(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    let m = read_f16(b, 2);
    let qs = &b[4..20];
    for (j, &q) in qs.iter().enumerate() {
        out[j] = (q & 0x0F) as f32 * d + m;
        out[j + 16] = (q >> 4) as f32 * d + m;
    }
}

pub(super) fn encode_q4_1(x: &[f32], b: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse_or_zero(d);
    write_f16(b, 0, d);
    write_f16(b, 2, min);
    for j in 0..16 {
        let lo = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let hi = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
        b[4 + j] = lo | (hi << 4);
    }
}

/// Shared by Q5_0 and Q5_1: element `i`'s 5-bit quant from `qh` and `qs`.
#[inline(always)]
fn five_bit(qh: u32, qs: &[u8], i: usize) -> u8 {
    let nibble = if i < 16 {
        qs[i] & 0x0F
    } else {
        qs[i - 16] >> 4
    };
    nibble | ((((qh >> i) & 1) as u8) << 4)
}

fn pack_five_bit(q: &[u8; 32], qh_at: usize, b: &mut [u8]) {
    let mut qh = 0u32;
    for (i, &v) in q.iter().enumerate() {
        qh |= ((v as u32 >> 4) & 1) << i;
    }
    b[qh_at..qh_at + 4].copy_from_slice(&qh.to_le_bytes());
    for j in 0..16 {
        b[qh_at + 4 + j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
    }
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(super) fn decode_q5_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    let qh = read_u32(b, 2);
    let qs = &b[6..22];
    for (i, o) in out[..32].iter_mut().enumerate() {
        *o = (five_bit(qh, qs, i) as i32 - 16) as f32 * d;
    }
}

pub(super) fn encode_q5_0(x: &[f32], b: &mut [u8]) {
    let d = signed_abs_max(x) / -16.0;
    let id = inverse_or_zero(d);
    write_f16(b, 0, d);
    let mut q = [0u8; 32];
    for (qi, &v) in q.iter_mut().zip(x) {
        *qi = ((v * id + 16.5) as i8).min(31) as u8;
    }
    pack_five_bit(&q, 2, b);
}

pub(super) fn decode_q5_1(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    let m = read_f16(b, 2);
    let qh = read_u32(b, 4);
    let qs = &b[8..24];
    for (i, o) in out[..32].iter_mut().enumerate() {
        *o = five_bit(qh, qs, i) as f32 * d + m;
    }
}

pub(super) fn encode_q5_1(x: &[f32], b: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse_or_zero(d);
    write_f16(b, 0, d);
    write_f16(b, 2, min);
    let mut q = [0u8; 32];
    for (qi, &v) in q.iter_mut().zip(x) {
        // ggml does not clamp here; the clamp only guards float slop.
        *qi = (((v - min) * id + 0.5) as u8).min(31);
    }
    pack_five_bit(&q, 4, b);
}

pub(super) fn decode_q8_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for (o, &q) in out[..32].iter_mut().zip(&b[2..34]) {
        *o = q as i8 as f32 * d;
    }
}

/// Quants for an 8-bit block: `d = amax / 127`, round half away from zero as
/// ggml's reference (`roundf`) does.
fn q8_quants(x: &[f32], q: &mut [u8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse_or_zero(d);
    let mut sum = 0i32;
    for (qi, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round() as i8;
        sum += r as i32;
        *qi = r as u8;
    }
    (d, sum)
}

pub(super) fn encode_q8_0(x: &[f32], b: &mut [u8]) {
    let (d, _) = q8_quants(x, &mut b[2..34]);
    write_f16(b, 0, d);
}

pub(super) fn decode_q8_1(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 0);
    for (o, &q) in out[..32].iter_mut().zip(&b[4..36]) {
        *o = q as i8 as f32 * d;
    }
}

pub(super) fn encode_q8_1(x: &[f32], b: &mut [u8]) {
    let (d, sum) = q8_quants(x, &mut b[4..36]);
    write_f16(b, 0, d);
    write_f16(b, 2, sum as f32 * d);
}
