//! Which SIMD paths this CPU can run, detected once per process and shared
//! by every kernel, so they all agree on one choice.

use std::sync::OnceLock;

/// Instruction sets the kernels are written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    Scalar,
    /// AVX2 with FMA and F16C (every AVX2 CPU shipped has the other two).
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

/// The best instruction set of this CPU, detected once.
pub(crate) fn detected_isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            return Isa::Avx2;
        }
        Isa::Scalar
    })
}
