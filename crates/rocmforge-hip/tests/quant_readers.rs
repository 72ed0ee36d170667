//! The HIP weight-type readers (`kernels/quant/*.h`) against the CPU
//! reference decoders, bit for bit, without a GPU: the readers are compiled
//! for the host by the same clang that builds the kernels
//! (`tests/host/quant_readers.cpp`) and run over quantized weights of every
//! type, and over random blocks (every index, sign and scale bit) of the
//! i-quant and ternary types. The integer forms the decode mat-vec reads
//! (`block_q8`: quants and scales) are checked the same way, their values
//! rebuilt as `q * d + m`.
//!
//! Without a clang (`ROCMFORGE_HIP_CLANG`, `clang-19` or `clang` on PATH)
//! the test prints a skip line and passes, unless
//! `ROCMFORGE_REQUIRE_HIP_KERNELS=1`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use rocmforge_core::gpu::{has_int_form, weight_suffix};
use rocmforge_core::quant::{
    dequantize, quantize_to_vec, quantize_to_vec_with_importance, QuantType,
};

fn clang() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = match std::env::var_os("ROCMFORGE_HIP_CLANG") {
        Some(p) => vec![PathBuf::from(p)],
        None => vec!["clang-19".into(), "clang".into()],
    };
    candidates.into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn build_harness(clang: &Path) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("quant_readers");
    let status = Command::new(clang)
        .args(["-x", "c++", "-std=c++17", "-O2", "-ffp-contract=off"])
        .args(["-Wall", "-Wextra", "-Werror", "-Wno-psabi"])
        .arg("-I")
        .arg(manifest.join("../../kernels"))
        .arg(manifest.join("tests/host/quant_readers.cpp"))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run clang");
    assert!(status.success(), "host build of the quant readers failed");
    out
}

/// Which of a type's readers a run decodes with.
#[derive(Clone, Copy, PartialEq)]
enum Reader {
    Dequant8,
    IntForm,
}

/// The reader's decode of the blocks of `ty` in `bytes`.
fn run_reader(harness: &Path, ty: QuantType, bytes: &[u8], reader: Reader) -> Vec<f32> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let name = ty.name();
    let (input, output) = (
        dir.join(format!("{name}.in")),
        dir.join(format!("{name}.out")),
    );
    std::fs::write(&input, bytes).unwrap();
    let elements = bytes.len() / ty.type_size() * ty.block_size();
    let mut cmd = Command::new(harness);
    if reader == Reader::IntForm {
        cmd.arg("int");
    }
    let status = cmd
        .arg(weight_suffix(ty).unwrap())
        .arg(elements.to_string())
        .arg(&input)
        .arg(&output)
        .status()
        .unwrap();
    assert!(status.success(), "{name}: reader exited with {status}");
    std::fs::read(&output)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn normalish(&mut self) -> f32 {
        let x = self.next();
        let sum = (x & 0xffff) + (x >> 16 & 0xffff) + (x >> 32 & 0xffff) + (x >> 48);
        (sum as f32 - 131070.0) / 37837.23
    }
}

fn quantized(ty: QuantType, n: usize) -> Vec<u8> {
    let mut rng = Rng(ty.id() as u64);
    let x: Vec<f32> = (0..n)
        .map(|i| rng.normalish() * (1 + i / 64 % 3) as f32)
        .collect();
    if ty.needs_importance() {
        quantize_to_vec_with_importance(ty, &x, &vec![1.0; n]).unwrap()
    } else {
        quantize_to_vec(ty, &x).unwrap()
    }
}

/// The types whose every bit pattern is a valid block with a simple scale
/// field to mask, checked on random bytes too.
const RANDOM_BLOCK_TYPES: [QuantType; 9] = [
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

/// Random blocks with the binary16 scale masked finite (bits 10 and 14
/// cleared), so values, not NaN payloads, are compared.
fn random_blocks(ty: QuantType, blocks: usize) -> Vec<u8> {
    let mut rng = Rng(0x5EED ^ ty.id() as u64);
    let ts = ty.type_size();
    let mut b: Vec<u8> = (0..blocks * ts).map(|_| rng.next() as u8).collect();
    for block in b.chunks_exact_mut(ts) {
        match ty {
            QuantType::IQ1M => {
                block[53] &= !0x40;
                block[55] &= !0x40;
            }
            QuantType::TQ1_0 => block[53] &= 0xBB,
            QuantType::TQ2_0 => block[65] &= 0xBB,
            _ => block[1] &= 0xBB,
        }
    }
    b
}

fn compare(
    harness: &Path,
    ty: QuantType,
    bytes: &[u8],
    reader: Reader,
    what: &str,
    wrong: &mut Vec<String>,
) {
    let n = bytes.len() / ty.type_size() * ty.block_size();
    let mut expected = vec![0.0f32; n];
    dequantize(ty, bytes, &mut expected).unwrap();
    let got = run_reader(harness, ty, bytes, reader);
    assert_eq!(got.len(), n, "{ty}: values");
    if let Some(i) = (0..n).find(|&i| got[i].to_bits() != expected[i].to_bits()) {
        wrong.push(format!(
            "{ty} ({what}): element {i}: {} vs reference {}",
            got[i], expected[i]
        ));
    }
}

#[test]
fn readers_decode_like_the_cpu_reference() {
    let Some(clang) = clang() else {
        if std::env::var("ROCMFORGE_REQUIRE_HIP_KERNELS").as_deref() == Ok("1") {
            panic!("no clang for the host build of the quant readers (ROCMFORGE_REQUIRE_HIP_KERNELS=1)");
        }
        println!("readers_decode_like_the_cpu_reference: skipped: no clang-19 or clang on PATH");
        return;
    };
    let harness = build_harness(&clang);
    let mut wrong = Vec::new();
    let (mut checked, mut int_forms) = (0, 0);
    for ty in QuantType::supported().filter(|&t| weight_suffix(t).is_some()) {
        let q = quantized(ty, 4096);
        compare(&harness, ty, &q, Reader::Dequant8, "quantized", &mut wrong);
        if has_int_form(ty) {
            // 128 blocks: for the 18- and 34-byte types, blocks at both
            // alignments (4-byte and 2 bytes past it).
            compare(
                &harness,
                ty,
                &q,
                Reader::IntForm,
                "integer form",
                &mut wrong,
            );
            int_forms += 1;
        }
        if RANDOM_BLOCK_TYPES.contains(&ty) {
            compare(
                &harness,
                ty,
                &random_blocks(ty, 64),
                Reader::Dequant8,
                "random blocks",
                &mut wrong,
            );
        }
        checked += 1;
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(checked >= 24, "{checked} types checked");
    assert!(int_forms >= 7, "{int_forms} integer forms checked");
}
