//! Q4_0 weights interleaved eight rows at a time ("Q4_0x8"), the layout the
//! CPU backend repacks Q4_0 matrices into at load on AVX2 machines.
//!
//! In file order each row is a run of 18-byte blocks (f16 scale, 16 bytes
//! of nibbles), and a kernel must reduce every (row, block) pair on its own.
//! Here block `b` of rows `8g..8g + 8` becomes one 144-byte group: the eight
//! rows' f16 scales (16 bytes, one vector conversion), then four 32-byte
//! chunks where lane `i` (4 bytes) of chunk `c` holds row `i`'s nibble bytes
//! `4c..4c + 4`. One broadcast of four activation quants then multiplies
//! eight rows at once and the scales apply with one FMA (see
//! `avx2_q4_0x8`). The group is exactly the eight blocks it replaces, so a
//! repacked matrix keeps its size.

use std::ops::Range;

use half::f16;
use rocmforge_core::quant::QuantType;

/// Rows interleaved together.
pub const ROWS: usize = 8;
/// Bytes of one interleaved block group: eight Q4_0 blocks.
pub const GROUP_BYTES: usize = ROWS * Q4_0_BLOCK;
const Q4_0_BLOCK: usize = 18;

/// Whether a `ty` matrix of `rows` rows of `k` elements can be interleaved,
/// and this CPU has the kernels that read the result.
pub fn can_pack(ty: QuantType, rows: usize, k: usize) -> bool {
    ty == QuantType::Q4_0
        && rows > 0
        && rows.is_multiple_of(ROWS)
        && k > 0
        && k.is_multiple_of(32)
        && super::detected_isa() != super::Isa::Scalar
}

/// Writes the Q4_0 matrix `src` (`rows` × `k`, file order) into `dst` (the
/// same size) in the interleaved layout.
///
/// # Panics
/// If the sizes disagree or `rows`/`k` cannot be packed.
pub fn pack(src: &[u8], rows: usize, k: usize, dst: &mut [u8]) {
    let nb = k / 32;
    let row_bytes = nb * Q4_0_BLOCK;
    assert!(rows.is_multiple_of(ROWS) && k.is_multiple_of(32));
    assert_eq!(src.len(), rows * row_bytes, "Q4_0 matrix size");
    assert_eq!(dst.len(), src.len(), "interleaved matrix size");
    let groups = src.chunks_exact(ROWS * row_bytes);
    for (rows8, out) in groups.zip(dst.chunks_exact_mut(ROWS * row_bytes)) {
        for (b, grp) in out.chunks_exact_mut(GROUP_BYTES).enumerate() {
            for i in 0..ROWS {
                let blk = &rows8[i * row_bytes + b * Q4_0_BLOCK..][..Q4_0_BLOCK];
                grp[2 * i..2 * i + 2].copy_from_slice(&blk[..2]);
                for c in 0..4 {
                    let at = 16 + 32 * c + 4 * i;
                    grp[at..at + 4].copy_from_slice(&blk[2 + 4 * c..6 + 4 * c]);
                }
            }
        }
    }
}

/// Row `row` of an interleaved matrix of `k` columns, dequantized into
/// `out` (`k` floats): the embedding lookup of a tied output matrix.
///
/// # Panics
/// If `row` is outside `data` or `out` is not `k` long.
pub fn dequantize_row(data: &[u8], k: usize, row: usize, out: &mut [f32]) {
    let nb = k / 32;
    assert_eq!(out.len(), nb * 32, "output row length");
    let (g, i) = (row / ROWS, row % ROWS);
    let groups = &data[g * nb * GROUP_BYTES..(g + 1) * nb * GROUP_BYTES];
    for (b, dst) in out.chunks_exact_mut(32).enumerate() {
        let grp = &groups[b * GROUP_BYTES..(b + 1) * GROUP_BYTES];
        let d = f16::from_le_bytes([grp[2 * i], grp[2 * i + 1]]).to_f32();
        for c in 0..4 {
            let at = 16 + 32 * c + 4 * i;
            for (j, &byte) in grp[at..at + 4].iter().enumerate() {
                dst[4 * c + j] = ((byte & 0x0F) as i32 - 8) as f32 * d;
                dst[16 + 4 * c + j] = ((byte >> 4) as i32 - 8) as f32 * d;
            }
        }
    }
}

/// [`super::matmul_rows_strided`] for an interleaved Q4_0 matrix `w` of `k`
/// columns: token `t` · row `r` goes to `out + t * out_stride + (r -
/// rows.start)`. `acts` holds `n_tokens` Q8_0 rows from
/// [`super::quantize_activation`].
///
/// # Safety
/// As [`super::matmul_rows_strided`]: every output row `t < n_tokens` must be
/// valid for `rows.len()` writes by this call alone.
///
/// # Panics
/// If `rows` does not start and end on multiples of eight, or `w` / `acts`
/// are too short.
pub unsafe fn matmul_rows_strided(
    k: usize,
    w: &[u8],
    rows: Range<usize>,
    acts: &[u8],
    n_tokens: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let nb = k / 32;
    assert!(k.is_multiple_of(32), "row of {k} elements");
    assert!(
        rows.start.is_multiple_of(ROWS) && rows.end.is_multiple_of(ROWS),
        "interleaved rows {rows:?} must be whole groups of {ROWS}"
    );
    assert!(
        rows.end / ROWS * nb * GROUP_BYTES <= w.len(),
        "weights too short"
    );
    assert!(n_tokens * nb * 34 <= acts.len(), "activations too short");
    assert!(out_stride >= rows.len(), "output stride");
    #[cfg(target_arch = "x86_64")]
    if super::detected_isa() == super::Isa::Avx2 {
        // SAFETY: AVX2/FMA/F16C detected; the lengths of `w` and `acts` were
        // checked above, and every output row is valid for `rows.len()`
        // writes (this fn's contract).
        unsafe { super::avx2_q4_0x8::matmul(nb, w, rows, acts, n_tokens, out, out_stride) };
        return;
    }
    unreachable!("Q4_0 is only interleaved on CPUs with its kernels (see can_pack)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocmforge_core::quant::{dequantize, quantize_to_vec};

    #[test]
    fn packed_rows_dequantize_like_the_original() {
        let (rows, k) = (16, 96);
        let x = crate::kernels::test_noise(rows * k, 7, 2.0);
        let plain = quantize_to_vec(QuantType::Q4_0, &x).unwrap();
        let mut packed = vec![0; plain.len()];
        pack(&plain, rows, k, &mut packed);
        assert_ne!(packed, plain, "packing moved nothing");
        let rb = plain.len() / rows;
        for r in 0..rows {
            let mut want = vec![0.0; k];
            dequantize(QuantType::Q4_0, &plain[r * rb..(r + 1) * rb], &mut want).unwrap();
            let mut got = vec![0.0; k];
            dequantize_row(&packed, k, r, &mut got);
            assert_eq!(got, want, "row {r}");
        }
    }

    #[test]
    fn interleaved_matmul_matches_row_dots() {
        if !can_pack(QuantType::Q4_0, 8, 32) {
            return;
        }
        for k in [32, 96, 896] {
            let rows = 24;
            let x = crate::kernels::test_noise(rows * k, k as u64, 1.5);
            let plain = quantize_to_vec(QuantType::Q4_0, &x).unwrap();
            let mut packed = vec![0; plain.len()];
            pack(&plain, rows, k, &mut packed);
            let rb = plain.len() / rows;
            for n in [1, 2, 3, 4, 5, 9] {
                let mut acts = Vec::new();
                let mut row = Vec::new();
                for t in 0..n {
                    let y = crate::kernels::test_noise(k, 100 + t as u64, 1.0);
                    super::super::quantize_activation(QuantType::Q4_0, &y, &mut row);
                    acts.extend_from_slice(&row);
                }
                let ab = row.len();
                let (range, stride) = (8..24, 20);
                let mut out = vec![f32::NAN; n * stride];
                // SAFETY: n rows of `stride` >= 16 floats.
                unsafe {
                    matmul_rows_strided(
                        k,
                        &packed,
                        range.clone(),
                        &acts,
                        n,
                        out.as_mut_ptr(),
                        stride,
                    )
                };
                for t in 0..n {
                    let a = &acts[t * ab..(t + 1) * ab];
                    for r in range.clone() {
                        let w = &plain[r * rb..(r + 1) * rb];
                        let want = super::super::vec_dot(QuantType::Q4_0, k, w, a);
                        let got = out[t * stride + r - range.start];
                        // Blocks summed in another float order; see the tile
                        // test for the bound.
                        let bound = 1e-6 * (k as f32) * 16.0;
                        assert!(
                            (got - want).abs() <= bound,
                            "k={k} n={n} t={t} r={r}: {got} vs {want}"
                        );
                    }
                    assert!(out[t * stride + 16..(t + 1) * stride]
                        .iter()
                        .all(|v| v.is_nan()));
                }
            }
        }
    }
}
