//! Every kernel against a dequantize-then-dot reference, SIMD against scalar,
//! and the tile loop against single dots.

use rocmforge_core::quant::{
    dequantize, quantize_to_vec, quantize_to_vec_with_importance, QuantType,
};

use super::*;

const WEIGHT_TYPES: [QuantType; 25] = [
    QuantType::F32,
    QuantType::F16,
    QuantType::BF16,
    QuantType::Q4_0,
    QuantType::Q4_1,
    QuantType::Q5_0,
    QuantType::Q5_1,
    QuantType::Q8_0,
    QuantType::IQ4NL,
    QuantType::Q2K,
    QuantType::Q3K,
    QuantType::Q4K,
    QuantType::Q5K,
    QuantType::Q6K,
    QuantType::IQ4XS,
    QuantType::MXFP4,
    QuantType::IQ2XXS,
    QuantType::IQ2XS,
    QuantType::IQ2S,
    QuantType::IQ3XXS,
    QuantType::IQ3S,
    QuantType::IQ1S,
    QuantType::IQ1M,
    QuantType::TQ1_0,
    QuantType::TQ2_0,
];

/// Weights of type `ty`, through a flat importance for the types ggml only
/// quantizes with one.
fn quantize_weights(ty: QuantType, x: &[f32]) -> Vec<u8> {
    if ty.needs_importance() {
        quantize_to_vec_with_importance(ty, x, &vec![1.0; 256]).unwrap()
    } else {
        quantize_to_vec(ty, x).unwrap()
    }
}

/// splitmix64 → roughly normal f32 (sum of four uniforms), with some larger
/// values mixed in so blocks have different scales.
fn random_row(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    let mut unit = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 40) as f32 / 16_777_216.0
    };
    (0..n)
        .map(|i| {
            let g = unit() + unit() + unit() + unit() - 2.0;
            g * (1.0 + (i / 64 % 3) as f32)
        })
        .collect()
}

fn decoded(ty: QuantType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0.0; n];
    dequantize(ty, bytes, &mut out).unwrap();
    out
}

fn dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

fn norm(a: &[f32]) -> f64 {
    dot64(a, a).sqrt()
}

fn lengths_for(ty: QuantType) -> Vec<usize> {
    let mut ks = vec![256, 768, 4096];
    if ty.block_size() < 256 {
        ks.extend([32, 96, 4096 + 32]);
    }
    ks
}

fn isas() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    if detected_isa() != Isa::Scalar {
        v.push(detected_isa());
    }
    v
}

struct Case {
    w: Vec<u8>,
    act: Vec<u8>,
    /// The exact value the kernel computes: decoded weights · decoded
    /// activations, in f64.
    exact: f64,
    /// Σ |w_i a_i|, the scale float rounding errors are relative to.
    magnitude: f64,
    /// For Q8_1 activations: their stored block sum `s` is `d * Σq` rounded
    /// to f16 from the unrounded `d`, while decoding uses the rounded `d`; the
    /// two differ by at most 2^-10 of `s` (two half-ulp roundings), so the
    /// offset terms `m * s` may move the result by Σ |m s| 2^-10.
    offset_slack: f64,
    /// Decoded weights · the unquantized activations.
    unquantized: f64,
    /// Cauchy–Schwarz bound on what activation quantization can change:
    /// |w · (x - x_q)| <= ||w|| ||x - x_q||.
    activation_error_bound: f64,
}

fn case(ty: QuantType, k: usize, seed: u64) -> Case {
    let w = quantize_weights(ty, &random_row(seed, k));
    let x = random_row(seed ^ 0xABCD, k);
    let mut act = Vec::new();
    quantize_activation(ty, &x, &mut act);
    let wd = decoded(ty, &w, k);
    let xd = decoded(activation_type(ty), &act, k);
    let diff: Vec<f32> = x.iter().zip(&xd).map(|(a, b)| a - b).collect();
    let mut offset_slack = 0.0;
    if activation_type(ty) == QuantType::Q8_1 {
        let f16 =
            |b: &[u8], at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32() as f64;
        for (bw, ba) in w.chunks_exact(ty.type_size()).zip(act.chunks_exact(36)) {
            offset_slack += (f16(bw, 2) * f16(ba, 2)).abs() * 2f64.powi(-10);
        }
    }
    Case {
        exact: dot64(&wd, &xd),
        magnitude: wd
            .iter()
            .zip(&xd)
            .map(|(a, b)| (*a as f64 * *b as f64).abs())
            .sum(),
        offset_slack,
        unquantized: dot64(&wd, &x),
        activation_error_bound: norm(&wd) * norm(&diff),
        w,
        act,
    }
}

#[test]
fn kernels_match_dequantized_reference() {
    for ty in WEIGHT_TYPES {
        for k in lengths_for(ty) {
            let c = case(ty, k, k as u64 * 31 + ty.id() as u64);
            for isa in isas() {
                let got = vec_dot_with(isa, ty, k, &c.w, &c.act) as f64;
                // f32 accumulation of at most k products: a few ulps of the
                // magnitude per block sum.
                let tol = 1e-5 * c.magnitude + c.offset_slack + 1e-6;
                assert!(
                    (got - c.exact).abs() <= tol,
                    "{ty} k={k} {isa:?}: {got} vs exact {} (tol {tol})",
                    c.exact
                );
                let bound = c.activation_error_bound + tol;
                assert!(
                    (got - c.unquantized).abs() <= bound,
                    "{ty} k={k} {isa:?}: {got} vs f32 dot {} beyond {bound}",
                    c.unquantized
                );
            }
        }
    }
}

#[test]
fn simd_matches_scalar() {
    if detected_isa() == Isa::Scalar {
        return;
    }
    for ty in WEIGHT_TYPES {
        for k in lengths_for(ty) {
            let c = case(ty, k, 7 + k as u64);
            let scalar = vec_dot_with(Isa::Scalar, ty, k, &c.w, &c.act) as f64;
            let simd = vec_dot_with(detected_isa(), ty, k, &c.w, &c.act) as f64;
            // Same integer sums, different f32 summation order.
            assert!(
                (scalar - simd).abs() <= 2e-6 * c.magnitude + 1e-6,
                "{ty} k={k}: scalar {scalar} simd {simd}"
            );
        }
    }
}

#[test]
fn tile_matches_single_dots() {
    for ty in WEIGHT_TYPES {
        // 19 rows: two full 8-row panels and a partial one for the prefill
        // kernels that pack rows.
        let (k, n_rows) = (512, 21);
        let w: Vec<u8> = (0..n_rows)
            .flat_map(|r| quantize_weights(ty, &random_row(100 + r as u64, k)))
            .collect();
        let wb = row_bytes(ty, k);
        for n_tokens in [1, 3, 4, 6, 9] {
            let mut acts = Vec::new();
            let mut row = Vec::new();
            for t in 0..n_tokens {
                quantize_activation(ty, &random_row(200 + t as u64, k), &mut row);
                acts.extend_from_slice(&row);
            }
            let ab = row.len();
            let rows = 2..n_rows;
            let mut out = vec![f32::NAN; n_tokens * rows.len()];
            matmul_tile(ty, k, &w, rows.clone(), &acts, n_tokens, &mut out);
            for t in 0..n_tokens {
                for r in rows.clone() {
                    let (w_row, a_row) = (&w[r * wb..(r + 1) * wb], &acts[t * ab..(t + 1) * ab]);
                    let single = vec_dot(ty, k, w_row, a_row);
                    let got = out[t * rows.len() + r - rows.start];
                    // Kernels may sum blocks in another float order; each
                    // rounding is relative to a partial sum, which
                    // Cauchy-Schwarz bounds by |w| |a|. A wrong row or token
                    // is off by O(|w| |a| / sqrt(k)).
                    let act_ty = activation_type(ty);
                    let bound = norm(&decoded(ty, w_row, k)) * norm(&decoded(act_ty, a_row, k));
                    assert!(
                        ((got - single).abs() as f64) <= 1e-6 * bound,
                        "{ty} tokens={n_tokens} t={t} r={r}: {got} vs {single}"
                    );
                }
            }
        }
    }
}

#[test]
fn activation_types_follow_ggml() {
    use QuantType as Q;
    assert_eq!(activation_type(Q::Q4_0), Q::Q8_0);
    assert_eq!(activation_type(Q::IQ4NL), Q::Q8_0);
    assert_eq!(activation_type(Q::MXFP4), Q::Q8_0);
    assert_eq!(activation_type(Q::Q5_1), Q::Q8_1);
    assert_eq!(activation_type(Q::Q6K), Q::Q8K);
    assert_eq!(activation_type(Q::IQ4XS), Q::Q8K);
    assert_eq!(activation_type(Q::IQ2XXS), Q::Q8K);
    assert_eq!(activation_type(Q::IQ1M), Q::Q8K);
    assert_eq!(activation_type(Q::TQ1_0), Q::Q8K);
    assert_eq!(activation_type(Q::F16), Q::F16);
    assert_eq!(activation_type(Q::F32), Q::F32);
}

#[test]
fn q8_0_activations_round_like_ggml_simd() {
    // amax 127 makes the inverse scale exactly 1, so quants are the values
    // rounded half to even (ggml's reference would round 2.5 to 3).
    let mut x = vec![0.0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -3.5;
    x[3] = 0.5;
    let mut out = Vec::new();
    quantize_activation(QuantType::Q4_0, &x, &mut out);
    assert_eq!(out.len(), 34);
    assert_eq!(half::f16::from_le_bytes([out[0], out[1]]).to_f32(), 1.0);
    assert_eq!(&out[2..6], &[127, 2, (-4i8) as u8, 0]);

    let mut q8_1 = Vec::new();
    quantize_activation(QuantType::Q4_1, &x, &mut q8_1);
    let s = half::f16::from_le_bytes([q8_1[2], q8_1[3]]).to_f32();
    assert_eq!(s, 127.0 + 2.0 - 4.0);
}

#[test]
fn q8_k_activations_are_the_reference_quantizer() {
    let x = random_row(9, 512);
    let mut out = Vec::new();
    quantize_activation(QuantType::Q4K, &x, &mut out);
    assert_eq!(out, quantize_to_vec(QuantType::Q8K, &x).unwrap());
}

#[test]
#[should_panic(expected = "need")]
fn short_rows_panic_before_reading() {
    let w = vec![0u8; 18];
    let act = vec![0u8; 68];
    vec_dot(QuantType::Q4_0, 64, &w, &act);
}

#[test]
#[should_panic(expected = "no dot-product kernel")]
fn types_without_kernel_panic() {
    vec_dot(QuantType::I8, 256, &[0; 256], &[0; 1024]);
}

/// Bit patterns of ggml's AVX2 `ggml_vec_dot_*` (ggml-org/ggml d99724f,
/// `ggml-cpu/arch/x86/quants.c`, gcc 12 `-O3 -march=native` on this machine's
/// CPU, so with FMA contraction as llama.cpp builds it) for weights
/// `random_row(1, 4096)` quantized by ggml's reference quantizers and
/// activations `random_row(2, 4096)` quantized by ggml's x86 activation
/// quantizers; and FNV-1a hashes of those activation rows. Produced by a C
/// harness, not by this crate. Q4_0 is absent on purpose: its kernel trades
/// ggml's summation order for speed (llama.cpp repacks Q4_0 on AVX2 anyway).
/// MXFP4's came from the same harness built against the ggml vendored in
/// llama-cpp-python 0.3.36 (ggml 0.25.3), which reproduced the IQ4_NL bits
/// and the Q8_0 activation hash below before giving MXFP4's.
const GGML_VEC_DOT_BITS: [(QuantType, u32); 12] = [
    (QuantType::Q4_1, 0x421054c0),
    (QuantType::Q5_0, 0x4226da94),
    (QuantType::Q5_1, 0x4200539e),
    (QuantType::Q8_0, 0x42047b38),
    (QuantType::IQ4NL, 0x42155b09),
    (QuantType::Q2K, 0x42069c2c),
    (QuantType::Q3K, 0x41d5aad1),
    (QuantType::Q4K, 0x4233e776),
    (QuantType::Q5K, 0x4208bacf),
    (QuantType::Q6K, 0x42130f50),
    (QuantType::IQ4XS, 0x420bbe1f),
    (QuantType::MXFP4, 0x425a2447),
];

const GGML_ACTIVATION_HASHES: [(QuantType, u64); 3] = [
    (QuantType::Q8_0, 0xa936ac918b2aea62),
    (QuantType::Q8_1, 0xab54ea1681e1f68a),
    (QuantType::Q8K, 0xe915c0a0341402ac),
];

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn activation_quantization_is_ggml_x86_bit_for_bit() {
    let x = random_row(2, 4096);
    for (act, expected) in GGML_ACTIVATION_HASHES {
        let weight = match act {
            QuantType::Q8_0 => QuantType::Q4_0,
            QuantType::Q8_1 => QuantType::Q4_1,
            _ => QuantType::Q4K,
        };
        let mut a = Vec::new();
        quantize_activation(weight, &x, &mut a);
        assert_eq!(fnv1a(&a), expected, "{act}");
    }
}

#[test]
fn avx2_dots_are_ggml_bit_for_bit() {
    if detected_isa() == Isa::Scalar {
        return;
    }
    let (w, x) = (random_row(1, 4096), random_row(2, 4096));
    let mut wrong = Vec::new();
    for (ty, bits) in GGML_VEC_DOT_BITS {
        let wq = quantize_to_vec(ty, &w).unwrap();
        let mut a = Vec::new();
        quantize_activation(ty, &x, &mut a);
        let got = vec_dot(ty, 4096, &wq, &a);
        if got.to_bits() != bits {
            wrong.push(format!("{ty}: {got} vs ggml {}", f32::from_bits(bits)));
        }
        // Tokens grouped for prefill go through the same per-token steps.
        let acts: Vec<u8> = std::iter::repeat_n(a.iter().copied(), 3)
            .flatten()
            .collect();
        let mut out = [0.0f32; 3];
        matmul_tile(ty, 4096, &wq, 0..1, &acts, 3, &mut out);
        assert!(
            out.iter().all(|v| v.to_bits() == got.to_bits()),
            "{ty}: {out:?} vs {got}"
        );
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
