//! Dot products of quantized weight rows with quantized activation rows.
//!
//! Like ggml, the CPU backend never dequantizes a weight matrix: each
//! activation row is quantized once to the weight type's *activation type*
//! ([`activation_type`]) and every weight row is then dotted with it block by
//! block in integer arithmetic, with one float multiply-add per block. Using
//! ggml's activation types (and its rounding) keeps our logits close to those
//! of the llama.cpp reference the project is tested against.
//!
//! Kernels exist in two flavours: portable scalar code for every type, and
//! AVX2+FMA (+F16C) code for every type, picked once at run time. The integer
//! sums of both are identical; only the float accumulation order differs.
//! The AVX2 kernels go further and reproduce ggml's float order: the
//! quantized ones are bit-identical to ggml's AVX2 `vec_dot` (tested against
//! ggml's own output) except Q4_0, which trades that for speed (llama.cpp
//! repacks Q4_0 on AVX2 machines, so a row-wise order could not match it
//! anyway); F16/F32 use tinyBLAS's single FMA chain, which is what llama.cpp
//! runs for them. Activation quantization is ggml's x86 code bit for bit.
//!
//! Lengths are checked at the entry points; a mismatch is a bug in the caller
//! (the model loader validates shapes and types) and panics before any kernel
//! touches memory.

mod activation;
#[cfg(target_arch = "x86_64")]
mod avx2_common;
#[cfg(target_arch = "x86_64")]
mod avx2_dispatch;
#[cfg(target_arch = "x86_64")]
mod avx2_iquant;
#[cfg(target_arch = "x86_64")]
mod avx2_kquant;
#[cfg(target_arch = "x86_64")]
mod avx2_legacy;
#[cfg(target_arch = "x86_64")]
mod avx2_low_kquant;
#[cfg(target_arch = "x86_64")]
mod avx2_panel;
#[cfg(target_arch = "x86_64")]
mod avx2_panel_kquant;
#[cfg(target_arch = "x86_64")]
mod avx2_panel_q4k;
#[cfg(target_arch = "x86_64")]
mod avx2_panel_q6k;
#[cfg(target_arch = "x86_64")]
mod avx2_q4_0x8;
mod float_dot;
pub mod q4_0x8;
mod scalar_iquant;
mod scalar_kquant;
mod scalar_legacy;
mod tile;

#[cfg(test)]
mod tests;

use rocmforge_core::quant::QuantType;

pub use activation::{quantize_activation, quantize_activation_into};
pub use tile::{matmul_rows_strided, matmul_tile, Panels};

pub(crate) use super::isa::{detected_isa, Isa};

/// The type an activation row is quantized to before it meets weights of
/// type `weight` (ggml's `vec_dot_type`). Unsupported weight types map to F32;
/// they never reach the kernels because the loader rejects them.
pub fn activation_type(weight: QuantType) -> QuantType {
    use QuantType as T;
    match weight {
        T::Q4_0 | T::Q5_0 | T::Q8_0 | T::IQ4NL | T::MXFP4 => T::Q8_0,
        T::Q4_1 | T::Q5_1 => T::Q8_1,
        T::Q2K | T::Q3K | T::Q4K | T::Q5K | T::Q6K | T::IQ4XS => T::Q8K,
        T::IQ2XXS | T::IQ2XS | T::IQ2S | T::IQ3XXS | T::IQ3S | T::IQ1S | T::IQ1M => T::Q8K,
        T::TQ1_0 | T::TQ2_0 => T::Q8K,
        T::F16 => T::F16,
        T::BF16 => T::BF16,
        _ => T::F32,
    }
}

/// Bytes of one row of `k` elements of `ty`.
///
/// # Panics
/// If `k` is not a whole number of `ty` blocks.
pub(crate) fn row_bytes(ty: QuantType, k: usize) -> usize {
    match ty.bytes_for(k as u64) {
        Some(b) => b as usize,
        None => panic!("row of {k} elements is not a whole number of {ty} blocks"),
    }
}

/// Dot product of one weight row (`k` elements, `ty.bytes_for(k)` bytes) with
/// one activation row quantized by [`quantize_activation`] for the same weight
/// type.
///
/// # Panics
/// If `weight` has no kernel, `k` is not a whole number of blocks or either
/// row is shorter than `k` elements.
pub fn vec_dot(weight: QuantType, k: usize, w_row: &[u8], act: &[u8]) -> f32 {
    vec_dot_with(detected_isa(), weight, k, w_row, act)
}

pub(crate) fn vec_dot_with(isa: Isa, weight: QuantType, k: usize, w_row: &[u8], act: &[u8]) -> f32 {
    let (w_row, act) = checked_rows(weight, k, w_row, act);
    let mut out = [0.0f32; 1];
    // SAFETY: one row of one output.
    unsafe {
        tile::tile_with(
            isa,
            weight,
            k,
            w_row,
            0..1,
            act,
            1,
            tile::OutRows::new(out.as_mut_ptr(), 1),
            tile::Panels::WhenTheyPay,
        )
    };
    out[0]
}

/// The exact-length prefixes of a weight row and an activation row.
fn checked_rows<'a>(
    weight: QuantType,
    k: usize,
    w: &'a [u8],
    act: &'a [u8],
) -> (&'a [u8], &'a [u8]) {
    assert!(
        tile::has_kernel(weight),
        "no dot-product kernel for weight type {weight}"
    );
    let wb = row_bytes(weight, k);
    let ab = row_bytes(activation_type(weight), k);
    assert!(
        w.len() >= wb && act.len() >= ab,
        "{weight} rows of {k} elements need {wb} weight and {ab} activation bytes, got {} and {}",
        w.len(),
        act.len()
    );
    (&w[..wb], &act[..ab])
}
