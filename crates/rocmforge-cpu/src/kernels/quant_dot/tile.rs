//! The matrix × matrix tile loop and the scalar dispatch.

use std::ops::Range;

use rocmforge_core::quant::QuantType;

use super::{
    activation_type, detected_isa, float_dot, row_bytes, scalar_iquant, scalar_kquant,
    scalar_legacy, Isa,
};

/// Tokens one kernel pass serves: each weight block is unpacked once for all
/// of them. Four keeps accumulators and unpacked weights within the 16 vector
/// registers.
pub(super) const TOKENS_PER_CALL: usize = 4;

/// Activation bytes one token chunk may span: together with the tile's weight
/// rows it should stay in L2 while every row passes over it.
const ACT_CHUNK_BYTES: usize = 256 * 1024;

/// Weight bytes of the rows one pass of token groups walks: well inside L2
/// (512 KiB here), so the rows are read from memory once per token chunk.
const ROW_BLOCK_BYTES: usize = 128 * 1024;

/// Tokens from which packing weight rows into panels pays for itself.
const PANEL_MIN_TOKENS: usize = 4;

/// Whether a call may pack weight rows into panels for its tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Panels {
    /// From [`PANEL_MIN_TOKENS`] tokens on, for the types that have them:
    /// the fastest kernels for each token count.
    WhenTheyPay,
    /// Never: every token count takes the token-group kernels, whose sums
    /// for a token do not depend on the other tokens of the call, so a row
    /// gets the same bits in a call of one token or of many (a batched
    /// step's sequences, `rocmforge_core::session`). On a few tokens they
    /// are as fast as the panels (measured: 4-8 token decode steps of
    /// qwen2-0.5b Q4_0 were faster without them; docs/measurements.md,
    /// session 25).
    Never,
}

/// A group of at most [`TOKENS_PER_CALL`] activation rows, each with its side
/// information (empty where the kernel needs none).
pub(super) type TokenGroup<'a> = [(&'a [u8], &'a [f32])];

pub(super) fn has_kernel(ty: QuantType) -> bool {
    use QuantType as Q;
    matches!(
        ty,
        Q::F32
            | Q::F16
            | Q::BF16
            | Q::Q4_0
            | Q::Q4_1
            | Q::Q5_0
            | Q::Q5_1
            | Q::Q8_0
            | Q::IQ4NL
            | Q::MXFP4
            | Q::Q2K
            | Q::Q3K
            | Q::Q4K
            | Q::Q5K
            | Q::Q6K
            | Q::IQ4XS
            | Q::IQ2XXS
            | Q::IQ2XS
            | Q::IQ2S
            | Q::IQ3XXS
            | Q::IQ3S
            | Q::IQ1S
            | Q::IQ1M
            | Q::TQ1_0
            | Q::TQ2_0
    )
}

/// `out[t * rows.len() + (r - rows.start)]` = weight row `r` · activation row
/// `t`, for `r` in `rows` and `t` in `0..n_tokens`.
///
/// `w` is the whole weight matrix (rows of `weight.bytes_for(k)` bytes) and
/// `acts` holds `n_tokens` activation rows from [`super::quantize_activation`]
/// back to back. Tokens are walked in chunks whose activations fit in L2;
/// within a chunk, groups of four tokens meet every row of the tile, so a
/// weight block is unpacked once per four tokens and a tile's rows are read
/// from memory once per chunk.
///
/// # Panics
/// If `weight` has no kernel, `k` is not a whole number of blocks, or `w`,
/// `acts` or `out` are too short.
pub fn matmul_tile(
    weight: QuantType,
    k: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    n_tokens: usize,
    out: &mut [f32],
) {
    let width = rows.len();
    assert!(
        n_tokens.checked_mul(width).is_some_and(|n| n <= out.len()),
        "output of {} floats for {n_tokens} x {width}",
        out.len()
    );
    // SAFETY: `out` was checked to hold n_tokens rows of `width` floats,
    // each this call's alone (it borrows `out` mutably).
    unsafe {
        matmul_rows_strided(
            weight,
            k,
            w,
            rows,
            acts,
            n_tokens,
            out.as_mut_ptr(),
            width,
            Panels::WhenTheyPay,
        )
    };
}

/// [`matmul_tile`] writing token `t`'s results at `out + t * out_stride`:
/// straight into a row-major tensor of `out_stride` columns, where several
/// threads fill disjoint column ranges at once; `panels` says whether it
/// may take the panel kernels.
///
/// # Safety
/// `out + t * out_stride .. + rows.len()` must be valid for writes, and
/// written by no one else during the call, for every `t < n_tokens`.
///
/// # Panics
/// As [`matmul_tile`], for the weight and activation lengths.
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul_rows_strided(
    weight: QuantType,
    k: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    n_tokens: usize,
    out: *mut f32,
    out_stride: usize,
    panels: Panels,
) {
    check_inputs(weight, k, w, &rows, acts, n_tokens);
    assert!(
        out_stride >= rows.len(),
        "output stride {out_stride} < {} rows",
        rows.len()
    );
    let out = OutRows::new(out, out_stride);
    // SAFETY: the lengths were checked above, and every output row `t <
    // n_tokens` is valid for `rows.len()` writes by this call alone (this
    // fn's contract), which is the room `tile_with` needs.
    unsafe {
        tile_with(
            detected_isa(),
            weight,
            k,
            w,
            rows,
            acts,
            n_tokens,
            out,
            panels,
        )
    };
}

fn check_inputs(
    weight: QuantType,
    k: usize,
    w: &[u8],
    rows: &Range<usize>,
    acts: &[u8],
    n_tokens: usize,
) {
    assert!(
        has_kernel(weight),
        "no dot-product kernel for weight type {weight}"
    );
    let wb = row_bytes(weight, k);
    let ab = row_bytes(activation_type(weight), k);
    assert!(
        rows.end.checked_mul(wb).is_some_and(|n| n <= w.len()),
        "weight rows up to {} of {wb} bytes need more than the {} given",
        rows.end,
        w.len()
    );
    assert!(
        n_tokens.checked_mul(ab).is_some_and(|n| n <= acts.len()),
        "{n_tokens} activation rows of {ab} bytes need more than the {} given",
        acts.len()
    );
}

/// Where a kernel writes: entry (token `t`, column `c`) at `base + t *
/// stride + c`. A raw pointer because threads write disjoint columns of one
/// tensor concurrently, which `&mut` slices cannot express.
#[derive(Clone, Copy)]
pub(super) struct OutRows {
    base: *mut f32,
    stride: usize,
}

impl OutRows {
    pub(super) fn new(base: *mut f32, stride: usize) -> OutRows {
        OutRows { base, stride }
    }

    pub(super) fn stride(self) -> usize {
        self.stride
    }

    /// # Safety
    /// (`t`, `c`) must be within what the creator of `self` vouched for.
    #[inline(always)]
    pub(super) unsafe fn at(self, t: usize, c: usize) -> *mut f32 {
        // SAFETY: (`t`, `c`) lies within the block the creator vouched for
        // (this fn's contract), so the offset stays inside its allocation.
        unsafe { self.base.add(t * self.stride + c) }
    }

    fn skip_tokens(self, t: usize) -> OutRows {
        OutRows {
            base: self.base.wrapping_add(t * self.stride),
            ..self
        }
    }
}

/// [`matmul_tile`] on a given instruction set, lengths already checked.
///
/// # Safety
/// `out` has room for `n_tokens` rows of `rows.len()`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile_with(
    isa: Isa,
    weight: QuantType,
    k: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    n_tokens: usize,
    out: OutRows,
    panels: Panels,
) {
    let width = rows.len();
    let panels = panels == Panels::WhenTheyPay;
    if k == 0 || width == 0 {
        for t in 0..n_tokens {
            // SAFETY: `out` has room for `n_tokens` rows of `width` (this
            // fn's contract).
            unsafe { std::slice::from_raw_parts_mut(out.at(t, 0), width).fill(0.0) };
        }
        return;
    }
    let ab = row_bytes(activation_type(weight), k);
    let nb = k / weight.block_size();
    let chunk = (ACT_CHUNK_BYTES / ab)
        .max(1)
        .next_multiple_of(TOKENS_PER_CALL);
    let act_row = |t: usize| &acts[t * ab..(t + 1) * ab];
    let per_token_side = side_len(isa, weight, nb);
    // Reused across calls: a decode step calls this once per 32-row tile.
    let mut side = SIDE_BUFFER.take();
    side.resize(per_token_side * chunk.min(n_tokens), 0.0);
    for t0 in (0..n_tokens).step_by(chunk) {
        let t_end = (t0 + chunk).min(n_tokens);
        if per_token_side > 0 {
            for (t, s) in (t0..t_end).zip(side.chunks_exact_mut(per_token_side)) {
                fill_side(isa, nb, act_row(t), s);
            }
        }
        #[cfg(target_arch = "x86_64")]
        if panels && isa == Isa::Avx2 && t_end - t0 >= PANEL_MIN_TOKENS {
            use super::avx2_panel_kquant::rows_times_tokens as panels;
            use super::{avx2_panel_q4k::Q4K, avx2_panel_q6k::Q6K};
            let run = match weight {
                QuantType::Q4K => Some(panels::<Q4K> as unsafe fn(_, _, _, _, _, _)),
                QuantType::Q6K => Some(panels::<Q6K> as unsafe fn(_, _, _, _, _, _)),
                _ => None,
            };
            if let Some(run) = run {
                let chunk = &acts[t0 * ab..t_end * ab];
                // SAFETY: AVX2/FMA/F16C detected; lengths checked by the
                // entry points, and `out` has room for the chunk's tokens
                // (this fn's contract).
                unsafe { run(nb, w, rows.clone(), chunk, t_end - t0, out.skip_tokens(t0)) };
                continue;
            }
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(kind) = super::avx2_panel::kind_of(weight)
            .filter(|_| panels && isa == Isa::Avx2 && t_end - t0 >= PANEL_MIN_TOKENS)
        {
            // SAFETY: AVX2/FMA/F16C detected; lengths checked by the entry
            // points, side filled for every token of the chunk, and `out` has
            // room for the chunk's tokens (this fn's contract).
            unsafe {
                super::avx2_panel::run(
                    kind,
                    nb,
                    row_bytes(weight, k),
                    w,
                    rows.clone(),
                    &acts[t0 * ab..t_end * ab],
                    ab,
                    &side,
                    t_end - t0,
                    out.skip_tokens(t0),
                )
            };
            continue;
        }
        // Q4_0 in file order (experts, which stay file pages): eight rows a
        // pass, transposed in registers into the interleaved kernel's lanes.
        let mut generic = rows.clone();
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx2 && weight == QuantType::Q4_0 && width >= 8 {
            let whole = rows.start..rows.start + width / 8 * 8;
            // SAFETY: AVX2/FMA/F16C detected; lengths checked by the entry
            // points (`w` holds `rows`, `acts` the chunk's tokens), side
            // filled for every token of the chunk, and `out` has room for
            // the chunk's tokens (this fn's contract).
            unsafe {
                super::avx2_q4_0x8::matmul_file_order(
                    nb,
                    w,
                    whole.clone(),
                    &acts[t0 * ab..t_end * ab],
                    &side,
                    t_end - t0,
                    out.skip_tokens(t0),
                )
            };
            generic = whole.end..rows.end;
        }
        // Row blocks outside, token groups inside, rows innermost: a group's
        // activations stay in L1 while the block's weight rows come from L2.
        let block_rows = (ROW_BLOCK_BYTES / row_bytes(weight, k)).max(1);
        for r0 in generic.clone().step_by(block_rows) {
            let block = r0..(r0 + block_rows).min(generic.end);
            for t in (t0..t_end).step_by(TOKENS_PER_CALL) {
                let n = (t_end - t).min(TOKENS_PER_CALL);
                let mut group: [(&[u8], &[f32]); TOKENS_PER_CALL] = [(&[], &[]); TOKENS_PER_CALL];
                for (i, g) in group.iter_mut().take(n).enumerate() {
                    let at = (t + i - t0) * per_token_side;
                    *g = (act_row(t + i), &side[at..at + per_token_side]);
                }
                // SAFETY: tokens `t..t + n` and columns of `block` lie in the
                // `n_tokens` rows of `rows.len()` that `out` has room for
                // (this fn's contract).
                unsafe {
                    let dst = OutRows::new(out.at(t, r0 - rows.start), out.stride);
                    rows_times_group(isa, weight, k, w, block.clone(), &group[..n], dst);
                }
            }
        }
    }
    SIDE_BUFFER.set(side);
}

thread_local! {
    static SIDE_BUFFER: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `dst` entry (`i`, `r - rows.start`) = weight row `r` · `group[i]`.
///
/// # Safety
/// `dst` has room for `group.len()` rows of `rows.len()`.
unsafe fn rows_times_group(
    isa: Isa,
    ty: QuantType,
    k: usize,
    w: &[u8],
    rows: Range<usize>,
    group: &TokenGroup,
    dst: OutRows,
) {
    let wb = row_bytes(ty, k);
    let nb = k / ty.block_size();
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: AVX2/FMA/F16C were detected; rows `rows` of `w` and every
        // activation row hold nb blocks, side slices have side_len floats and
        // `dst` has group.len() * rows.len() entries (this fn's contract).
        let done = unsafe {
            super::avx2_dispatch::rows_times_group(ty, k, nb, wb, w, rows.clone(), group, dst)
        };
        if done {
            return;
        }
    }
    let _ = isa;
    for r in rows.clone() {
        let w_row = &w[r * wb..(r + 1) * wb];
        for (i, (a, _)) in group.iter().enumerate() {
            let v = scalar_dot(ty, k, nb, w_row, a);
            // SAFETY: `dst` has room for `group.len()` rows of `rows.len()`
            // (this fn's contract).
            unsafe { *dst.at(i, r - rows.start) = v };
        }
    }
}

/// Floats of per-token side information the `isa` kernel for `ty` wants per
/// activation row of `nb` blocks (0: none).
fn side_len(isa: Isa, ty: QuantType, nb: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && activation_type(ty) == QuantType::Q8_0 {
        return nb * super::avx2_legacy::SIDE_PER_BLOCK;
    }
    let _ = (isa, ty, nb);
    0
}

fn fill_side(isa: Isa, nb: usize, act: &[u8], side: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: AVX2 detected; `act` is a Q8_0 row of nb blocks and `side`
        // was sized by side_len.
        unsafe { super::avx2_legacy::q8_0_side(nb, act, side) };
    }
    let _ = (isa, nb, act, side);
}

fn scalar_dot(ty: QuantType, k: usize, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    use QuantType as Q;
    match ty {
        Q::F32 => float_dot::f32_scalar(k, w, a),
        Q::F16 => float_dot::f16_scalar(k, w, a),
        Q::BF16 => float_dot::bf16_scalar(k, w, a),
        Q::Q4_0 => scalar_legacy::q4_0(nb, w, a),
        Q::Q4_1 => scalar_legacy::q4_1(nb, w, a),
        Q::Q5_0 => scalar_legacy::q5_0(nb, w, a),
        Q::Q5_1 => scalar_legacy::q5_1(nb, w, a),
        Q::Q8_0 => scalar_legacy::q8_0(nb, w, a),
        Q::IQ4NL => scalar_legacy::iq4_nl(nb, w, a),
        Q::MXFP4 => scalar_legacy::mxfp4(nb, w, a),
        Q::Q2K => scalar_kquant::q2_k(nb, w, a),
        Q::Q3K => scalar_kquant::q3_k(nb, w, a),
        Q::Q4K => scalar_kquant::q4_k(nb, w, a),
        Q::Q5K => scalar_kquant::q5_k(nb, w, a),
        Q::Q6K => scalar_kquant::q6_k(nb, w, a),
        Q::IQ4XS => scalar_kquant::iq4_xs(nb, w, a),
        Q::IQ2XXS => scalar_iquant::iq2_xxs(nb, w, a),
        Q::IQ2XS => scalar_iquant::iq2_xs(nb, w, a),
        Q::IQ2S => scalar_iquant::iq2_s(nb, w, a),
        Q::IQ3XXS => scalar_iquant::iq3_xxs(nb, w, a),
        Q::IQ3S => scalar_iquant::iq3_s(nb, w, a),
        Q::IQ1S => scalar_iquant::iq1_s(nb, w, a),
        Q::IQ1M => scalar_iquant::iq1_m(nb, w, a),
        Q::TQ1_0 => scalar_iquant::tq1_0(nb, w, a),
        Q::TQ2_0 => scalar_iquant::tq2_0(nb, w, a),
        _ => unreachable!("has_kernel checked by the entry points"),
    }
}
