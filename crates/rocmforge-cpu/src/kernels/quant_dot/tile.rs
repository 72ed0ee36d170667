//! The matrix × matrix tile loop and the scalar dispatch.

use std::ops::Range;

use rocmforge_core::quant::QuantType;

use super::{
    activation_type, detected_isa, float_dot, row_bytes, scalar_kquant, scalar_legacy, Isa,
};

/// Tokens one kernel pass serves: each weight block is unpacked once for all
/// of them. Four keeps accumulators and unpacked weights within the 16 vector
/// registers.
pub(super) const TOKENS_PER_CALL: usize = 4;

/// Activation bytes one token chunk may span: together with the tile's weight
/// rows it should stay in L2 while every row passes over it.
const ACT_CHUNK_BYTES: usize = 256 * 1024;

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
            | Q::Q2K
            | Q::Q3K
            | Q::Q4K
            | Q::Q5K
            | Q::Q6K
            | Q::IQ4XS
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
    assert!(
        has_kernel(weight),
        "no dot-product kernel for weight type {weight}"
    );
    let wb = row_bytes(weight, k);
    let ab = row_bytes(activation_type(weight), k);
    let width = rows.len();
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
    assert!(
        n_tokens.checked_mul(width).is_some_and(|n| n <= out.len()),
        "output of {} floats for {n_tokens} x {width}",
        out.len()
    );
    tile_with(detected_isa(), weight, k, w, rows, acts, n_tokens, out);
}

/// [`matmul_tile`] on a given instruction set, lengths already checked.
#[allow(clippy::too_many_arguments)]
pub(super) fn tile_with(
    isa: Isa,
    weight: QuantType,
    k: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    n_tokens: usize,
    out: &mut [f32],
) {
    let width = rows.len();
    if k == 0 || width == 0 {
        out[..n_tokens * width].fill(0.0);
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
        // Token groups outside, rows inside: a group's activations stay in L1
        // while the tile's weight rows (tens of KiB) come from L2.
        for t in (t0..t_end).step_by(TOKENS_PER_CALL) {
            let n = (t_end - t).min(TOKENS_PER_CALL);
            let mut group: [(&[u8], &[f32]); TOKENS_PER_CALL] = [(&[], &[]); TOKENS_PER_CALL];
            for (i, g) in group.iter_mut().take(n).enumerate() {
                let at = (t + i - t0) * per_token_side;
                *g = (act_row(t + i), &side[at..at + per_token_side]);
            }
            let dst = &mut out[t * width..(t + n) * width];
            rows_times_group(isa, weight, k, w, rows.clone(), &group[..n], dst);
        }
    }
    SIDE_BUFFER.set(side);
}

thread_local! {
    static SIDE_BUFFER: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `dst[i * rows.len() + (r - rows.start)]` = weight row `r` · `group[i]`.
fn rows_times_group(
    isa: Isa,
    ty: QuantType,
    k: usize,
    w: &[u8],
    rows: Range<usize>,
    group: &TokenGroup,
    dst: &mut [f32],
) {
    let wb = row_bytes(ty, k);
    let nb = k / ty.block_size();
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: AVX2/FMA/F16C were detected; rows `rows` of `w` and every
        // activation row hold nb blocks, side slices have side_len floats and
        // `dst` has group.len() * rows.len() entries.
        let done = unsafe {
            super::avx2_dispatch::rows_times_group(ty, k, nb, wb, w, rows.clone(), group, dst)
        };
        if done {
            return;
        }
    }
    let _ = isa;
    let width = rows.len();
    for r in rows.clone() {
        let w_row = &w[r * wb..(r + 1) * wb];
        for (i, (a, _)) in group.iter().enumerate() {
            dst[i * width + r - rows.start] = scalar_dot(ty, k, nb, w_row, a);
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
        Q::Q2K => scalar_kquant::q2_k(nb, w, a),
        Q::Q3K => scalar_kquant::q3_k(nb, w, a),
        Q::Q4K => scalar_kquant::q4_k(nb, w, a),
        Q::Q5K => scalar_kquant::q5_k(nb, w, a),
        Q::Q6K => scalar_kquant::q6_k(nb, w, a),
        Q::IQ4XS => scalar_kquant::iq4_xs(nb, w, a),
        _ => unreachable!("has_kernel checked by the entry points"),
    }
}
