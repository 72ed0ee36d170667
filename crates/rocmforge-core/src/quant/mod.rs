//! Tensor element types and their exact ggml block layouts.
//!
//! Every format here is byte-for-byte the one ggml writes into GGUF files:
//! little-endian, packed, half-precision scales stored as IEEE binary16. The
//! quantizers are the reference (round-to-nearest, no importance matrix) ones,
//! including the K-quant scale searches, so a file written with them reads like
//! one `llama-quantize` produced without an imatrix.
//!
//! Family modules:
//! - [`float`]: F32, F16, BF16.
//! - [`legacy`]: the 32-element formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//! - `q2k_q3k`, `q4k_q5k`, `q6k_q8k`: the 256-element K-quant super-blocks,
//!   with their shared scale searches in `kquant_search`.
//! - `iq4`: the non-linear 4-bit formats IQ4_NL and IQ4_XS.
//! - `mxfp4`: MXFP4, E2M1 floats under a power-of-two block scale.
//! - `iq2`, `iq3`, `iq1`: the lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S,
//!   IQ3_XXS, IQ3_S, IQ1_S and IQ1_M, with their lattices in [`iq_grids`],
//!   the lattice rounding in `iq_lattice` and the IQ2/IQ3 scale search in
//!   `iq_search`.
//! - `ternary`: TQ1_0 and TQ2_0.
//!
//! ggml quantizes IQ2_XXS, IQ2_XS and IQ1_S only with an importance matrix
//! ([`QuantType::needs_importance`]): [`quantize`] refuses them with
//! [`QuantError::NeedsImportance`], and [`quantize_with_importance`] takes
//! one for every i-quant, as `llama-quantize --imatrix` does.

mod float;
mod iq1;
mod iq2;
mod iq3;
mod iq4;
pub mod iq_grids;
mod iq_lattice;
mod iq_search;
mod kquant_search;
mod legacy;
mod mxfp4;
mod q2k_q3k;
mod q4k_q5k;
mod q6k_q8k;
mod ternary;
mod types;

#[cfg(test)]
mod tests;

pub use iq4::IQ4NL_VALUES;
pub use mxfp4::{e8m0_to_f32_half, MXFP4_VALUES};
pub use q2k_q3k::unpack_q3k_scales;
pub use q4k_q5k::unpack_k_scales_mins;
pub use types::QuantType;

/// Errors from converting between f32 and a stored element type.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("no f32 conversion for tensor type {0}")]
    Unsupported(QuantType),
    #[error("{0} is only quantized with an importance matrix (as in ggml); use quantize_with_importance")]
    NeedsImportance(QuantType),
    #[error("{0} has no importance-weighted quantizer (only the i-quants IQ1..IQ3 do)")]
    NoImportanceQuantizer(QuantType),
    #[error("an importance of {importance} values does not fit {elements} {ty} elements: it needs one value per column, a whole number of blocks, and whole rows")]
    ImportanceLength {
        ty: QuantType,
        elements: usize,
        importance: usize,
    },
    #[error("{}", length_message(*ty, *elements, *expected_bytes, *actual_bytes))]
    Length {
        ty: QuantType,
        /// Number of f32 values on the unquantized side.
        elements: usize,
        /// Bytes that many elements take in `ty`; `None` when `elements` is not
        /// a whole number of `ty` blocks.
        expected_bytes: Option<usize>,
        /// Bytes actually given on the quantized side.
        actual_bytes: usize,
    },
}

fn length_message(
    ty: QuantType,
    elements: usize,
    expected: Option<usize>,
    actual: usize,
) -> String {
    match expected {
        Some(expected) => format!(
            "{ty} data for {elements} elements must be {expected} bytes, got {actual} bytes"
        ),
        None => format!(
            "{elements} elements is not a whole number of {ty} blocks ({} elements each)",
            ty.block_size()
        ),
    }
}

/// Element geometry of one conversion, checked before any byte is touched.
fn check_lengths(ty: QuantType, elements: usize, bytes: usize) -> Result<(), QuantError> {
    let expected = ty
        .bytes_for(elements as u64)
        .and_then(|b| usize::try_from(b).ok());
    if expected == Some(bytes) {
        Ok(())
    } else {
        Err(QuantError::Length {
            ty,
            elements,
            expected_bytes: expected,
            actual_bytes: bytes,
        })
    }
}

/// Types [`dequantize`] and [`quantize`] accept: the supported weight types
/// plus the activation-only types Q8_1 and Q8_K.
fn has_codec(ty: QuantType) -> bool {
    ty.is_supported() || matches!(ty, QuantType::Q8_1 | QuantType::Q8K)
}

/// Runs `f` over matching (block bytes, block values) pairs. Callers have
/// checked the lengths, so both sides have the same number of blocks.
fn each_block_decode(ty: QuantType, src: &[u8], dst: &mut [f32], f: impl Fn(&[u8], &mut [f32])) {
    let blocks = src.chunks_exact(ty.type_size());
    for (b, out) in blocks.zip(dst.chunks_exact_mut(ty.block_size())) {
        f(b, out);
    }
}

fn each_block_encode(ty: QuantType, src: &[f32], dst: &mut [u8], f: impl Fn(&[f32], &mut [u8])) {
    let blocks = dst.chunks_exact_mut(ty.type_size());
    for (x, b) in src.chunks_exact(ty.block_size()).zip(blocks) {
        f(x, b);
    }
}

/// Decodes `dst.len()` elements of type `ty` from `src`, which must be exactly
/// `ty.bytes_for(dst.len())` bytes.
pub fn dequantize(ty: QuantType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    if !has_codec(ty) {
        return Err(QuantError::Unsupported(ty));
    }
    check_lengths(ty, dst.len(), src.len())?;
    use QuantType as T;
    match ty {
        T::F32 => float::decode_f32(src, dst),
        T::F16 => float::decode_f16(src, dst),
        T::BF16 => float::decode_bf16(src, dst),
        T::Q4_0 => each_block_decode(ty, src, dst, legacy::decode_q4_0),
        T::Q4_1 => each_block_decode(ty, src, dst, legacy::decode_q4_1),
        T::Q5_0 => each_block_decode(ty, src, dst, legacy::decode_q5_0),
        T::Q5_1 => each_block_decode(ty, src, dst, legacy::decode_q5_1),
        T::Q8_0 => each_block_decode(ty, src, dst, legacy::decode_q8_0),
        T::Q8_1 => each_block_decode(ty, src, dst, legacy::decode_q8_1),
        T::Q2K => each_block_decode(ty, src, dst, q2k_q3k::decode_q2k),
        T::Q3K => each_block_decode(ty, src, dst, q2k_q3k::decode_q3k),
        T::Q4K => each_block_decode(ty, src, dst, q4k_q5k::decode_q4k),
        T::Q5K => each_block_decode(ty, src, dst, q4k_q5k::decode_q5k),
        T::Q6K => each_block_decode(ty, src, dst, q6k_q8k::decode_q6k),
        T::Q8K => each_block_decode(ty, src, dst, q6k_q8k::decode_q8k),
        T::IQ4NL => each_block_decode(ty, src, dst, iq4::decode_iq4nl),
        T::IQ4XS => each_block_decode(ty, src, dst, iq4::decode_iq4xs),
        T::MXFP4 => each_block_decode(ty, src, dst, mxfp4::decode_mxfp4),
        T::IQ2XXS => each_block_decode(ty, src, dst, iq2::decode_iq2xxs),
        T::IQ2XS => each_block_decode(ty, src, dst, iq2::decode_iq2xs),
        T::IQ2S => each_block_decode(ty, src, dst, iq2::decode_iq2s),
        T::IQ3XXS => each_block_decode(ty, src, dst, iq3::decode_iq3xxs),
        T::IQ3S => each_block_decode(ty, src, dst, iq3::decode_iq3s),
        T::IQ1S => each_block_decode(ty, src, dst, iq1::decode_iq1s),
        T::IQ1M => each_block_decode(ty, src, dst, iq1::decode_iq1m),
        T::TQ1_0 => each_block_decode(ty, src, dst, ternary::decode_tq1_0),
        T::TQ2_0 => each_block_decode(ty, src, dst, ternary::decode_tq2_0),
        _ => return Err(QuantError::Unsupported(ty)),
    }
    Ok(())
}

/// Encodes `src` into `dst`, which must be exactly `ty.bytes_for(src.len())`
/// bytes, with ggml's reference quantizer for `ty` (for the i-quants, its
/// quantizer without an importance matrix).
pub fn quantize(ty: QuantType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    if !has_codec(ty) {
        return Err(QuantError::Unsupported(ty));
    }
    if ty.needs_importance() {
        return Err(QuantError::NeedsImportance(ty));
    }
    check_lengths(ty, src.len(), dst.len())?;
    use QuantType as T;
    match ty {
        T::F32 => float::encode_f32(src, dst),
        T::F16 => float::encode_f16(src, dst),
        T::BF16 => float::encode_bf16(src, dst),
        T::Q4_0 => each_block_encode(ty, src, dst, legacy::encode_q4_0),
        T::Q4_1 => each_block_encode(ty, src, dst, legacy::encode_q4_1),
        T::Q5_0 => each_block_encode(ty, src, dst, legacy::encode_q5_0),
        T::Q5_1 => each_block_encode(ty, src, dst, legacy::encode_q5_1),
        T::Q8_0 => each_block_encode(ty, src, dst, legacy::encode_q8_0),
        T::Q8_1 => each_block_encode(ty, src, dst, legacy::encode_q8_1),
        T::Q2K => each_block_encode(ty, src, dst, q2k_q3k::encode_q2k),
        T::Q3K => each_block_encode(ty, src, dst, q2k_q3k::encode_q3k),
        T::Q4K => each_block_encode(ty, src, dst, q4k_q5k::encode_q4k),
        T::Q5K => each_block_encode(ty, src, dst, q4k_q5k::encode_q5k),
        T::Q6K => each_block_encode(ty, src, dst, q6k_q8k::encode_q6k),
        T::Q8K => each_block_encode(ty, src, dst, q6k_q8k::encode_q8k),
        T::IQ4NL => each_block_encode(ty, src, dst, iq4::encode_iq4nl),
        T::IQ4XS => each_block_encode(ty, src, dst, iq4::encode_iq4xs),
        T::MXFP4 => each_block_encode(ty, src, dst, mxfp4::encode_mxfp4),
        T::IQ2S => each_block_encode(ty, src, dst, |x, b| iq2::encode_iq2s(x, None, b)),
        T::IQ3XXS => each_block_encode(ty, src, dst, |x, b| iq3::encode_iq3xxs(x, None, b)),
        T::IQ3S => each_block_encode(ty, src, dst, |x, b| iq3::encode_iq3s(x, None, b)),
        T::IQ1M => each_block_encode(ty, src, dst, |x, b| iq1::encode_iq1m(x, None, b)),
        T::TQ1_0 => each_block_encode(ty, src, dst, ternary::encode_tq1_0),
        T::TQ2_0 => each_block_encode(ty, src, dst, ternary::encode_tq2_0),
        _ => return Err(QuantError::Unsupported(ty)),
    }
    Ok(())
}

/// [`quantize`], except that Q4_K skips ggml's scale search (min/max scales
/// only): a valid file in a fraction of the time, for benchmark models of
/// tens of gigabytes. Values differ from what llama-quantize would write.
pub fn quantize_fast(ty: QuantType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    if ty != QuantType::Q4K {
        return quantize(ty, src, dst);
    }
    check_lengths(ty, src.len(), dst.len())?;
    each_block_encode(ty, src, dst, q4k_q5k::encode_q4k_fast);
    Ok(())
}

/// Encodes `src` like [`quantize`], weighting each column's rounding error
/// by `importance` (one non-negative value per column, as in a llama.cpp
/// imatrix): `src` is rows of `importance.len()` elements. ggml's
/// importance-weighted quantizer, for the i-quants IQ2_XXS, IQ2_XS, IQ2_S,
/// IQ3_XXS, IQ3_S, IQ1_S and IQ1_M.
pub fn quantize_with_importance(
    ty: QuantType,
    src: &[f32],
    importance: &[f32],
    dst: &mut [u8],
) -> Result<(), QuantError> {
    use QuantType as T;
    let encode: fn(&[f32], &[f32], &mut [u8]) = match ty {
        T::IQ2XXS => iq2::encode_iq2xxs,
        T::IQ2XS => iq2::encode_iq2xs,
        T::IQ2S => |x, w, b| iq2::encode_iq2s(x, Some(w), b),
        T::IQ3XXS => |x, w, b| iq3::encode_iq3xxs(x, Some(w), b),
        T::IQ3S => |x, w, b| iq3::encode_iq3s(x, Some(w), b),
        T::IQ1S => iq1::encode_iq1s,
        T::IQ1M => |x, w, b| iq1::encode_iq1m(x, Some(w), b),
        _ => return Err(QuantError::NoImportanceQuantizer(ty)),
    };
    let cols = importance.len();
    if cols == 0 || !cols.is_multiple_of(ty.block_size()) || !src.len().is_multiple_of(cols) {
        return Err(QuantError::ImportanceLength {
            ty,
            elements: src.len(),
            importance: cols,
        });
    }
    check_lengths(ty, src.len(), dst.len())?;
    let (bs, ts) = (ty.block_size(), ty.type_size());
    for (row, out) in src
        .chunks_exact(cols)
        .zip(dst.chunks_exact_mut(cols / bs * ts))
    {
        let blocks = row.chunks_exact(bs).zip(out.chunks_exact_mut(ts));
        for ((x, b), w) in blocks.zip(importance.chunks_exact(bs)) {
            encode(x, w, b);
        }
    }
    Ok(())
}

/// [`quantize`] into a freshly allocated buffer of the right size.
pub fn quantize_to_vec(ty: QuantType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    let mut out = output_for(ty, src)?;
    quantize(ty, src, &mut out)?;
    Ok(out)
}

/// [`quantize_with_importance`] into a freshly allocated buffer.
pub fn quantize_to_vec_with_importance(
    ty: QuantType,
    src: &[f32],
    importance: &[f32],
) -> Result<Vec<u8>, QuantError> {
    let mut out = output_for(ty, src)?;
    quantize_with_importance(ty, src, importance, &mut out)?;
    Ok(out)
}

fn output_for(ty: QuantType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    if !has_codec(ty) {
        return Err(QuantError::Unsupported(ty));
    }
    let bytes = ty
        .bytes_for(src.len() as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or(QuantError::Length {
            ty,
            elements: src.len(),
            expected_bytes: None,
            actual_bytes: 0,
        })?;
    Ok(vec![0u8; bytes])
}

/// Reads the little-endian binary16 at `b[at..at + 2]`.
#[inline(always)]
fn read_f16(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Stores `v` rounded to binary16 (nearest-even, as ggml does) and returns the
/// stored value, which is what decoding will see.
#[inline(always)]
fn write_f16(b: &mut [u8], at: usize, v: f32) -> f32 {
    let h = half::f16::from_f32(v);
    b[at..at + 2].copy_from_slice(&h.to_bits().to_le_bytes());
    h.to_f32()
}

/// ggml's `nearest_int`: round half to even, which is what its float magic-number
/// trick computes. NaN maps to 0 so callers' clamps keep indices in range.
#[inline(always)]
fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}
