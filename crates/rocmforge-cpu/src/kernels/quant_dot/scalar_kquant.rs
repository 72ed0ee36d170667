//! Portable dot products of the 256-element formats with Q8_K rows.
//!
//! Each weight super-block is unpacked to one quant per element, then dotted
//! per sub-block and weighted by the sub-block's integer scale. Offsets (the
//! `min` of Q2_K/Q4_K/Q5_K) are applied through the activation's `bsums`, so
//! they cost 16 multiplies per super-block instead of 256.

use rocmforge_core::quant::{unpack_k_scales_mins, unpack_q3k_scales, IQ4NL_VALUES};

use super::scalar_legacy::f16_at;

/// Byte size of a Q8_K block and the offsets of its fields.
pub(super) const Q8K_BYTES: usize = 292;
const Q8K_QS: usize = 4;
const Q8K_BSUMS: usize = 260;

#[inline(always)]
pub(super) fn q8k_d(a: &[u8]) -> f32 {
    f32::from_le_bytes([a[0], a[1], a[2], a[3]])
}

#[inline(always)]
pub(super) fn bsum(a: &[u8], g: usize) -> i32 {
    i16::from_le_bytes([a[Q8K_BSUMS + 2 * g], a[Q8K_BSUMS + 2 * g + 1]]) as i32
}

/// Integer dots of `q` with the activation quants, one per `width`-element
/// sub-block.
#[inline(always)]
pub(super) fn sub_dots<const N: usize>(q: &[i8; 256], a: &[u8], width: usize) -> [i32; N] {
    let qa = &a[Q8K_QS..Q8K_QS + 256];
    let mut out = [0i32; N];
    for (s, o) in out.iter_mut().enumerate() {
        let r = s * width..(s + 1) * width;
        *o = q[r.clone()]
            .iter()
            .zip(&qa[r])
            .map(|(&x, &y)| x as i32 * y as i8 as i32)
            .sum();
    }
    out
}

/// Quants from two-bit planes (Q2_K/Q3_K layout), element order.
#[inline(always)]
fn two_bit_planes(qs: &[u8]) -> [i8; 256] {
    let mut q = [0i8; 256];
    for (e, v) in q.iter_mut().enumerate() {
        let byte = qs[32 * (e / 128) + e % 32];
        *v = ((byte >> (2 * ((e % 128) / 32))) & 3) as i8;
    }
    q
}

/// Quants from Q4_K/Q5_K nibble groups, element order.
#[inline(always)]
fn nibble_groups(qs: &[u8]) -> [i8; 256] {
    let mut q = [0i8; 256];
    for (e, v) in q.iter_mut().enumerate() {
        let byte = qs[32 * (e / 64) + e % 32];
        *v = (if e % 64 < 32 { byte & 0x0F } else { byte >> 4 }) as i8;
    }
    q
}

pub(super) fn over_superblocks(
    nb: usize,
    w: &[u8],
    wsize: usize,
    a: &[u8],
    f: impl Fn(&[u8], &[u8]) -> f32,
) -> f32 {
    w.chunks_exact(wsize)
        .zip(a.chunks_exact(Q8K_BYTES))
        .take(nb)
        .map(|(bw, ba)| f(bw, ba))
        .sum()
}

pub(super) fn q2_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 84, a, |bw, ba| {
        let scales = &bw[0..16];
        let dots = sub_dots::<16>(&two_bit_planes(&bw[16..80]), ba, 16);
        let (mut isum, mut msum) = (0i32, 0i32);
        for (s, &sc) in scales.iter().enumerate() {
            isum += (sc & 0x0F) as i32 * dots[s];
            msum += (sc >> 4) as i32 * bsum(ba, s);
        }
        let da = q8k_d(ba);
        da * f16_at(bw, 80) * isum as f32 - da * f16_at(bw, 82) * msum as f32
    })
}

pub(super) fn q3_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 110, a, |bw, ba| {
        let (hmask, qs) = (&bw[0..32], &bw[32..96]);
        let mut q = two_bit_planes(qs);
        for (e, v) in q.iter_mut().enumerate() {
            if (hmask[e % 32] >> (e / 32)) & 1 == 0 {
                *v -= 4;
            }
        }
        let mut packed = [0u8; 12];
        packed.copy_from_slice(&bw[96..108]);
        let scales = unpack_q3k_scales(&packed);
        let dots = sub_dots::<16>(&q, ba, 16);
        let isum: i32 = scales.iter().zip(&dots).map(|(&s, &d)| s as i32 * d).sum();
        q8k_d(ba) * f16_at(bw, 108) * isum as f32
    })
}

/// Q4_K and Q5_K differ only in the fifth bit.
fn q45_k(bw: &[u8], ba: &[u8], qh: Option<&[u8]>, qs: &[u8]) -> f32 {
    let mut packed = [0u8; 12];
    packed.copy_from_slice(&bw[4..16]);
    let (sc, mn) = unpack_k_scales_mins(&packed);
    let mut q = nibble_groups(qs);
    if let Some(qh) = qh {
        for (e, v) in q.iter_mut().enumerate() {
            *v |= (((qh[e % 32] >> (e / 32)) & 1) << 4) as i8;
        }
    }
    let dots = sub_dots::<8>(&q, ba, 32);
    let (mut isum, mut msum) = (0i32, 0i32);
    for s in 0..8 {
        isum += sc[s] as i32 * dots[s];
        msum += mn[s] as i32 * (bsum(ba, 2 * s) + bsum(ba, 2 * s + 1));
    }
    let da = q8k_d(ba);
    da * f16_at(bw, 0) * isum as f32 - da * f16_at(bw, 2) * msum as f32
}

pub(super) fn q4_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 144, a, |bw, ba| q45_k(bw, ba, None, &bw[16..144]))
}

pub(super) fn q5_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 176, a, |bw, ba| {
        q45_k(bw, ba, Some(&bw[16..48]), &bw[48..176])
    })
}

pub(super) fn q6_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 210, a, |bw, ba| {
        let (ql, qh) = (&bw[0..128], &bw[128..192]);
        let mut q = [0i8; 256];
        for (e, v) in q.iter_mut().enumerate() {
            let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
            let low = (ql[64 * h + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 0x0F;
            let high = (qh[32 * h + l] >> (2 * s)) & 3;
            *v = (low | (high << 4)) as i8 - 32;
        }
        let dots = sub_dots::<16>(&q, ba, 16);
        let isum: i32 = (0..16).map(|g| bw[192 + g] as i8 as i32 * dots[g]).sum();
        q8k_d(ba) * f16_at(bw, 208) * isum as f32
    })
}

pub(super) fn iq4_xs(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 136, a, |bw, ba| {
        let scales_h = u16::from_le_bytes([bw[2], bw[3]]);
        let mut q = [0i8; 256];
        for ib in 0..8 {
            for j in 0..16 {
                let byte = bw[8 + 16 * ib + j];
                q[32 * ib + j] = IQ4NL_VALUES[(byte & 0x0F) as usize];
                q[32 * ib + j + 16] = IQ4NL_VALUES[(byte >> 4) as usize];
            }
        }
        let dots = sub_dots::<8>(&q, ba, 32);
        let mut isum = 0i32;
        for (ib, &dot) in dots.iter().enumerate() {
            let low = (bw[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
            let high = ((scales_h >> (2 * ib)) & 3) as u8;
            isum += ((low | (high << 4)) as i32 - 32) * dot;
        }
        q8k_d(ba) * f16_at(bw, 0) * isum as f32
    })
}
