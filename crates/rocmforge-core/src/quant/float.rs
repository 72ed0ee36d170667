//! Unblocked float types. Each element is stored on its own, little-endian:
//! F32 (4 bytes), F16 (IEEE binary16, 2 bytes) and BF16 (the top half of an
//! f32, 2 bytes: same exponent range as f32, 8 bits of mantissa).

use half::{bf16, f16};

pub(super) fn decode_f32(src: &[u8], dst: &mut [f32]) {
    for (b, out) in src.chunks_exact(4).zip(dst) {
        *out = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub(super) fn encode_f32(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

pub(super) fn decode_f16(src: &[u8], dst: &mut [f32]) {
    for (b, out) in src.chunks_exact(2).zip(dst) {
        *out = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

/// Round to nearest even, overflow to infinity, as ggml's conversion.
pub(super) fn encode_f16(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f16::from_f32(*v).to_bits().to_le_bytes());
    }
}

pub(super) fn decode_bf16(src: &[u8], dst: &mut [f32]) {
    for (b, out) in src.chunks_exact(2).zip(dst) {
        // bf16 is exactly the high half of an f32, so widening is a shift.
        *out = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
    }
}

/// Round to nearest even on the dropped 16 bits (NaN stays NaN), as ggml.
pub(super) fn encode_bf16(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&bf16::from_f32(*v).to_bits().to_le_bytes());
    }
}
