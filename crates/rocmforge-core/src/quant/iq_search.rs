//! The scale search shared by ggml's IQ2 and IQ3 quantizers.
//!
//! Each group of 16 or 32 weights is stored as magnitudes on a lattice (see
//! `iq_lattice`), signs and one small scale. Signs are split off first, so
//! the search works on magnitudes; then a range of candidate scales is tried:
//! at each, every 8- or 4-element sub-group is rounded to the level cube and,
//! when that point is not in the lattice, moved to the best nearby lattice
//! point; the candidate whose least-squares scale explains the most weighted
//! energy wins. Finally the groups are rounded once more at the winning
//! scale, which is refitted.
//!
//! The five types differ only in the knobs of [`GroupSearch`] and in how
//! they fold signs, which is why the steps live here once. Every float
//! operation is in ggml's order: the quantizers must produce ggml's bytes.

use std::ops::RangeInclusive;

use super::iq_grids::Lattice;
use super::iq_lattice::LatticeIndex;
use super::nearest_int;

/// How the groups are rounded again at the winning scale.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Requant {
    /// Every sub-group, whenever the scale is positive (IQ2_XXS).
    Always,
    /// Only the sub-groups the winning try had to move off the cube, if any
    /// (IQ2_XS, IQ2_S, IQ3_XXS).
    OffGrid,
    /// Every sub-group if any was moved, counting all as moved when no try
    /// won (IQ3_S).
    AllIfAnyOffGrid,
}

/// Where the candidate scales are centred.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// Around `max / (2 nmax - 1)`.
    Max,
    /// Around a weighted fit to `nmax + 1` uniform levels (IQ2_XXS).
    UniformFit,
}

pub(super) struct GroupSearch {
    pub lattice: Lattice,
    /// Levels per coordinate (ggml `kMaxQ`): 3 for IQ2, 8 for IQ3.
    pub nmax: i32,
    pub tries: RangeInclusive<i32>,
    /// Relative spacing of the candidate scales.
    pub step: f32,
    pub start: Start,
    pub requant: Requant,
}

/// A group's result: its scale (negative only in cases ggml also treats as
/// "should never happen"; callers flip the signs then) and the lattice index
/// of each sub-group.
pub(super) struct GroupFit {
    pub scale: f32,
    pub index: [u16; 8],
}

impl GroupSearch {
    /// Fits the magnitudes `xval` (with `weight` and `waux = sqrt(weight)`)
    /// whose largest value is `max`. Returns `None` where ggml stores the
    /// group as zero because the starting fit is degenerate.
    pub(super) fn fit(
        &self,
        xval: &[f32],
        weight: &[f32],
        waux: &[f32],
        max: f32,
    ) -> Option<GroupFit> {
        let lat = LatticeIndex::get(self.lattice);
        let n = xval.len();
        let dim = self.lattice.dim();
        let top = (2 * self.nmax - 1) as f32;
        let mut l = [0i8; 32];
        let mut laux = [0i8; 32];
        let (mut scale, base) = match self.start {
            Start::Max => (max / top, max),
            Start::UniformFit => {
                let mut lq = [0u8; 32];
                let s = uniform_fit(xval, self.nmax + 1, weight, &mut lq[..n]);
                // ggml leaves these levels in place until the tries overwrite them.
                for (a, &b) in l.iter_mut().zip(&lq[..n]) {
                    *a = b as i8;
                }
                let eff_max = s * self.nmax as f32;
                if eff_max <= 0.0 {
                    return None;
                }
                (s, eff_max)
            }
        };
        let on_grid_init = self.requant != Requant::AllIfAnyOffGrid;
        let mut on_grid = [on_grid_init; 8];
        let mut on_grid_aux = [true; 8];
        let mut best = 0.0f32;
        for is in self.tries.clone() {
            let id = (top + is as f32 * self.step) / base;
            let this_scale = 1.0 / id;
            for (k, aux) in on_grid_aux[..n / dim].iter_mut().enumerate() {
                let group = k * dim..(k + 1) * dim;
                for (q, &v) in laux[group.clone()].iter_mut().zip(&xval[group.clone()]) {
                    *q = nearest_int(0.5 * (id * v - 1.0)).clamp(0, self.nmax - 1) as i8;
                }
                *aux = true;
                if let Err(cands) = lat.lookup(&laux[group.clone()]) {
                    *aux = false;
                    lat.nearest(
                        cands,
                        &xval[group.clone()],
                        &waux[group.clone()],
                        this_scale,
                        &mut laux[group],
                    );
                }
            }
            let (sumqx, sumq2) = sums(&laux[..n], xval, weight);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                l[..n].copy_from_slice(&laux[..n]);
                on_grid = on_grid_aux;
            }
        }
        let off_grid = on_grid[..n / dim].iter().any(|&g| !g);
        let requant = match self.requant {
            Requant::Always => scale > 0.0,
            Requant::OffGrid | Requant::AllIfAnyOffGrid => off_grid && scale > 0.0,
        };
        if requant {
            let id = 1.0 / scale;
            for (k, &was_on_grid) in on_grid[..n / dim].iter().enumerate() {
                if self.requant == Requant::OffGrid && was_on_grid {
                    continue;
                }
                let group = k * dim..(k + 1) * dim;
                for (q, &v) in l[group.clone()].iter_mut().zip(&xval[group.clone()]) {
                    *q = nearest_int(0.5 * (id * v - 1.0)).clamp(0, self.nmax - 1) as i8;
                }
                if let Err(cands) = lat.lookup(&l[group.clone()]) {
                    lat.nearest(
                        cands,
                        &xval[group.clone()],
                        &waux[group.clone()],
                        scale,
                        &mut l[group],
                    );
                }
            }
            let (sumqx, sumq2) = sums(&l[..n], xval, weight);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        let mut index = [0u16; 8];
        for (k, ix) in index[..n / dim].iter_mut().enumerate() {
            let group = k * dim..(k + 1) * dim;
            // Every level vector here came from the lattice, so the lookup
            // hits (ggml aborts otherwise); only the degenerate start of
            // IQ2_XXS with no winning try could leave levels off it, and the
            // nearest point stands in for them.
            *ix = match lat.lookup(&l[group.clone()]) {
                Ok(i) => i as u16,
                Err(cands) => {
                    let mut tmp = [0i8; 8];
                    lat.nearest(
                        cands,
                        &xval[group.clone()],
                        &waux[group],
                        scale,
                        &mut tmp[..dim],
                    ) as u16
                }
            };
        }
        Some(GroupFit { scale, index })
    }
}

/// `sum(w x q)` and `sum(w q²)` with `q = 2l + 1`.
fn sums(l: &[i8], x: &[f32], w: &[f32]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for ((&q, &xv), &wv) in l.iter().zip(x).zip(w) {
        let q = (2 * q as i32 + 1) as f32;
        sumqx += wv * xv * q;
        sumq2 += wv * q * q;
    }
    (sumqx, sumq2)
}

/// Splits signs off an 8-element group for the 7-sign formats: returns the
/// magnitudes in `xval` and the low 7 sign bits. An odd number of negatives
/// cannot be stored (the eighth sign is implied by parity, see
/// `KSIGNS_IQ2XS`), so the element that matters least (smallest `w x²`)
/// keeps its sign folded into its value, which is then negative.
pub(super) fn fold_signs_even(x: &[f32], w: &[f32], xval: &mut [f32]) -> u8 {
    let mut s = fold_signs(x, xval);
    if s.count_ones() % 2 == 1 {
        let (mut imin, mut min) = (0, w[0] * x[0] * x[0]);
        for i in 1..8 {
            let ax = w[i] * x[i] * x[i];
            if ax < min {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s & 127
}

/// Splits signs off an 8-element group: magnitudes into `xval`, bit `i` set
/// where `x[i]` is negative.
pub(super) fn fold_signs(x: &[f32], xval: &mut [f32]) -> u8 {
    let mut s = 0u8;
    for (i, (&v, m)) in x[..8].iter().zip(xval.iter_mut()).enumerate() {
        if v >= 0.0 {
            *m = v;
        } else {
            *m = -v;
            s |= 1 << i;
        }
    }
    s
}

/// ggml's `MAX(a, b)` (`a > b ? a : b`), whose NaN behaviour the search
/// relies on being the same as ggml's.
pub(super) fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// The 4-bit code of a group scale relative to the super-block scale: the
/// group's scale is stored as `(2c + 1) / 2` (or `2c + 1`) times it.
pub(super) fn scale_code(id: f32, s: f32, top: i32) -> u8 {
    nearest_int(0.5 * (id * s - 1.0)).clamp(0, top) as u8
}

/// Non-negative levels `0..=nmax` with weights `w` (ggml `make_qp_quants`):
/// round at `nmax / max`, try eight nearby scales by weighted error, then up
/// to five sweeps of per-element refits. Returns the least-squares scale.
///
/// The levels live in bytes as in ggml, so the (rare) negative level of an
/// element whose sign IQ2_XXS had to fold back wraps around exactly as
/// ggml's does, and the scale comes out the same.
fn uniform_fit(x: &[f32], nmax: i32, w: &[f32], l: &mut [u8]) -> f32 {
    let max = x.iter().fold(0.0f32, |m, &v| c_max(m, v));
    if max < super::kquant_search::GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    for (q, &v) in l.iter_mut().zip(x) {
        *q = nearest_int(iscale * v) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for ((&q, &v), &wv) in l.iter().zip(x).zip(w) {
        let diff = v - scale * q as f32;
        best_mse += wv * diff * diff;
    }
    for is in (-4..=4).filter(|&s| s != 0) {
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for (&v, &wv) in x.iter().zip(w) {
            let q = nearest_int(iscale_is * v).min(nmax);
            let diff = v - scale_is * q as f32;
            mse += wv * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for ((q, &v), &wv) in l.iter_mut().zip(x).zip(w) {
        let lv = nearest_int(iscale * v).min(nmax);
        *q = lv as u8;
        sumlx += wv * v * lv as f32;
        suml2 += wv * lv as f32 * lv as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for ((q, &v), &wv) in l.iter_mut().zip(x).zip(w) {
            let old = *q as f32;
            let mut slx = sumlx - wv * v * old;
            let mut sl2 = suml2 - wv * old * old;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(v * sl2 / slx).min(nmax);
                if new_l != *q as i32 {
                    slx += wv * v * new_l as f32;
                    sl2 += wv * new_l as f32 * new_l as f32;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *q = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}
