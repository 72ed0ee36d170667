// Kernel shape parameters: every kernel takes its pointers as separate
// arguments and its sizes as ONE of these structs, by value, so a launch
// site fills one value and cannot swap two integers.
//
// The Rust side mirrors each struct as #[repr(C)] with the same fields in
// the same order (crates/rocmforge-hip, with the launch code): keep them
// plain 32/64-bit fields padded to a multiple of 16 bytes, and update the
// mirror and the static_asserts below together.
#pragma once

#include "prelude.h"

// rmsnorm_f32 / rmsnorm_f32_q8: n_groups groups of `group` values (a row,
// or one head for Qwen3's Q/K norms). The _q8 variant needs group % 32 == 0.
struct RmsNormShape {
    uint32_t group;
    uint32_t n_groups;
    float eps;
    uint32_t pad;
};

// quantize_q8: n values (a whole number of 32-value blocks) to Q8-packed.
struct QuantizeShape {
    uint32_t n;
    uint32_t pad[3];
};

// matvec_q4_0 / matvec_q8_0: out[t][r] = x[t] . W[r] for r < rows,
// t < n_tokens (1..MATVEC_MAX_TOKENS); k % 32 == 0.
struct MatvecShape {
    uint32_t rows;
    uint32_t k;
    uint32_t n_tokens;
    uint32_t pad;
};
#define MATVEC_MAX_TOKENS 8u

// matmul_f16: C[m][n] = sum_k A[m][k] * B[n][k] (+ bias[n]); A is m x k,
// B is n x k, both f16 row-major; C is m x n f32. k % 8 == 0, A and B
// 16-byte aligned.
struct MatmulShape {
    uint32_t m;
    uint32_t n;
    uint32_t k;
    uint32_t pad;
};

// spin (test only): polls the flag up to `bound` times.
struct SpinShape {
    uint64_t bound;
    uint64_t pad;
};

static_assert(sizeof(RmsNormShape) == 16, "RmsNormShape layout");
static_assert(sizeof(QuantizeShape) == 16, "QuantizeShape layout");
static_assert(sizeof(MatvecShape) == 16, "MatvecShape layout");
static_assert(sizeof(MatmulShape) == 16, "MatmulShape layout");
static_assert(sizeof(SpinShape) == 16, "SpinShape layout");
