//! Device layouts of weights that differ from the file's.
//!
//! ggml's 32-element blocks of 18 bytes (Q4_0) sit at 2-byte alignment, so a
//! kernel that gives each invocation a block reads it in 2-byte pieces, and
//! a subgroup's loads each touch every cache line of its 32 blocks. For the
//! types whose `shaders/quant/` file defines `QUANT_SPLIT_ROWS h`, upload
//! splits every row: the bodies of its blocks (all but the first `h` bytes)
//! first, back to back, then the blocks' `h`-byte headers (the scales). A row
//! keeps its size, so every offset the planner computed stands; kernels find
//! block `ib`'s body at `16 * ib` and its header at `body * nb + h * ib`.

use std::borrow::Cow;

use rocmforge_core::quant::QuantType;

use crate::pipelines::{split_row_header, weight_suffix};

/// The bytes to upload for a weight of type `ty` whose rows are `row_bytes`
/// long: `src` itself, or its rows split (see the module doc).
pub fn device_bytes(ty: QuantType, row_bytes: usize, src: &[u8]) -> Cow<'_, [u8]> {
    let Some(header) = weight_suffix(ty).and_then(split_row_header) else {
        return Cow::Borrowed(src);
    };
    let block = ty.type_size();
    if row_bytes == 0 || !row_bytes.is_multiple_of(block) || !src.len().is_multiple_of(row_bytes) {
        return Cow::Borrowed(src);
    }
    Cow::Owned(split_rows(src, row_bytes, block, header))
}

/// Each `row_bytes` row of `src`, made of `block`-byte blocks, as the blocks'
/// bodies then their `header`-byte headers.
fn split_rows(src: &[u8], row_bytes: usize, block: usize, header: usize) -> Vec<u8> {
    let body = block - header;
    let nb = row_bytes / block;
    let mut out = vec![0u8; src.len()];
    for (row, dst) in src
        .chunks_exact(row_bytes)
        .zip(out.chunks_exact_mut(row_bytes))
    {
        let (bodies, headers) = dst.split_at_mut(nb * body);
        for (ib, b) in row.chunks_exact(block).enumerate() {
            headers[ib * header..(ib + 1) * header].copy_from_slice(&b[..header]);
            bodies[ib * body..(ib + 1) * body].copy_from_slice(&b[header..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_split_into_bodies_then_headers() {
        // Two rows of three 4-byte blocks with 1-byte headers.
        let src: Vec<u8> = (0..24).collect();
        let out = split_rows(&src, 12, 4, 1);
        assert_eq!(
            out,
            [
                1, 2, 3, 5, 6, 7, 9, 10, 11, 0, 4, 8, 13, 14, 15, 17, 18, 19, 21, 22, 23, 12, 16,
                20
            ]
        );
    }

    #[test]
    fn q4_0_rows_are_split_and_other_types_kept() {
        let row = QuantType::Q4_0.type_size() * 4;
        let src: Vec<u8> = (0..2 * row).map(|i| i as u8).collect();
        let out = device_bytes(QuantType::Q4_0, row, &src);
        assert!(matches!(out, Cow::Owned(_)));
        // Block 1's d (bytes 18, 19) lands after the row's 64 quant bytes.
        assert_eq!(&out[64 + 2..64 + 4], &[18, 19]);
        assert_eq!(&out[16..32], &src[20..36]);
        let f32_out = device_bytes(QuantType::F32, 16, &src[..32]);
        assert!(matches!(f32_out, Cow::Borrowed(_)));
    }
}
