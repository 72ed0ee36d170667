//! Kernel dispatch and the matrix × matrix tile loop.

use std::ops::Range;

use rocmforge_core::quant::QuantType;

use super::{activation_type, detected_isa, float_dot, row_bytes, scalar_kquant, scalar_legacy, Isa};

/// Tokens one kernel call serves: each weight block is unpacked once for all
/// of them. Four keeps accumulators and unpacked weights within the 16 vector
/// registers.
const TOKENS_PER_CALL: usize = 4;

/// Activation bytes one token chunk of a tile may span: with the tile's
/// weight rows it should stay in L2 while every row passes over it.
const ACT_CHUNK_BYTES: usize = 256 * 1024;

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

/// `out[t] = w_row · acts[t]`. Rows have exactly the lengths of `k` elements
/// (checked by the public entry points).
pub(super) fn dot_tokens(
    isa: Isa,
    ty: QuantType,
    k: usize,
    w_row: &[u8],
    acts: &[&[u8]],
    out: &mut [f32],
) {
    let nb = k / ty.block_size();
    for (chunk, res) in acts.chunks(TOKENS_PER_CALL).zip(out.chunks_mut(TOKENS_PER_CALL)) {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx2 {
            // SAFETY: AVX2/FMA/F16C were detected; rows hold nb blocks.
            let done = unsafe { avx2::dot_chunk(ty, k, nb, w_row, chunk, res) };
            if done {
                continue;
            }
        }
        let _ = isa;
        for (a, r) in chunk.iter().zip(res.iter_mut()) {
            *r = scalar_dot(ty, k, nb, w_row, a);
        }
    }
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use rocmforge_core::quant::QuantType;

    use super::super::avx2_kquant::{q45_k, q6_k};
    use super::super::avx2_legacy::{offset_q8_1, signed_q8_0, IQ4_NL, Q4_0, Q5_0, Q8_0};
    use super::super::avx2_low_kquant::{iq4_xs, q23_k};
    use super::super::float_dot::avx2::{dot as float_dot, Elem};

    /// Runs the AVX2 kernel for `ty` on up to four tokens; `false` if there
    /// is none.
    ///
    /// # Safety
    /// AVX2, FMA and F16C available; `w` holds `nb` blocks of `ty`, each of
    /// `acts` `nb` activation blocks.
    pub(super) unsafe fn dot_chunk(
        ty: QuantType,
        k: usize,
        nb: usize,
        w: &[u8],
        acts: &[&[u8]],
        out: &mut [f32],
    ) -> bool {
        let elem = match ty {
            QuantType::F32 => Some(Elem::F32),
            QuantType::F16 => Some(Elem::F16),
            QuantType::BF16 => Some(Elem::BF16),
            _ => None,
        };
        if let Some(e) = elem {
            for (a, o) in acts.iter().zip(out.iter_mut()) {
                *o = float_dot(e, k, w, a);
            }
            return true;
        }
        match acts.len() {
            1 => run::<1>(ty, nb, w, [acts[0]], out),
            2 => run::<2>(ty, nb, w, [acts[0], acts[1]], out),
            3 => run::<3>(ty, nb, w, [acts[0], acts[1], acts[2]], out),
            4 => run::<4>(ty, nb, w, [acts[0], acts[1], acts[2], acts[3]], out),
            _ => unreachable!("chunks of at most four tokens"),
        }
    }

    #[inline]
    unsafe fn run<const T: usize>(
        ty: QuantType,
        nb: usize,
        w: &[u8],
        a: [&[u8]; T],
        out: &mut [f32],
    ) -> bool {
        use QuantType as Q;
        let r: [f32; T] = match ty {
            Q::Q4_0 => signed_q8_0::<Q4_0, T>(nb, w, a),
            Q::Q5_0 => signed_q8_0::<Q5_0, T>(nb, w, a),
            Q::Q8_0 => signed_q8_0::<Q8_0, T>(nb, w, a),
            Q::IQ4NL => signed_q8_0::<IQ4_NL, T>(nb, w, a),
            Q::Q4_1 => offset_q8_1::<false, T>(nb, w, a),
            Q::Q5_1 => offset_q8_1::<true, T>(nb, w, a),
            Q::Q2K => q23_k::<false, T>(nb, w, a),
            Q::Q3K => q23_k::<true, T>(nb, w, a),
            Q::Q4K => q45_k::<false, T>(nb, w, a),
            Q::Q5K => q45_k::<true, T>(nb, w, a),
            Q::Q6K => q6_k::<T>(nb, w, a),
            Q::IQ4XS => iq4_xs::<T>(nb, w, a),
            _ => return false,
        };
        out[..T].copy_from_slice(&r);
        true
    }
}

/// `out[t * rows.len() + (r - rows.start)]` = weight row `r` · activation row
/// `t`, for `r` in `rows` and `t` in `0..n_tokens`.
///
/// `w` is the whole weight matrix (rows of `weight.bytes_for(k)` bytes) and
/// `acts` holds `n_tokens` activation rows from [`super::quantize_activation`]
/// back to back. Tokens are walked in chunks whose activations fit in L2, and
/// within a chunk every weight row is dotted with four tokens per pass, so a
/// weight row is read from memory once per chunk and unpacked once per four
/// tokens.
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
    assert!(has_kernel(weight), "no dot-product kernel for weight type {weight}");
    let wb = row_bytes(weight, k);
    let ab = row_bytes(activation_type(weight), k);
    let width = rows.len();
    let w_needed = rows.end.checked_mul(wb);
    let a_needed = n_tokens.checked_mul(ab);
    assert!(
        w_needed.is_some_and(|n| n <= w.len()),
        "weight rows up to {} of {wb} bytes need more than the {} given",
        rows.end,
        w.len()
    );
    assert!(
        a_needed.is_some_and(|n| n <= acts.len()),
        "{n_tokens} activation rows of {ab} bytes need more than the {} given",
        acts.len()
    );
    assert!(
        out.len() >= n_tokens * width,
        "output of {} floats for {n_tokens} x {width}",
        out.len()
    );
    if k == 0 {
        out[..n_tokens * width].fill(0.0);
        return;
    }

    let isa = detected_isa();
    let chunk = (ACT_CHUNK_BYTES / ab).max(1).next_multiple_of(TOKENS_PER_CALL);
    let act_row = |t: usize| &acts[t * ab..(t + 1) * ab];
    for t0 in (0..n_tokens).step_by(chunk) {
        let t_end = (t0 + chunk).min(n_tokens);
        for r in rows.clone() {
            let w_row = &w[r * wb..(r + 1) * wb];
            let col = r - rows.start;
            let mut t = t0;
            while t < t_end {
                let n = (t_end - t).min(TOKENS_PER_CALL);
                let mut group: [&[u8]; TOKENS_PER_CALL] = [&[]; TOKENS_PER_CALL];
                for (i, g) in group.iter_mut().take(n).enumerate() {
                    *g = act_row(t + i);
                }
                let mut res = [0.0f32; TOKENS_PER_CALL];
                dot_tokens(isa, weight, k, w_row, &group[..n], &mut res[..n]);
                for (i, v) in res.iter().take(n).enumerate() {
                    out[(t + i) * width + col] = *v;
                }
                t += n;
            }
        }
    }
}
