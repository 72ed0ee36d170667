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

mod float;
mod iq4;
mod kquant_search;
mod legacy;
mod mxfp4;
mod q2k_q3k;
mod q4k_q5k;
mod q6k_q8k;
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
        _ => return Err(QuantError::Unsupported(ty)),
    }
    Ok(())
}

/// Encodes `src` into `dst`, which must be exactly `ty.bytes_for(src.len())`
/// bytes, with ggml's reference quantizer for `ty`.
pub fn quantize(ty: QuantType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    if !has_codec(ty) {
        return Err(QuantError::Unsupported(ty));
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

/// [`quantize`] into a freshly allocated buffer of the right size.
pub fn quantize_to_vec(ty: QuantType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
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
    let mut out = vec![0u8; bytes];
    quantize(ty, src, &mut out)?;
    Ok(out)
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
