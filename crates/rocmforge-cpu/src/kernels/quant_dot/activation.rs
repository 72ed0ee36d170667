//! Quantizing activation rows to the weight type's activation type.
//!
//! Q8_0 and Q8_1 follow ggml's x86 SIMD quantizer rather than its scalar
//! reference: the inverse scale is `127 / amax` (not `1 / d`) and rounding is
//! half-to-even. That is what the llama.cpp reference run computed, and it
//! decides the last bit of a few quants per row. Q8_K uses ggml's reference
//! quantizer, as ggml's x86 build does.

use half::{bf16, f16};
use rocmforge_core::quant::{quantize, QuantType};

use super::{activation_type, row_bytes};

/// Quantizes the activation row `x` for weights of type `weight` into `out`,
/// resized to the activation type's row size.
///
/// # Panics
/// If `x.len()` is not a whole number of activation blocks.
pub fn quantize_activation(weight: QuantType, x: &[f32], out: &mut Vec<u8>) {
    out.resize(row_bytes(activation_type(weight), x.len()), 0);
    quantize_activation_into(weight, x, out);
}

/// [`quantize_activation`] into a caller-sized buffer of exactly
/// `activation_type(weight).bytes_for(x.len())` bytes.
///
/// # Panics
/// If `out` has the wrong size or `x.len()` is not a whole number of blocks.
pub fn quantize_activation_into(weight: QuantType, x: &[f32], out: &mut [u8]) {
    let act = activation_type(weight);
    let bytes = row_bytes(act, x.len());
    assert_eq!(
        out.len(),
        bytes,
        "{act} activation row of {} elements",
        x.len()
    );
    match act {
        QuantType::Q8_0 => {
            for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
                let (d, _) = q8_block(xb, &mut ob[2..]);
                ob[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            }
        }
        QuantType::Q8_1 => {
            for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(36)) {
                let (d, sum) = q8_block(xb, &mut ob[4..]);
                ob[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                ob[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
            }
        }
        QuantType::Q8K => {
            // Lengths were checked above, so this cannot fail.
            quantize(QuantType::Q8K, x, out).expect("Q8_K row length checked");
        }
        QuantType::F16 => {
            for (v, ob) in x.iter().zip(out.chunks_exact_mut(2)) {
                ob.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        QuantType::BF16 => {
            for (v, ob) in x.iter().zip(out.chunks_exact_mut(2)) {
                ob.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
            }
        }
        _ => {
            for (v, ob) in x.iter().zip(out.chunks_exact_mut(4)) {
                ob.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// One 32-element 8-bit block: writes the quants, returns the f32 scale
/// (before its f16 rounding, which the Q8_1 sum uses) and the sum of quants.
fn q8_block(x: &[f32], q: &mut [u8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0;
    for (o, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round_ties_even() as i32;
        sum += r;
        *o = r as i8 as u8;
    }
    (d, sum)
}
