//! Prefill's matrix × matrix driver for the K-quants: eight weight rows at a
//! time, the K-quant counterpart of `avx2_panel`.
//!
//! Per call, eight rows are copied into a per-thread panel whose layout the
//! format chooses (`PanelFormat`): quants with lane `i` of a vector holding
//! four consecutive quants of row `i`, scales as vectors over the eight rows.
//! A broadcast of four activation quants then feeds eight rows at once and
//! the super-block scales apply with one FMA per eight rows. The copy costs a
//! few percent once a call has tens of tokens; decode keeps the row kernels.
//! Integer sums are exact, so only the float order differs from ggml's.
//!
//! Safety contract of the `unsafe fn`s: the CPU has AVX2, FMA and F16C and
//! the caller checked every length.

use std::arch::x86_64::*;
use std::ops::Range;

use super::tile::OutRows;

/// Weight rows in one panel: one per 32-bit lane.
pub(super) const ROWS: usize = 8;
/// Tokens one pass over a panel serves.
pub(super) const PASS_TOKENS: usize = 4;
/// Q8_K activation block: d (f32), 256 quants, 16 i16 sums of 16.
pub(super) const A_BYTES: usize = 292;
pub(super) const A_QS: usize = 4;
pub(super) const A_BSUMS: usize = 260;

/// A K-quant's panel layout and its pass over four tokens.
pub(super) trait PanelFormat {
    /// One packed super-block of eight rows.
    type Block: Copy;
    /// Bytes of one super-block of one row in the file.
    const W_BYTES: usize;

    /// Packs `live` (at most eight) rows, `wb` bytes apart, into `panel`
    /// (one block per super-block); rows past `live` contribute zero.
    ///
    /// # Safety
    /// See the module.
    unsafe fn pack(w: *const u8, wb: usize, live: usize, panel: &mut [Self::Block]);

    /// Lane `i` of result `t` is row `i` · activation row `a[t]`.
    ///
    /// # Safety
    /// See the module.
    unsafe fn pass(panel: &[Self::Block], a: [*const u8; PASS_TOKENS]) -> [__m256; PASS_TOKENS];
}

thread_local! {
    static PANEL: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `out` entry (`t`, `r - rows.start`) = row `r` · Q8_K row `t`, for
/// `t < n`; `acts` holds the `n` rows back to back (`nb` blocks each).
///
/// # Safety
/// AVX2/FMA/F16C available; `w` holds rows `rows` of `nb` super-blocks,
/// `acts` `n` rows, and `out` has room for `n` rows of `rows.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_times_tokens<F: PanelFormat>(
    nb: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    n: usize,
    out: OutRows,
) {
    let wb = nb * F::W_BYTES;
    let ab = nb * A_BYTES;
    debug_assert!(n > 0 && rows.end * wb <= w.len() && n * ab <= acts.len());
    // Raw bytes reused across calls, carved into blocks with their alignment.
    let mut bytes = PANEL.take();
    let (size, align) = (
        std::mem::size_of::<F::Block>(),
        std::mem::align_of::<F::Block>(),
    );
    bytes.resize(nb * size + align, 0);
    let start = bytes.as_mut_ptr().align_offset(align);
    // SAFETY: in bounds by the resize above, aligned, and every block is
    // written by `pack` before `pass` reads it (blocks are plain data).
    let panel = unsafe {
        std::slice::from_raw_parts_mut(bytes.as_mut_ptr().add(start) as *mut F::Block, nb)
    };
    let mut r0 = rows.start;
    // SAFETY: rows `rows` of `w`, the `n` rows of `acts` and the `n` rows of
    // `out` are as large as this fn's contract says, so every offset and store
    // below stays in them; AVX2/FMA/F16C are enabled on this fn.
    unsafe {
        while r0 < rows.end {
            let live = (rows.end - r0).min(ROWS);
            F::pack(w.as_ptr().add(r0 * wb), wb, live, panel);
            let mut t = 0;
            while t < n {
                // A short last pass repeats its last token; the extra results
                // are dropped.
                let a = [0, 1, 2, 3].map(|i| acts.as_ptr().add((t + i).min(n - 1) * ab));
                let res = F::pass(panel, a);
                for (i, v) in res.iter().enumerate().take(n - t) {
                    store_lanes(*v, out.at(t + i, r0 - rows.start), live);
                }
                t += PASS_TOKENS;
            }
            r0 += live;
        }
    }
    PANEL.set(bytes);
}

/// Stores the first `live` lanes of `v` (all eight with one store).
///
/// # Safety
/// `dst` must be valid for `live` writes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store_lanes(v: __m256, dst: *mut f32, live: usize) {
    // SAFETY: `dst` is valid for `live` writes (this fn's contract) and
    // `lanes` holds eight floats; AVX is enabled on this fn.
    unsafe {
        if live == ROWS {
            _mm256_storeu_ps(dst, v);
        } else {
            let mut lanes = [0.0f32; ROWS];
            _mm256_storeu_ps(lanes.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, live);
        }
    }
}
