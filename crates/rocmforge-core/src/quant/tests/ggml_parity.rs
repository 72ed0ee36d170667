//! Bit-exact agreement with ggml's reference quantizers.
//!
//! The expected hashes were produced by compiling ggml's `ggml-quants.c`
//! (ggml-org/ggml d99724f, `gcc -O2`, x86-64 without FMA contraction) with a C
//! copy of `data::weights` and hashing the bytes of `quantize_row_*_ref` for
//! the legacy and K types, and of `quantize_iq4_nl` / `quantize_iq4_xs` with no
//! importance matrix (what `llama-quantize` calls) for the IQ4 types. MXFP4's
//! came the same way from the ggml vendored in llama-cpp-python 0.3.36
//! (ggml 0.25.3, `quantize_row_mxfp4_ref`, gcc 12 `-O2`, glibc's `log2f`),
//! whose input hash matched [`INPUT_HASH`]. They are not derived from this
//! crate's output.

use super::data::{fnv1a, weights};
use crate::quant::{quantize_to_vec, QuantType};

const N: usize = 4096;
const SEED: u64 = 42;

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

/// Guards the generator itself: if it drifted, every hash above would fail
/// for a reason unrelated to the quantizers.
#[test]
fn generator_matches_c_copy() {
    let x = weights(SEED, N);
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(fnv1a(&bytes), INPUT_HASH);
}

/// FNV-1a of the C generator's f32 output (little-endian).
const INPUT_HASH: u64 = 0xe56623c3041f1cd8;
