//! TQ1_0 and TQ2_0: ternary weights (-1, 0, 1) times one scale per 256, for
//! models trained ternary (BitNet b1.58 and the like).
//!
//! TQ2_0 (66 bytes per 256, 2.06 bpw): `qs[64]`, `d: f16`. Element
//! `128h + 32n + m` is bits `2n..2n+2` of `qs[32h + m]`, stored `+ 1`.
//!
//! TQ1_0 (54 bytes, 1.69 bpw): `qs[48]`, `qh[4]`, `d: f16`. Five trits per
//! byte: a byte holds `ceil(t * 256 / 243)` for the base-3 number `t` of its
//! trits (first trit most significant), so that multiplying the byte by
//! `3^n` (mod 256) brings trit `n` to the top and `(q * 3) >> 8` reads it
//! without a division. Elements 0..160 are trit `n` of `qs[m]` at
//! `32n + m`; 160..240 trit `n` of `qs[32 + m]` at `160 + 16n + m`; 240..256
//! trit `n` of `qh[j]` at `240 + 4n + j` (four trits, the fifth left zero).
//!
//! Both quantize by rounding `x / max|x|`, ggml's only quantizer for them.

use super::{read_f16, write_f16};

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Trit `n` (0..5) of a TQ1_0 byte, as -1, 0 or 1.
fn trit(q: u8, n: usize) -> f32 {
    let q = q.wrapping_mul(POW3[n]);
    (((q as u16 * 3) >> 8) as i32 - 1) as f32
}

pub(super) fn decode_tq1_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 52);
    for n in 0..5 {
        for m in 0..32 {
            out[32 * n + m] = trit(b[m], n) * d;
        }
        for m in 0..16 {
            out[160 + 16 * n + m] = trit(b[32 + m], n) * d;
        }
    }
    for n in 0..4 {
        for j in 0..4 {
            out[240 + 4 * n + j] = trit(b[48 + j], n) * d;
        }
    }
}

pub(super) fn decode_tq2_0(b: &[u8], out: &mut [f32]) {
    let d = read_f16(b, 64);
    for h in 0..2 {
        for n in 0..4 {
            for m in 0..32 {
                let q = (b[32 * h + m] >> (2 * n)) & 3;
                out[128 * h + 32 * n + m] = (q as i32 - 1) as f32 * d;
            }
        }
    }
}

/// ggml's scale: the largest magnitude, and its inverse (0 for a zero block).
fn scale(x: &[f32]) -> (f32, f32) {
    let d = x[..256].iter().fold(0.0f32, |m, v| m.max(v.abs()));
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

/// `round(v * id) + 1` (half away from zero, as C's `lroundf`): 0, 1 or 2
/// for finite input.
fn level(v: f32, id: f32) -> u8 {
    ((v * id).round() as i32 + 1) as u8
}

/// Packs trits (first most significant) into a byte that `trit` reads back.
fn pack_trits(levels: impl Iterator<Item = u8>) -> u8 {
    let t = levels.fold(0u8, |q, l| q.wrapping_mul(3).wrapping_add(l));
    (t as u16 * 256).div_ceil(243) as u8
}

pub(super) fn encode_tq1_0(x: &[f32], b: &mut [u8]) {
    let (d, id) = scale(x);
    for m in 0..32 {
        b[m] = pack_trits((0..5).map(|n| level(x[32 * n + m], id)));
    }
    for m in 0..16 {
        b[32 + m] = pack_trits((0..5).map(|n| level(x[160 + 16 * n + m], id)));
    }
    for j in 0..4 {
        // Four trits, then a zero fifth so the first lands at the top.
        let four = (0..4).map(|n| level(x[240 + 4 * n + j], id));
        b[48 + j] = pack_trits(four.chain(std::iter::once(0)));
    }
    write_f16(b, 52, d);
}

pub(super) fn encode_tq2_0(x: &[f32], b: &mut [u8]) {
    let (d, id) = scale(x);
    for h in 0..2 {
        for m in 0..32 {
            b[32 * h + m] = (0..4).fold(0u8, |q, n| {
                q | ((level(x[128 * h + 32 * n + m], id) & 3) << (2 * n))
            });
        }
    }
    write_f16(b, 64, d);
}
