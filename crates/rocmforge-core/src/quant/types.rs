//! The ggml tensor type table: ids as stored in GGUF, block geometry and names.
//!
//! Every type ggml has ever assigned an id to is listed, so that a file using a
//! type we cannot compute with still parses, and the error names the tensor and
//! the type at model load instead of "unknown type 16".

use std::fmt;

/// A ggml tensor element type (`ggml_type`).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    IQ2XXS,
    IQ2XS,
    IQ3XXS,
    IQ1S,
    IQ4NL,
    IQ3S,
    IQ2S,
    IQ4XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
}

/// (type, ggml id, name, elements per block, bytes per block)
const TABLE: &[(QuantType, u32, &str, usize, usize)] = &[
    (QuantType::F32, 0, "F32", 1, 4),
    (QuantType::F16, 1, "F16", 1, 2),
    (QuantType::Q4_0, 2, "Q4_0", 32, 18),
    (QuantType::Q4_1, 3, "Q4_1", 32, 20),
    (QuantType::Q5_0, 6, "Q5_0", 32, 22),
    (QuantType::Q5_1, 7, "Q5_1", 32, 24),
    (QuantType::Q8_0, 8, "Q8_0", 32, 34),
    (QuantType::Q8_1, 9, "Q8_1", 32, 36),
    (QuantType::Q2K, 10, "Q2_K", 256, 84),
    (QuantType::Q3K, 11, "Q3_K", 256, 110),
    (QuantType::Q4K, 12, "Q4_K", 256, 144),
    (QuantType::Q5K, 13, "Q5_K", 256, 176),
    (QuantType::Q6K, 14, "Q6_K", 256, 210),
    (QuantType::Q8K, 15, "Q8_K", 256, 292),
    (QuantType::IQ2XXS, 16, "IQ2_XXS", 256, 66),
    (QuantType::IQ2XS, 17, "IQ2_XS", 256, 74),
    (QuantType::IQ3XXS, 18, "IQ3_XXS", 256, 98),
    (QuantType::IQ1S, 19, "IQ1_S", 256, 50),
    (QuantType::IQ4NL, 20, "IQ4_NL", 32, 18),
    (QuantType::IQ3S, 21, "IQ3_S", 256, 110),
    (QuantType::IQ2S, 22, "IQ2_S", 256, 82),
    (QuantType::IQ4XS, 23, "IQ4_XS", 256, 136),
    (QuantType::I8, 24, "I8", 1, 1),
    (QuantType::I16, 25, "I16", 1, 2),
    (QuantType::I32, 26, "I32", 1, 4),
    (QuantType::I64, 27, "I64", 1, 8),
    (QuantType::F64, 28, "F64", 1, 8),
    (QuantType::IQ1M, 29, "IQ1_M", 256, 56),
    (QuantType::BF16, 30, "BF16", 1, 2),
    (QuantType::TQ1_0, 34, "TQ1_0", 256, 54),
    (QuantType::TQ2_0, 35, "TQ2_0", 256, 66),
    (QuantType::MXFP4, 39, "MXFP4", 32, 17),
];

impl QuantType {
    fn row(self) -> &'static (QuantType, u32, &'static str, usize, usize) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every variant is in the table")
    }

    /// The type for a ggml id read from a file; `None` for ids ggml never assigned
    /// or has since removed.
    pub fn from_id(id: u32) -> Option<Self> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// Parses a ggml type name such as `Q4_K` or `q8_0` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        TABLE
            .iter()
            .find(|r| r.2.eq_ignore_ascii_case(name))
            .map(|r| r.0)
    }

    pub fn id(self) -> u32 {
        self.row().1
    }

    /// ggml's name for the type, as llama.cpp prints it.
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Elements per block (1 for plain float and integer types).
    pub fn block_size(self) -> usize {
        self.row().3
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.row().4
    }

    /// Bytes taken by `n_elements` values, or `None` if `n_elements` is not a whole
    /// number of blocks or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size() as u64)
    }

    /// Types this project can dequantize and compute with. Everything else is
    /// rejected at model load with the tensor's name.
    pub fn is_supported(self) -> bool {
        matches!(
            self,
            QuantType::F32
                | QuantType::F16
                | QuantType::BF16
                | QuantType::Q4_0
                | QuantType::Q4_1
                | QuantType::Q5_0
                | QuantType::Q5_1
                | QuantType::Q8_0
                | QuantType::Q2K
                | QuantType::Q3K
                | QuantType::Q4K
                | QuantType::Q5K
                | QuantType::Q6K
                | QuantType::IQ4NL
                | QuantType::IQ4XS
                | QuantType::MXFP4
                | QuantType::IQ2XXS
                | QuantType::IQ2XS
                | QuantType::IQ2S
                | QuantType::IQ3XXS
                | QuantType::IQ3S
                | QuantType::IQ1S
                | QuantType::IQ1M
                | QuantType::TQ1_0
                | QuantType::TQ2_0
        )
    }

    /// Whether ggml quantizes this type only with an importance matrix
    /// (`ggml_quantize_requires_imatrix`): its IQ2_XXS, IQ2_XS and IQ1_S
    /// quantizers have no fallback weights.
    pub fn needs_importance(self) -> bool {
        matches!(self, QuantType::IQ2XXS | QuantType::IQ2XS | QuantType::IQ1S)
    }

    /// All types, in ggml id order.
    pub fn all() -> impl Iterator<Item = QuantType> {
        TABLE.iter().map(|r| r.0)
    }

    /// The types of `is_supported`, in ggml id order.
    pub fn supported() -> impl Iterator<Item = QuantType> {
        QuantType::all().filter(|t| t.is_supported())
    }
}

impl fmt::Display for QuantType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for t in QuantType::all() {
            assert_eq!(QuantType::from_id(t.id()), Some(t));
            assert_eq!(QuantType::from_name(t.name()), Some(t));
        }
        assert_eq!(QuantType::from_id(4), None, "Q4_2 was removed from ggml");
        assert_eq!(QuantType::from_name("q4_k"), Some(QuantType::Q4K));
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(QuantType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(QuantType::Q4K.bytes_for(256), Some(144));
        assert_eq!(QuantType::Q4K.bytes_for(100), None);
        assert_eq!(QuantType::F32.bytes_for(u64::MAX), None);
    }
}
