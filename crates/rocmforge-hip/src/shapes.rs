//! Rust mirrors of the kernels' shape structs (`kernels/shapes.h`) and the
//! launch geometry that goes with each.
//!
//! Every kernel takes its pointers as separate arguments and its sizes as
//! ONE of these structs, passed by value: a launch site fills one value and
//! cannot swap two integers. Each mirror is `#[repr(C)]` with the fields of
//! the C struct in the same order, 16 bytes like the C side's
//! `static_assert`s (checked here at compile time; a unit test compares
//! the field lists and the workgroup sizes with the kernel sources).
//!
//! A kernel parameter of one of these types is launched with a pointer to
//! the value, like any other argument (`hipModuleLaunchKernel`'s
//! `kernelParams`).

/// The most tokens one `matvec_q4_0` / `matvec_q8_0` launch handles
/// (`MATVEC_MAX_TOKENS`).
pub const MATVEC_MAX_TOKENS: u32 = 8;

/// `rmsnorm_f32` / `rmsnorm_f32_q8`: `n_groups` groups of `group` values (a
/// row, or one head for Qwen3's Q/K norms). The `_q8` variant needs
/// `group % 32 == 0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RmsNormShape {
    pub group: u32,
    pub n_groups: u32,
    pub eps: f32,
    pub pad: u32,
}

/// `quantize_q8`: `n` values (a whole number of 32-value blocks) to the
/// Q8-packed layout.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuantizeShape {
    pub n: u32,
    pub pad: [u32; 3],
}

/// `matvec_q4_0` / `matvec_q8_0`: `out[t][r] = x[t] . W[r]` for
/// `r < rows`, `t < n_tokens` (1..=[`MATVEC_MAX_TOKENS`]); `k % 32 == 0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MatvecShape {
    pub rows: u32,
    pub k: u32,
    pub n_tokens: u32,
    pub pad: u32,
}

/// `matmul_f16`: `C[m][n] = sum_k A[m][k] * B[n][k] (+ bias[n])`; A is
/// m x k, B is n x k, both f16 row-major, C is m x n f32. `k % 8 == 0`, A
/// and B 16-byte aligned.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MatmulShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub pad: u32,
}

/// `spin` (test only): polls the flag up to `bound` times.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpinShape {
    pub bound: u64,
    pub pad: u64,
}

// The C side's static_asserts, and no alignment above what the kernel
// argument layout gives a 16-byte struct of 4- and 8-byte fields.
const _: () = {
    assert!(size_of::<RmsNormShape>() == 16 && align_of::<RmsNormShape>() == 4);
    assert!(size_of::<QuantizeShape>() == 16 && align_of::<QuantizeShape>() == 4);
    assert!(size_of::<MatvecShape>() == 16 && align_of::<MatvecShape>() == 4);
    assert!(size_of::<MatmulShape>() == 16 && align_of::<MatmulShape>() == 4);
    assert!(size_of::<SpinShape>() == 16 && align_of::<SpinShape>() == 8);
};

impl RmsNormShape {
    /// Workgroup size (`RMSNORM_WG`).
    pub const BLOCK: u32 = 256;

    pub fn new(group: u32, n_groups: u32, eps: f32) -> RmsNormShape {
        RmsNormShape {
            group,
            n_groups,
            eps,
            pad: 0,
        }
    }

    /// One workgroup per group.
    pub fn grid(&self) -> [u32; 3] {
        [self.n_groups, 1, 1]
    }
}

impl QuantizeShape {
    /// Workgroup size (`QUANTIZE_WG`): 8 waves, one 32-value block each.
    pub const BLOCK: u32 = 256;

    pub fn new(n: u32) -> QuantizeShape {
        QuantizeShape { n, pad: [0; 3] }
    }

    /// `ceil(blocks / 8)` workgroups.
    pub fn grid(&self) -> [u32; 3] {
        [(self.n / 32).div_ceil(Self::BLOCK / 32), 1, 1]
    }
}

impl MatvecShape {
    /// Workgroup size (`MATVEC_WG`).
    pub const BLOCK: u32 = 64;
    /// Rows per workgroup (`MATVEC_NR`).
    pub const ROWS_PER_BLOCK: u32 = 2;

    pub fn new(rows: u32, k: u32, n_tokens: u32) -> MatvecShape {
        MatvecShape {
            rows,
            k,
            n_tokens,
            pad: 0,
        }
    }

    /// `ceil(rows / 2)` workgroups.
    pub fn grid(&self) -> [u32; 3] {
        [self.rows.div_ceil(Self::ROWS_PER_BLOCK), 1, 1]
    }
}

impl MatmulShape {
    /// Workgroup size (`MM_WG`): 4 waves.
    pub const BLOCK: u32 = 128;
    /// Rows of C and columns of C per workgroup (`MM_TILE`).
    pub const TILE: u32 = 64;

    pub fn new(m: u32, n: u32, k: u32) -> MatmulShape {
        MatmulShape { m, n, k, pad: 0 }
    }

    /// `(ceil(n / 64), ceil(m / 64))` workgroups: x walks the columns.
    pub fn grid(&self) -> [u32; 3] {
        [self.n.div_ceil(Self::TILE), self.m.div_ceil(Self::TILE), 1]
    }
}

impl SpinShape {
    /// One wave in one workgroup.
    pub const BLOCK: u32 = 32;

    pub fn new(bound: u64) -> SpinShape {
        SpinShape { bound, pad: 0 }
    }

    pub fn grid(&self) -> [u32; 3] {
        [1, 1, 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn kernel_source(name: &str) -> String {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../kernels")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The fields of `struct name { ... };` in shapes.h, as "type name".
    fn c_fields(header: &str, name: &str) -> Vec<String> {
        let start = header
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("struct {name} not in shapes.h"));
        let body = &header[start..];
        let body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
        body.split(';')
            .map(|f| f.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|f| !f.is_empty())
            .collect()
    }

    /// The value of `#define name Nu` in a kernel source.
    fn define(source: &str, name: &str) -> u32 {
        let line = source
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name) && l.starts_with("#define"))
            .unwrap_or_else(|| panic!("#define {name} not found"));
        let value = line.split_whitespace().nth(2).unwrap();
        value.trim_end_matches('u').parse().unwrap()
    }

    #[test]
    fn mirrors_match_shapes_h() {
        let h = kernel_source("shapes.h");
        let expect: &[(&str, &[&str])] = &[
            (
                "RmsNormShape",
                &[
                    "uint32_t group",
                    "uint32_t n_groups",
                    "float eps",
                    "uint32_t pad",
                ],
            ),
            ("QuantizeShape", &["uint32_t n", "uint32_t pad[3]"]),
            (
                "MatvecShape",
                &[
                    "uint32_t rows",
                    "uint32_t k",
                    "uint32_t n_tokens",
                    "uint32_t pad",
                ],
            ),
            (
                "MatmulShape",
                &["uint32_t m", "uint32_t n", "uint32_t k", "uint32_t pad"],
            ),
            ("SpinShape", &["uint64_t bound", "uint64_t pad"]),
        ];
        for (name, fields) in expect {
            assert_eq!(
                c_fields(&h, name),
                fields.to_vec(),
                "{name}: shapes.h changed; update src/shapes.rs with it"
            );
        }
        assert_eq!(define(&h, "MATVEC_MAX_TOKENS"), MATVEC_MAX_TOKENS);
    }

    #[test]
    fn launch_geometry_matches_the_kernels() {
        assert_eq!(
            define(&kernel_source("quantize_q8.hip"), "QUANTIZE_WG"),
            QuantizeShape::BLOCK
        );
        assert_eq!(
            define(&kernel_source("rmsnorm.hip"), "RMSNORM_WG"),
            RmsNormShape::BLOCK
        );
        let mv = kernel_source("matvec_q.hip");
        assert_eq!(define(&mv, "MATVEC_WG"), MatvecShape::BLOCK);
        assert_eq!(define(&mv, "MATVEC_NR"), MatvecShape::ROWS_PER_BLOCK);
        let mm = kernel_source("matmul_f16.hip");
        assert_eq!(define(&mm, "MM_WG"), MatmulShape::BLOCK);
        assert_eq!(define(&mm, "MM_TILE"), MatmulShape::TILE);
        assert!(kernel_source("spin.hip").contains("LAUNCH_BOUNDS(32)"));

        assert_eq!(QuantizeShape::new(4096 * 3 + 160).grid(), [49, 1, 1]);
        assert_eq!(RmsNormShape::new(896, 5, 1e-6).grid(), [5, 1, 1]);
        assert_eq!(MatvecShape::new(37, 4096, 1).grid(), [19, 1, 1]);
        assert_eq!(MatmulShape::new(77, 45, 200).grid(), [1, 2, 1]);
        assert_eq!(MatmulShape::new(128, 192, 512).grid(), [3, 2, 1]);
    }
}
