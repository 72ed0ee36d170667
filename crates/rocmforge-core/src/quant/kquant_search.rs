//! Per-sub-block scale searches of ggml's reference K-quant quantizers.
//!
//! A plain `amax / nmax` scale wastes levels when one outlier dominates a
//! sub-block, so ggml tries a handful of nearby scales and keeps the one with
//! the smallest weighted squared (or absolute) error, refitting the scale (and
//! offset) by least squares for each candidate rounding. We follow the same
//! steps in the same order so our files carry the same quants as llama.cpp's.

use super::nearest_int;

/// Sub-blocks whose largest magnitude is below this are stored as all zero.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// The signed value of largest magnitude (first one on ties) and its magnitude.
fn signed_abs_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Symmetric quants in `-nmax..nmax` (stored `+ nmax` in `l`) with weights
/// `x²`, trying 18 scales around `nmax / max` (ggml `make_qx_quants`,
/// rmse_type 1, as Q6_K uses it). Returns the scale.
pub(super) fn symmetric_weighted(x: &[f32], nmax: i32, l: &mut [u8]) -> f32 {
    let (max, amax) = signed_abs_max(x);
    if amax < GROUP_MAX_EPS {
        l.iter_mut().for_each(|q| *q = 0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = quant(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let store = |iscale: f32, l: &mut [u8]| {
        for (q, &v) in l.iter_mut().zip(x) {
            *q = (quant(iscale, v) + nmax) as u8;
        }
    };

    let iscale = -(nmax as f32) / max;
    store(iscale, l);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        // Compares sumlx²/suml2 (the error reduction) without dividing.
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            store(iscale, l);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric quants in `-nmax..nmax` (stored `+ nmax`) refined by coordinate
/// descent: each element in turn moves to the level that is optimal given the
/// others, up to five sweeps (ggml `make_q3_quants` with rmse, as Q3_K uses it).
pub(super) fn symmetric_refined(x: &[f32], nmax: i32, l: &mut [u8]) -> f32 {
    let (max, amax) = signed_abs_max(x);
    if amax < GROUP_MAX_EPS {
        l.iter_mut().for_each(|q| *q = 0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut levels = [0i32; 16];
    let levels = &mut levels[..x.len()];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (q, &v) in levels.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        let w = v * v;
        sumlx += w * v * *q as f32;
        suml2 += w * *q as f32 * *q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (q, &v) in levels.iter_mut().zip(x) {
            let w = v * v;
            let mut slx = sumlx - w * v * *q as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * *q as f32 * *q as f32;
                let new_q = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_q != *q {
                    slx += w * v * new_q as f32;
                    sl2 += w * new_q as f32 * new_q as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *q = new_q;
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
    for (dst, &q) in l.iter_mut().zip(levels.iter()) {
        *dst = (q + nmax) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of the affine search: candidate `iscale`s are
/// `(nmax + rmin + rdelta * i) / (max - min)` for `i` in `0..=nstep`.
pub(super) struct AffineSearch {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    /// Minimise weighted absolute instead of squared error.
    pub use_mad: bool,
}

/// Affine quants `x ≈ scale * l - min_out` with `l` in `0..=nmax` and an offset
/// that never goes above zero (ggml `make_qkx2_quants`). Returns
/// `(scale, min_out)`; `min_out >= 0` is the amount subtracted.
pub(super) fn affine_weighted(
    x: &[f32],
    weights: &[f32],
    p: &AffineSearch,
    l: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = if x[i] < min { x[i] } else { min };
        max = if x[i] > max { x[i] } else { max };
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    // The offset is a subtraction of a non-negative min, so zero must stay
    // representable: that keeps all-positive sub-blocks unbiased.
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.iter_mut().for_each(|q| *q = 0);
        return (0.0, -min);
    }
    let nmax = p.nmax;
    let quant = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax);
    let error = |scale: f32, min: f32, l: &[u8]| {
        let mut err = 0.0f32;
        for i in 0..n {
            let diff = scale * l[i] as f32 + min - x[i];
            err += weights[i] * if p.use_mad { diff.abs() } else { diff * diff };
        }
        err
    };

    let iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    for (q, &v) in l.iter_mut().zip(x) {
        *q = quant(iscale, v, min) as u8;
    }
    let mut best_error = error(scale, min, l);
    let mut trial = [0u8; 32];
    let trial = &mut trial[..n];
    for step in 0..=p.nstep {
        let iscale = (p.rmin + p.rdelta * step as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = quant(iscale, x[i], min);
            trial[i] = q as u8;
            let q = q as f32;
            let w = weights[i];
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * x[i];
        }
        // Weighted least squares for (scale, offset) given these levels.
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur_error = error(this_scale, this_min, trial);
            if cur_error < best_error {
                l.copy_from_slice(trial);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}
