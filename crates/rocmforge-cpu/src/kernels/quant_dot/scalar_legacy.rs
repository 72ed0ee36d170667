//! Portable dot products of the 32-element formats with Q8_0 / Q8_1 rows.
//!
//! Each block's quants are widened to `i8` first so the integer dot is one
//! simple loop the compiler can vectorise with whatever the target has.

use rocmforge_core::quant::{e8m0_to_f32_half, IQ4NL_VALUES, MXFP4_VALUES};

#[inline(always)]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

#[inline(always)]
fn dot32(w: &[i8; 32], a: &[u8]) -> i32 {
    w.iter()
        .zip(&a[..32])
        .map(|(&x, &y)| x as i32 * y as i8 as i32)
        .sum()
}

/// The 32 signed quants of a nibble payload with `offset` subtracted.
#[inline(always)]
fn nibbles(qs: &[u8], offset: i8) -> [i8; 32] {
    let mut q = [0i8; 32];
    for j in 0..16 {
        q[j] = (qs[j] & 0x0F) as i8 - offset;
        q[j + 16] = (qs[j] >> 4) as i8 - offset;
    }
    q
}

/// Adds the fifth bits of `qh` (bit `i` for element `i`) to 4-bit quants.
#[inline(always)]
fn with_fifth_bits(mut q: [i8; 32], qh: &[u8]) -> [i8; 32] {
    let bits = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (i, v) in q.iter_mut().enumerate() {
        *v += (((bits >> i) & 1) << 4) as i8;
    }
    q
}

/// Sums `f(weight block, activation block)` over `nb` block pairs.
#[inline(always)]
fn over_blocks(
    nb: usize,
    w: &[u8],
    wsize: usize,
    a: &[u8],
    asize: usize,
    f: impl Fn(&[u8], &[u8]) -> f32,
) -> f32 {
    w.chunks_exact(wsize)
        .zip(a.chunks_exact(asize))
        .take(nb)
        .map(|(bw, ba)| f(bw, ba))
        .sum()
}

pub(super) fn q4_0(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_blocks(nb, w, 18, a, 34, |bw, ba| {
        let s = dot32(&nibbles(&bw[2..18], 8), &ba[2..]);
        f16_at(bw, 0) * f16_at(ba, 0) * s as f32
    })
}

pub(super) fn q4_1(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_blocks(nb, w, 20, a, 36, |bw, ba| {
        let s = dot32(&nibbles(&bw[4..20], 0), &ba[4..]);
        // The activation block's stored sum carries the offset term.
        f16_at(bw, 0) * f16_at(ba, 0) * s as f32 + f16_at(bw, 2) * f16_at(ba, 2)
    })
}

pub(super) fn q5_0(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_blocks(nb, w, 22, a, 34, |bw, ba| {
        let q = with_fifth_bits(nibbles(&bw[6..22], 16), &bw[2..6]);
        f16_at(bw, 0) * f16_at(ba, 0) * dot32(&q, &ba[2..]) as f32
    })
}

pub(super) fn q5_1(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_blocks(nb, w, 24, a, 36, |bw, ba| {
        let q = with_fifth_bits(nibbles(&bw[8..24], 0), &bw[4..8]);
        let s = dot32(&q, &ba[4..]);
        f16_at(bw, 0) * f16_at(ba, 0) * s as f32 + f16_at(bw, 2) * f16_at(ba, 2)
    })
}

pub(super) fn q8_0(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_blocks(nb, w, 34, a, 34, |bw, ba| {
        let mut q = [0i8; 32];
        for (v, &b) in q.iter_mut().zip(&bw[2..34]) {
            *v = b as i8;
        }
        f16_at(bw, 0) * f16_at(ba, 0) * dot32(&q, &ba[2..]) as f32
    })
}

/// The 32 levels of a 16-byte nibble payload looked up in `table`.
#[inline(always)]
fn levels(qs: &[u8], table: &[i8; 16]) -> [i8; 32] {
    let mut q = [0i8; 32];
    for j in 0..16 {
        q[j] = table[(qs[j] & 0x0F) as usize];
        q[j + 16] = table[(qs[j] >> 4) as usize];
    }
    q
}

pub(super) fn iq4_nl(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_blocks(nb, w, 18, a, 34, |bw, ba| {
        let q = levels(&bw[2..18], &IQ4NL_VALUES);
        f16_at(bw, 0) * f16_at(ba, 0) * dot32(&q, &ba[2..]) as f32
    })
}

/// The levels are ggml's doubled E2M1 values and the scale half the E8M0
/// one, so the integer sum is exact and one multiply rescales it; the
/// scales multiply activation-first, as ggml's `ggml_vec_dot_mxfp4_q8_0`.
pub(super) fn mxfp4(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_blocks(nb, w, 17, a, 34, |bw, ba| {
        let q = levels(&bw[1..17], &MXFP4_VALUES);
        f16_at(ba, 0) * e8m0_to_f32_half(bw[0]) * dot32(&q, &ba[2..]) as f32
    })
}
