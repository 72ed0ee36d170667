//! Portable dot products of the lattice i-quants and the ternary types with
//! Q8_K rows.
//!
//! Each weight super-block is expanded to one signed byte per element (a
//! lattice coordinate with its sign, or a trit), dotted with the activation
//! quants per scale group and weighted by the group's odd integer scale
//! `2s + 1`. The format's constant factor (the 1/8 of IQ2's `(0.5 + s) / 4`,
//! the 1/4 of IQ3_XXS) is applied once at the end, and IQ1's ±1/8 shift
//! through the activation's `bsums`, as in ggml's reference `vec_dot`s, whose
//! float steps these follow.

use rocmforge_core::quant::iq_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};

use super::scalar_kquant::{bsum, over_superblocks, q8k_d, sub_dots};
use super::scalar_legacy::f16_at;

/// Byte `j` of a lattice entry.
#[inline(always)]
fn coord(grid: u64, j: usize) -> u8 {
    (grid >> (8 * j)) as u8
}

/// Writes `n` lattice magnitudes, negated where `signs` has the bit set.
#[inline(always)]
fn signed(grid: u64, signs: u8, first_sign: usize, out: &mut [i8]) {
    for (j, q) in out.iter_mut().enumerate() {
        let m = coord(grid, j) as i8;
        *q = if signs & (1 << (first_sign + j)) != 0 {
            -m
        } else {
            m
        };
    }
}

#[inline(always)]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `Σ ls[g] * dots[g]`.
#[inline(always)]
fn weighted<const N: usize>(ls: &[i32; N], dots: &[i32; N]) -> i32 {
    ls.iter().zip(dots).map(|(&l, &d)| l * d).sum()
}

pub(super) fn iq2_xxs(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    0.125
        * over_superblocks(nb, w, 66, a, |bw, ba| {
            let mut q = [0i8; 256];
            let mut ls = [0i32; 8];
            for (ib, scale) in ls.iter_mut().enumerate() {
                let aux = u32_at(bw, 6 + 8 * ib);
                *scale = 2 * (aux >> 28) as i32 + 1;
                for l in 0..4 {
                    let grid = IQ2XXS_GRID[bw[2 + 8 * ib + l] as usize];
                    let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                    signed(grid, signs, 0, &mut q[32 * ib + 8 * l..32 * ib + 8 * l + 8]);
                }
            }
            let dots = sub_dots::<8>(&q, ba, 32);
            f16_at(bw, 0) * q8k_d(ba) * weighted(&ls, &dots) as f32
        })
}

pub(super) fn iq2_xs(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    0.125
        * over_superblocks(nb, w, 74, a, |bw, ba| {
            let mut q = [0i8; 256];
            for g in 0..32 {
                let v = u16::from_le_bytes([bw[2 + 2 * g], bw[3 + 2 * g]]);
                let grid = IQ2XS_GRID[(v & 511) as usize];
                signed(
                    grid,
                    KSIGNS_IQ2XS[(v >> 9) as usize],
                    0,
                    &mut q[8 * g..8 * g + 8],
                );
            }
            let ls: [i32; 16] =
                std::array::from_fn(|h| 2 * ((bw[66 + h / 2] >> (4 * (h % 2))) & 0xF) as i32 + 1);
            let dots = sub_dots::<16>(&q, ba, 16);
            f16_at(bw, 0) * q8k_d(ba) * weighted(&ls, &dots) as f32
        })
}

pub(super) fn iq2_s(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    0.125
        * over_superblocks(nb, w, 82, a, |bw, ba| {
            let (qs, signs, qh, scales) = (&bw[2..34], &bw[34..66], &bw[66..74], &bw[74..82]);
            let mut q = [0i8; 256];
            for g in 0..32 {
                let index = qs[g] as usize | (((qh[g / 4] as usize) << (8 - 2 * (g % 4))) & 0x300);
                signed(IQ2S_GRID[index], signs[g], 0, &mut q[8 * g..8 * g + 8]);
            }
            let ls: [i32; 16] =
                std::array::from_fn(|h| 2 * ((scales[h / 2] >> (4 * (h % 2))) & 0xF) as i32 + 1);
            let dots = sub_dots::<16>(&q, ba, 16);
            f16_at(bw, 0) * q8k_d(ba) * weighted(&ls, &dots) as f32
        })
}

pub(super) fn iq3_xxs(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    0.25 * over_superblocks(nb, w, 98, a, |bw, ba| {
        let mut q = [0i8; 256];
        let mut ls = [0i32; 8];
        for (ib, scale) in ls.iter_mut().enumerate() {
            let aux = u32_at(bw, 66 + 4 * ib);
            *scale = 2 * (aux >> 28) as i32 + 1;
            for l in 0..4 {
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                let (qs, o) = (2 + 8 * ib + 2 * l, 32 * ib + 8 * l);
                signed(
                    IQ3XXS_GRID[bw[qs] as usize] as u64,
                    signs,
                    0,
                    &mut q[o..o + 4],
                );
                signed(
                    IQ3XXS_GRID[bw[qs + 1] as usize] as u64,
                    signs,
                    4,
                    &mut q[o + 4..o + 8],
                );
            }
        }
        let dots = sub_dots::<8>(&q, ba, 32);
        f16_at(bw, 0) * q8k_d(ba) * weighted(&ls, &dots) as f32
    })
}

pub(super) fn iq3_s(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 110, a, |bw, ba| {
        let (qs, qh, signs, scales) = (&bw[2..66], &bw[66..74], &bw[74..106], &bw[106..110]);
        let mut q = [0i8; 256];
        for ib in 0..8 {
            for l in 0..4 {
                let (k, o) = (8 * ib + 2 * l, 32 * ib + 8 * l);
                let hi = qh[ib] as usize;
                let i1 = qs[k] as usize | ((hi << (8 - 2 * l)) & 256);
                let i2 = qs[k + 1] as usize | ((hi << (7 - 2 * l)) & 256);
                let s = signs[4 * ib + l];
                signed(IQ3S_GRID[i1] as u64, s, 0, &mut q[o..o + 4]);
                signed(IQ3S_GRID[i2] as u64, s, 4, &mut q[o + 4..o + 8]);
            }
        }
        let ls: [i32; 8] =
            std::array::from_fn(|ib| 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 0xF) as i32 + 1);
        let dots = sub_dots::<8>(&q, ba, 32);
        f16_at(bw, 0) * q8k_d(ba) * weighted(&ls, &dots) as f32
    })
}

/// Expands eight IQ1 lattice coordinates (-1, 0, 1).
#[inline(always)]
fn trits(index: usize, out: &mut [i8]) {
    let grid = IQ1S_GRID[index];
    for (j, q) in out.iter_mut().enumerate() {
        *q = coord(grid, j) as i8;
    }
}

pub(super) fn iq1_s(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 50, a, |bw, ba| {
        let mut q = [0i8; 256];
        let (mut ls, mut shift) = ([0i32; 8], 0i32);
        for ib in 0..8 {
            let qh = u16::from_le_bytes([bw[34 + 2 * ib], bw[35 + 2 * ib]]) as usize;
            ls[ib] = 2 * ((qh >> 12) & 7) as i32 + 1;
            let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
            for l in 0..4 {
                let index = bw[2 + 4 * ib + l] as usize | (((qh >> (3 * l)) & 7) << 8);
                trits(index, &mut q[32 * ib + 8 * l..32 * ib + 8 * l + 8]);
            }
            // The ±1/8 shift of every element times the activation sum.
            shift += ls[ib] * delta * (bsum(ba, 2 * ib) + bsum(ba, 2 * ib + 1));
        }
        let dots = sub_dots::<8>(&q, ba, 32);
        let sumi = weighted(&ls, &dots);
        f16_at(bw, 0) * q8k_d(ba) * (sumi as f32 + 0.125 * shift as f32)
    })
}

pub(super) fn iq1_m(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 56, a, |bw, ba| {
        let sc: [u16; 4] =
            std::array::from_fn(|i| u16::from_le_bytes([bw[48 + 2 * i], bw[49 + 2 * i]]));
        let bits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        let d = half::f16::from_bits(bits).to_f32();
        let mut q = [0i8; 256];
        let (mut ls, mut shift) = ([0i32; 16], 0i32);
        for h in 0..16 {
            // Scale `h` covers elements 16h..16h + 16, two lattice points.
            ls[h] = 2 * ((sc[h / 4] >> (3 * (h % 4))) & 7) as i32 + 1;
            let qh = bw[32 + h] as usize;
            for k in 0..2 {
                let index = bw[2 * h + k] as usize | ((qh << (8 - 4 * k)) & 0x700);
                let o = 16 * h + 8 * k;
                trits(index, &mut q[o..o + 8]);
                let negative = qh & (0x08 << (4 * k)) != 0;
                let asum: i32 = ba[4 + o..12 + o].iter().map(|&v| v as i8 as i32).sum();
                shift += ls[h] * if negative { -asum } else { asum };
            }
        }
        let dots = sub_dots::<16>(&q, ba, 16);
        let sumi = weighted(&ls, &dots);
        d * q8k_d(ba) * (sumi as f32 + 0.125 * shift as f32)
    })
}

/// Trit `n` of a TQ1_0 byte as -1, 0, 1.
#[inline(always)]
fn trit(q: u8, n: usize) -> i8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    (((q.wrapping_mul(POW3[n]) as u16 * 3) >> 8) as i8) - 1
}

pub(super) fn tq1_0(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 54, a, |bw, ba| {
        let mut q = [0i8; 256];
        for n in 0..5 {
            for m in 0..32 {
                q[32 * n + m] = trit(bw[m], n);
            }
            for m in 0..16 {
                q[160 + 16 * n + m] = trit(bw[32 + m], n);
            }
        }
        for n in 0..4 {
            for j in 0..4 {
                q[240 + 4 * n + j] = trit(bw[48 + j], n);
            }
        }
        let sum = sub_dots::<1>(&q, ba, 256)[0];
        sum as f32 * (f16_at(bw, 52) * q8k_d(ba))
    })
}

pub(super) fn tq2_0(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    over_superblocks(nb, w, 66, a, |bw, ba| {
        let mut q = [0i8; 256];
        for (e, v) in q.iter_mut().enumerate() {
            let byte = bw[32 * (e / 128) + e % 32];
            *v = ((byte >> (2 * ((e % 128) / 32))) & 3) as i8 - 1;
        }
        let sum = sub_dots::<1>(&q, ba, 256)[0];
        sum as f32 * (q8k_d(ba) * f16_at(bw, 64))
    })
}
