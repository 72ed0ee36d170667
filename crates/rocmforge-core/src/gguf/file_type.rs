//! `general.file_type`: the quantization a file was made with, as llama.cpp
//! numbers it (`llama_ftype`), with its two spellings: llama-quantize's
//! (`Q4_K_M`, what users call a file) and `llama_ftype_name`'s (`Q4_K -
//! Medium`, what llama-bench writes in `model_type`). The majority tensor
//! type does not say it: a Q4_K_M file is mostly Q4_K with Q6_K mixed in,
//! and a Q4_K_S one too.

/// The metadata key.
pub const FILE_TYPE_KEY: &str = "general.file_type";

/// (id, llama-quantize's name, llama.cpp's `llama_ftype_name`).
const NAMES: &[(u32, &str, &str)] = &[
    (0, "F32", "all F32"),
    (1, "F16", "F16"),
    (2, "Q4_0", "Q4_0"),
    (3, "Q4_1", "Q4_1"),
    (7, "Q8_0", "Q8_0"),
    (8, "Q5_0", "Q5_0"),
    (9, "Q5_1", "Q5_1"),
    (10, "Q2_K", "Q2_K - Medium"),
    (11, "Q3_K_S", "Q3_K - Small"),
    (12, "Q3_K_M", "Q3_K - Medium"),
    (13, "Q3_K_L", "Q3_K - Large"),
    (14, "Q4_K_S", "Q4_K - Small"),
    (15, "Q4_K_M", "Q4_K - Medium"),
    (16, "Q5_K_S", "Q5_K - Small"),
    (17, "Q5_K_M", "Q5_K - Medium"),
    (18, "Q6_K", "Q6_K"),
    (19, "IQ2_XXS", "IQ2_XXS - 2.0625 bpw"),
    (20, "IQ2_XS", "IQ2_XS - 2.3125 bpw"),
    (21, "Q2_K_S", "Q2_K - Small"),
    (22, "IQ3_XS", "IQ3_XS - 3.3 bpw"),
    (23, "IQ3_XXS", "IQ3_XXS - 3.0625 bpw"),
    (24, "IQ1_S", "IQ1_S - 1.5625 bpw"),
    (25, "IQ4_NL", "IQ4_NL - 4.5 bpw"),
    (26, "IQ3_S", "IQ3_S - 3.4375 bpw"),
    (27, "IQ3_M", "IQ3_S mix - 3.66 bpw"),
    (28, "IQ2_S", "IQ2_S - 2.5 bpw"),
    (29, "IQ2_M", "IQ2_M - 2.7 bpw"),
    (30, "IQ4_XS", "IQ4_XS - 4.25 bpw"),
    (31, "IQ1_M", "IQ1_M - 1.75 bpw"),
    (32, "BF16", "BF16"),
    (36, "TQ1_0", "TQ1_0 - 1.69 bpw ternary"),
    (37, "TQ2_0", "TQ2_0 - 2.06 bpw ternary"),
    (38, "MXFP4_MOE", "MXFP4 MoE"),
    (39, "NVFP4", "NVFP4"),
    (40, "Q1_0", "Q1_0"),
    (41, "Q2_0", "Q2_0"),
];

/// A `general.file_type` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileType(pub u32);

impl FileType {
    /// The file's type, if its metadata says.
    pub fn of(file: &super::GgufFile) -> Option<FileType> {
        file.get(FILE_TYPE_KEY)
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
            .map(FileType)
    }

    fn entry(self) -> Option<&'static (u32, &'static str, &'static str)> {
        NAMES.iter().find(|(id, _, _)| *id == self.0)
    }

    /// llama-quantize's name (`Q4_K_M`), or `ftype N` for a number llama.cpp
    /// does not know.
    pub fn name(self) -> String {
        self.entry()
            .map_or_else(|| format!("ftype {}", self.0), |e| e.1.to_string())
    }

    /// `llama_ftype_name`'s (`Q4_K - Medium`), as in llama-bench's
    /// `model_type`; llama.cpp's own words for an unknown number.
    pub fn llama_description(self) -> &'static str {
        self.entry().map_or("unknown, may not work", |e| e.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_llama_cpp() {
        assert_eq!(FileType(15).name(), "Q4_K_M");
        assert_eq!(FileType(15).llama_description(), "Q4_K - Medium");
        assert_eq!(FileType(7).name(), "Q8_0");
        assert_eq!(FileType(0).llama_description(), "all F32");
        assert_eq!(FileType(27).llama_description(), "IQ3_S mix - 3.66 bpw");
        assert_eq!(FileType(4).name(), "ftype 4");
        assert_eq!(FileType(4).llama_description(), "unknown, may not work");
        // One entry per id.
        for (i, a) in NAMES.iter().enumerate() {
            assert!(NAMES[i + 1..].iter().all(|b| b.0 != a.0), "{}", a.0);
        }
    }
}
