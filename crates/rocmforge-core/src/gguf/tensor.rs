//! Tensor infos and the shape rules shared by the reader and the writer.

use super::error::GgufError;
use super::MAX_DIMS;
use crate::quant::QuantType;

/// One tensor as described in the file header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `shape[0]` is the innermost (contiguous) dimension.
    pub shape: Vec<u64>,
    pub ty: QuantType,
    /// Byte offset of the data, relative to the start of the data section.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        // Shapes from a parsed file cannot overflow; saturating keeps a
        // hand-built info from panicking.
        self.shape
            .iter()
            .fold(1u64, |acc, &d| acc.saturating_mul(d))
    }

    /// Elements per row (`shape[0]`; 1 for a scalar).
    pub fn row_len(&self) -> u64 {
        self.shape.first().copied().unwrap_or(1)
    }
}

/// Checks a shape for `ty` and returns its byte size.
///
/// ggml stores dims as i64 and lays blocks out along rows, so: at most
/// [`MAX_DIMS`] dims, none zero, an element count that fits in i64, and a row
/// length that is a whole number of blocks.
pub(crate) fn tensor_n_bytes(name: &str, shape: &[u64], ty: QuantType) -> Result<u64, GgufError> {
    if shape.len() > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: name.to_owned(),
            n_dims: shape.len() as u64,
        });
    }
    if shape.contains(&0) {
        return Err(GgufError::ZeroDim {
            tensor: name.to_owned(),
            shape: shape.to_vec(),
        });
    }
    let overflow = || GgufError::ShapeOverflow {
        tensor: name.to_owned(),
        shape: shape.to_vec(),
    };
    let n_elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(overflow)?;
    let row_len = shape.first().copied().unwrap_or(1);
    let block_size = ty.block_size() as u64;
    if row_len % block_size != 0 {
        return Err(GgufError::PartialBlock {
            tensor: name.to_owned(),
            ty,
            row_len,
            block_size,
        });
    }
    ty.bytes_for(n_elements)
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(overflow)
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on
/// overflow.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(x.checked_add(align - 1)? & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_block_geometry() {
        assert_eq!(
            tensor_n_bytes("t", &[256, 3], QuantType::Q4K).unwrap(),
            3 * 144
        );
        assert_eq!(tensor_n_bytes("t", &[5, 7], QuantType::F32).unwrap(), 140);
        assert_eq!(tensor_n_bytes("t", &[], QuantType::F16).unwrap(), 2);
    }

    #[test]
    fn rejects_bad_shapes() {
        assert!(matches!(
            tensor_n_bytes("t", &[1, 1, 1, 1, 1], QuantType::F32),
            Err(GgufError::TooManyDims { n_dims: 5, .. })
        ));
        assert!(matches!(
            tensor_n_bytes("t", &[4, 0], QuantType::F32),
            Err(GgufError::ZeroDim { .. })
        ));
        assert!(matches!(
            tensor_n_bytes("t", &[1 << 32, 1 << 32], QuantType::F32),
            Err(GgufError::ShapeOverflow { .. })
        ));
        // Fits in i64 as elements, but not as bytes.
        assert!(matches!(
            tensor_n_bytes("t", &[1 << 62], QuantType::F32),
            Err(GgufError::ShapeOverflow { .. })
        ));
        // 64 elements is two Q8_0 blocks in total, but a row of 16 splits a block.
        assert!(matches!(
            tensor_n_bytes("t", &[16, 4], QuantType::Q8_0),
            Err(GgufError::PartialBlock {
                row_len: 16,
                block_size: 32,
                ..
            })
        ));
    }

    #[test]
    fn align_up_rounds_and_detects_overflow() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(u64::MAX - 3, 32), None);
    }
}
