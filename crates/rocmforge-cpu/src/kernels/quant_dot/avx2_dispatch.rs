//! Picks the AVX2 kernel for a weight type and runs it over a tile's rows.
//!
//! The row loop is compiled with the kernel inlined into it (one copy per
//! type and token count), so a decode step pays no per-row call or dispatch.

use std::ops::Range;

use rocmforge_core::quant::QuantType;

use super::avx2_iquant::{iq1_m, iq1_s, iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs, tq1_0, tq2_0};
use super::avx2_kquant::{q45_k, q6_k};
use super::avx2_legacy::{offset_q8_1, with_q8_0, IQ4_NL, MXFP4, Q4_0, Q5_0, Q8_0};
use super::avx2_low_kquant::{iq4_xs, q23_k};
use super::float_dot::avx2::{dot_rows, Elem};
use super::tile::{OutRows, TokenGroup};

/// One weight row against `T` (activation row, side information) pairs.
trait RowKernel<const T: usize> {
    /// # Safety
    /// AVX2/FMA/F16C available; `w` holds `nb` blocks, each activation row
    /// `nb` blocks and each side slice what the kernel reads.
    unsafe fn dot(nb: usize, w: &[u8], a: [(&[u8], &[f32]); T]) -> [f32; T];
}

macro_rules! row_kernel {
    ($name:ident, |$nb:ident, $w:ident, $a:ident| $body:expr) => {
        struct $name;
        impl<const T: usize> RowKernel<T> for $name {
            #[inline(always)]
            unsafe fn dot($nb: usize, $w: &[u8], $a: [(&[u8], &[f32]); T]) -> [f32; T] {
                // SAFETY: the kernel's contract is this fn's: AVX2/FMA/F16C,
                // `nb` blocks in `w` and in every activation row, side
                // slices as the kernel reads them.
                unsafe { $body }
            }
        }
    };
}

row_kernel!(KQ4_0, |nb, w, a| with_q8_0::<Q4_0, T>(
    nb,
    w,
    a.map(|r| r.0),
    a.map(|r| r.1)
));
row_kernel!(KQ5_0, |nb, w, a| with_q8_0::<Q5_0, T>(
    nb,
    w,
    a.map(|r| r.0),
    a.map(|r| r.1)
));
row_kernel!(KQ8_0, |nb, w, a| with_q8_0::<Q8_0, T>(
    nb,
    w,
    a.map(|r| r.0),
    a.map(|r| r.1)
));
row_kernel!(KIQ4NL, |nb, w, a| with_q8_0::<IQ4_NL, T>(
    nb,
    w,
    a.map(|r| r.0),
    a.map(|r| r.1)
));
row_kernel!(KMXFP4, |nb, w, a| with_q8_0::<MXFP4, T>(
    nb,
    w,
    a.map(|r| r.0),
    a.map(|r| r.1)
));
row_kernel!(KQ4_1, |nb, w, a| offset_q8_1::<false, T>(
    nb,
    w,
    a.map(|r| r.0)
));
row_kernel!(KQ5_1, |nb, w, a| offset_q8_1::<true, T>(
    nb,
    w,
    a.map(|r| r.0)
));
row_kernel!(KQ2K, |nb, w, a| q23_k::<false, T>(nb, w, a.map(|r| r.0)));
row_kernel!(KQ3K, |nb, w, a| q23_k::<true, T>(nb, w, a.map(|r| r.0)));
row_kernel!(KQ4K, |nb, w, a| q45_k::<false, T>(nb, w, a.map(|r| r.0)));
row_kernel!(KQ5K, |nb, w, a| q45_k::<true, T>(nb, w, a.map(|r| r.0)));
row_kernel!(KQ6K, |nb, w, a| q6_k::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KIQ4XS, |nb, w, a| iq4_xs::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KIQ2XXS, |nb, w, a| iq2_xxs::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KIQ2XS, |nb, w, a| iq2_xs::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KIQ2S, |nb, w, a| iq2_s::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KIQ3XXS, |nb, w, a| iq3_xxs::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KIQ3S, |nb, w, a| iq3_s::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KIQ1S, |nb, w, a| iq1_s::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KIQ1M, |nb, w, a| iq1_m::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KTQ1_0, |nb, w, a| tq1_0::<T>(nb, w, a.map(|r| r.0)));
row_kernel!(KTQ2_0, |nb, w, a| tq2_0::<T>(nb, w, a.map(|r| r.0)));

/// `dst` entry (`i`, `r - rows.start`) = row `r` · `group[i]`.
///
/// # Safety
/// As for [`rows_times_group`], with `group` holding `T` rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn over_rows<K: RowKernel<T>, const T: usize>(
    nb: usize,
    wb: usize,
    w: &[u8],
    rows: Range<usize>,
    group: [(&[u8], &[f32]); T],
    dst: OutRows,
) {
    for (col, r) in rows.enumerate() {
        // SAFETY: rows `rows` of `w` are `wb` bytes of `nb` blocks each, the
        // group's rows hold what `K` reads, and `dst` has room for `T` rows
        // of `rows.len()` (this fn's contract); AVX2/FMA/F16C are enabled.
        unsafe {
            let res = K::dot(nb, w.get_unchecked(r * wb..(r + 1) * wb), group);
            for (i, v) in res.into_iter().enumerate() {
                *dst.at(i, col) = v;
            }
        }
    }
}

/// [`over_rows`] for the group's token count.
///
/// # Safety
/// As for [`rows_times_group`].
unsafe fn by_count<K: RowKernel<1> + RowKernel<2> + RowKernel<3> + RowKernel<4>>(
    nb: usize,
    wb: usize,
    w: &[u8],
    rows: Range<usize>,
    g: &TokenGroup,
    dst: OutRows,
) {
    // SAFETY: this fn's contract is `over_rows`'s, for `g.len()` tokens.
    unsafe {
        match g.len() {
            1 => over_rows::<K, 1>(nb, wb, w, rows, [g[0]], dst),
            2 => over_rows::<K, 2>(nb, wb, w, rows, [g[0], g[1]], dst),
            3 => over_rows::<K, 3>(nb, wb, w, rows, [g[0], g[1], g[2]], dst),
            4 => over_rows::<K, 4>(nb, wb, w, rows, [g[0], g[1], g[2], g[3]], dst),
            _ => unreachable!("token groups hold one to four rows"),
        }
    }
}

/// Float weights: four rows at a time per token (see `dot_rows`).
///
/// # Safety
/// As for [`rows_times_group`], with `k` elements of `e` per row.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_rows(
    e: Elem,
    k: usize,
    wb: usize,
    w: &[u8],
    rows: Range<usize>,
    group: &TokenGroup,
    dst: OutRows,
) {
    // SAFETY: rows `rows` of `w` are `wb` bytes of `k` elements, every
    // activation row holds `k` elements, and `dst` has room for
    // `group.len()` rows of `rows.len()` (this fn's contract); AVX2/FMA/F16C
    // are enabled on this fn.
    unsafe {
        let row = |r: usize| w.get_unchecked(r * wb..(r + 1) * wb);
        for (i, (a, _)) in group.iter().enumerate() {
            let mut r = rows.start;
            while r + 4 <= rows.end {
                let v = dot_rows::<4>(e, k, [row(r), row(r + 1), row(r + 2), row(r + 3)], a);
                std::ptr::copy_nonoverlapping(v.as_ptr(), dst.at(i, r - rows.start), 4);
                r += 4;
            }
            while r < rows.end {
                *dst.at(i, r - rows.start) = dot_rows::<1>(e, k, [row(r)], a)[0];
                r += 1;
            }
        }
    }
}

/// Runs the AVX2 kernel for `ty`, if there is one (returns whether it ran).
///
/// # Safety
/// AVX2, FMA and F16C available; rows `rows` of `w` (each `wb` bytes) hold
/// `nb` blocks of `ty`, every activation row of `group` `nb` activation
/// blocks, every side slice the side information of its row (if the type
/// uses it), and `dst` has room for `group.len()` rows of `rows.len()`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn rows_times_group(
    ty: QuantType,
    k: usize,
    nb: usize,
    wb: usize,
    w: &[u8],
    rows: Range<usize>,
    group: &TokenGroup,
    dst: OutRows,
) -> bool {
    use QuantType as Q;
    let elem = match ty {
        Q::F32 => Some(Elem::F32),
        Q::F16 => Some(Elem::F16),
        Q::BF16 => Some(Elem::BF16),
        _ => None,
    };
    if let Some(e) = elem {
        // SAFETY: this fn's contract, with float rows of `k` elements.
        unsafe { float_rows(e, k, wb, w, rows, group, dst) };
        return true;
    }
    let run = match ty {
        Q::Q4_0 => by_count::<KQ4_0>,
        Q::Q5_0 => by_count::<KQ5_0>,
        Q::Q8_0 => by_count::<KQ8_0>,
        Q::IQ4NL => by_count::<KIQ4NL>,
        Q::MXFP4 => by_count::<KMXFP4>,
        Q::Q4_1 => by_count::<KQ4_1>,
        Q::Q5_1 => by_count::<KQ5_1>,
        Q::Q2K => by_count::<KQ2K>,
        Q::Q3K => by_count::<KQ3K>,
        Q::Q4K => by_count::<KQ4K>,
        Q::Q5K => by_count::<KQ5K>,
        Q::Q6K => by_count::<KQ6K>,
        Q::IQ4XS => by_count::<KIQ4XS>,
        Q::IQ2XXS => by_count::<KIQ2XXS>,
        Q::IQ2XS => by_count::<KIQ2XS>,
        Q::IQ2S => by_count::<KIQ2S>,
        Q::IQ3XXS => by_count::<KIQ3XXS>,
        Q::IQ3S => by_count::<KIQ3S>,
        Q::IQ1S => by_count::<KIQ1S>,
        Q::IQ1M => by_count::<KIQ1M>,
        Q::TQ1_0 => by_count::<KTQ1_0>,
        Q::TQ2_0 => by_count::<KTQ2_0>,
        _ => return false,
    };
    // SAFETY: this fn's contract is `by_count`'s.
    unsafe { run(nb, wb, w, rows, group, dst) };
    true
}
