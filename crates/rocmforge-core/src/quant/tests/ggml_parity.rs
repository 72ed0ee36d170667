//! Bit-exact agreement with ggml's reference quantizers and decoders.
//!
//! The expected hashes were produced by compiling ggml's `ggml-quants.c`
//! (ggml-org/ggml d99724f for the legacy, K and IQ4 types; the copy vendored
//! in llama-cpp-python 0.3.36 for the i-quants and ternary types, which also
//! reproduces the older hashes; `gcc -O2 -ffp-contract=off`, x86-64, glibc
//! 2.36) with a C copy of `data::weights`, `data::importance` and
//! `data::random_blocks`, and hashing:
//! - the bytes of `quantize_row_*_ref` for the legacy, K and ternary types,
//! - of `quantize_iq4_nl` / `quantize_iq4_xs` and the i-quants'
//!   `quantize_iq*` with no importance matrix (what `llama-quantize` calls
//!   without `--imatrix`) where ggml allows that,
//! - of the i-quants' `quantize_iq*` with the importance `data::importance`,
//!   as one row of 4096 and as two rows of 2048 sharing its first 2048
//!   values,
//! - of the f32 output of `dequantize_row_*` over `data::random_blocks`.
//!
//! MXFP4's came the same way from the ggml vendored in llama-cpp-python
//! 0.3.36 (ggml 0.25.3, `quantize_row_mxfp4_ref`, gcc 12 `-O2`, glibc's
//! `log2f`), whose input hash matched [`INPUT_HASH`]. They are not derived
//! from this crate's output.

use super::data::{fnv1a, importance, random_blocks, weights};
use crate::quant::{
    dequantize, quantize_to_vec, quantize_to_vec_with_importance, QuantError, QuantType,
};

const N: usize = 4096;
const SEED: u64 = 42;
const IMPORTANCE_SEED: u64 = 43;
const BLOCK_SEED: u64 = 7;

const GGML_HASHES: &[(QuantType, u64)] = &[
    (QuantType::Q4_0, 0xd20304e3b01b3b8b),
    (QuantType::Q4_1, 0xdc9b7b796a7fdc4c),
    (QuantType::Q5_0, 0x87e4b5be57246b35),
    (QuantType::Q5_1, 0x1aecb0bcae6d4752),
    (QuantType::Q8_0, 0x5bc4a5429ec2d182),
    (QuantType::Q8_1, 0x314315751e091022),
    (QuantType::Q2K, 0xb56ffdd0d11bf367),
    (QuantType::Q3K, 0xf0e2e14f781644cc),
    (QuantType::Q4K, 0x54b29032f4f7a6aa),
    (QuantType::Q5K, 0x8f4f125ede8d7226),
    (QuantType::Q6K, 0xe4056eaa2ab2d611),
    (QuantType::Q8K, 0x82d7ab356a6dfcd1),
    (QuantType::IQ4NL, 0x2fc4153bcb3e4bed),
    (QuantType::IQ4XS, 0xdb4dcd61e850a5fd),
    (QuantType::MXFP4, 0x2d554692320483ff),
    (QuantType::IQ2S, 0x91549f9afc42b7ee),
    (QuantType::IQ3XXS, 0x03382fea405958f5),
    (QuantType::IQ3S, 0x33d7011696de6014),
    (QuantType::IQ1M, 0xc4b45f3f091d1670),
    (QuantType::TQ1_0, 0xfc78fea005dcab2a),
    (QuantType::TQ2_0, 0x8b1edabafa939065),
];

/// (type, one row of 4096, two rows of 2048).
const GGML_IMPORTANCE_HASHES: &[(QuantType, u64, u64)] = &[
    (QuantType::IQ2XXS, 0x030bb3c86726027d, 0xf92d3ac58f91616a),
    (QuantType::IQ2XS, 0x2426b81fe27a64f2, 0x826561b903019c62),
    (QuantType::IQ2S, 0x8acafec8d7070b63, 0xbb1d86ac31eb8312),
    (QuantType::IQ3XXS, 0x5665d9e9ac3ee579, 0x30ce23f8c0d1131e),
    (QuantType::IQ3S, 0xc0b3269f6016c5a9, 0x1453a6d80186154c),
    (QuantType::IQ1S, 0xd06fc70f139320b5, 0xa91028313da9fd69),
    (QuantType::IQ1M, 0x54879253542603f1, 0x622ca159bfdd7850),
];

const GGML_DECODE_HASHES: &[(QuantType, u64)] = &[
    (QuantType::IQ2XXS, 0x4c05257a25e68206),
    (QuantType::IQ2XS, 0xfff3faaef45612e9),
    (QuantType::IQ3XXS, 0x49b5f078a05a2df7),
    (QuantType::IQ1S, 0x554598e2867b8530),
    (QuantType::IQ3S, 0xd543fb8cb9b7fa9f),
    (QuantType::IQ2S, 0xffe9d376d65aed4c),
    (QuantType::IQ1M, 0x77dbda7b3604a5b6),
    (QuantType::TQ1_0, 0xf7e6481b33c26a30),
    (QuantType::TQ2_0, 0x4a27e29169a6ec90),
];

#[test]
fn quantizers_match_ggml_reference_bytes() {
    let x = weights(SEED, N);
    let mut mismatched = Vec::new();
    for &(ty, expected) in GGML_HASHES {
        let q = quantize_to_vec(ty, &x).unwrap();
        if fnv1a(&q) != expected {
            mismatched.push(ty.name());
        }
    }
    assert!(mismatched.is_empty(), "differ from ggml: {mismatched:?}");
}

#[test]
fn importance_quantizers_match_ggml_bytes() {
    let x = weights(SEED, N);
    let w = importance(IMPORTANCE_SEED, N);
    let mut mismatched = Vec::new();
    for &(ty, one_row, two_rows) in GGML_IMPORTANCE_HASHES {
        let q = quantize_to_vec_with_importance(ty, &x, &w).unwrap();
        if fnv1a(&q) != one_row {
            mismatched.push(format!("{ty} 1x4096"));
        }
        let q = quantize_to_vec_with_importance(ty, &x, &w[..N / 2]).unwrap();
        if fnv1a(&q) != two_rows {
            mismatched.push(format!("{ty} 2x2048"));
        }
    }
    assert!(mismatched.is_empty(), "differ from ggml: {mismatched:?}");
}

#[test]
fn types_ggml_only_quantizes_with_importance_are_refused_without() {
    let x = weights(SEED, 256);
    for ty in [QuantType::IQ2XXS, QuantType::IQ2XS, QuantType::IQ1S] {
        assert!(ty.needs_importance());
        let e = quantize_to_vec(ty, &x).unwrap_err();
        assert!(
            matches!(e, QuantError::NeedsImportance(t) if t == ty),
            "{ty}"
        );
    }
}

#[test]
fn decoders_match_ggml_on_random_blocks() {
    let mut mismatched = Vec::new();
    for &(ty, expected) in GGML_DECODE_HASHES {
        let b = random_blocks(ty, BLOCK_SEED, N / 256);
        let mut y = vec![f32::NAN; N];
        dequantize(ty, &b, &mut y).unwrap();
        let bytes: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
        if fnv1a(&bytes) != expected {
            mismatched.push(ty.name());
        }
    }
    assert!(mismatched.is_empty(), "differ from ggml: {mismatched:?}");
}

/// Guards the generators themselves: if they drifted, every hash above would
/// fail for a reason unrelated to the quantizers.
#[test]
fn generators_match_c_copy() {
    let x = weights(SEED, N);
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(fnv1a(&bytes), INPUT_HASH);
    let w = importance(IMPORTANCE_SEED, N);
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(fnv1a(&bytes), IMPORTANCE_HASH);
}

/// FNV-1a of the C generators' f32 output (little-endian).
const INPUT_HASH: u64 = 0xe56623c3041f1cd8;
const IMPORTANCE_HASH: u64 = 0x3bee716af4176d57;
