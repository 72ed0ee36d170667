//! Decoding the real Q4_K / Q6_K tensors of a model llama.cpp quantized.
//!
//! The weights are random, so there are no exact values to compare with, but
//! a layout mistake is still visible: every sub-block position of a super-block
//! holds statistically the same weights, so their RMS must agree, and a tensor
//! stored as Q4_K must look like its Q6_K sibling in another layer.

use std::path::PathBuf;

use crate::quant::{dequantize, QuantType};

/// Just enough GGUF (v2/v3) to find tensors: a stand-in until the `gguf`
/// module lands, kept here so these tests do not depend on it.
mod mini_gguf {
    use crate::quant::QuantType;

    pub struct TensorInfo {
        pub name: String,
        pub dims: Vec<u64>,
        pub ty: QuantType,
        pub offset: usize,
    }

    struct Cursor<'a> {
        b: &'a [u8],
        at: usize,
    }

    impl Cursor<'_> {
        fn take(&mut self, n: usize) -> &[u8] {
            let s = &self.b[self.at..self.at + n];
            self.at += n;
            s
        }
        fn u32(&mut self) -> u32 {
            u32::from_le_bytes(self.take(4).try_into().unwrap())
        }
        fn u64(&mut self) -> u64 {
            u64::from_le_bytes(self.take(8).try_into().unwrap())
        }
        fn string(&mut self) -> String {
            let n = self.u64() as usize;
            String::from_utf8_lossy(self.take(n)).into_owned()
        }
        /// Skips a value of GGUF type `t`, returning it if it is a u32.
        fn value(&mut self, t: u32) -> Option<u32> {
            match t {
                0 | 1 | 7 => drop(self.take(1)),
                2 | 3 => drop(self.take(2)),
                4 => return Some(self.u32()),
                5 | 6 => drop(self.take(4)),
                10..=12 => drop(self.take(8)),
                8 => drop(self.string()),
                9 => {
                    let (et, n) = (self.u32(), self.u64());
                    for _ in 0..n {
                        self.value(et);
                    }
                }
                _ => panic!("unknown GGUF value type {t}"),
            }
            None
        }
    }

    /// Tensor infos with absolute data offsets.
    pub fn tensors(b: &[u8]) -> Vec<TensorInfo> {
        let mut c = Cursor { b, at: 0 };
        assert_eq!(c.take(4), b"GGUF");
        let _version = c.u32();
        let (n_tensors, n_kv) = (c.u64(), c.u64());
        let mut alignment = 32usize;
        for _ in 0..n_kv {
            let key = c.string();
            let t = c.u32();
            if let Some(v) = c.value(t) {
                if key == "general.alignment" {
                    alignment = v as usize;
                }
            }
        }
        let mut out = Vec::new();
        for _ in 0..n_tensors {
            let name = c.string();
            let n_dims = c.u32();
            let dims = (0..n_dims).map(|_| c.u64()).collect();
            let ty = QuantType::from_id(c.u32()).expect("known type");
            let offset = c.u64() as usize;
            out.push(TensorInfo {
                name,
                dims,
                ty,
                offset,
            });
        }
        let data_start = c.at.div_ceil(alignment) * alignment;
        for t in &mut out {
            t.offset += data_start;
        }
        out
    }
}

fn fixture_bytes() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference/tiny-llama-Q4_K_M.gguf");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Decoded {
    name: String,
    ty: QuantType,
    values: Vec<f32>,
}

fn decoded_tensors() -> Vec<Decoded> {
    let file = fixture_bytes();
    mini_gguf::tensors(&file)
        .into_iter()
        .map(|t| {
            let n: u64 = t.dims.iter().product();
            let len = t.ty.bytes_for(n).unwrap() as usize;
            let mut values = vec![f32::NAN; n as usize];
            dequantize(t.ty, &file[t.offset..t.offset + len], &mut values).unwrap();
            Decoded {
                name: t.name,
                ty: t.ty,
                values,
            }
        })
        .collect()
}

fn rms(v: impl Iterator<Item = f32>) -> f64 {
    let (mut s, mut n) = (0.0f64, 0usize);
    for x in v {
        s += (x as f64).powi(2);
        n += 1;
    }
    (s / n as f64).sqrt()
}

/// RMS of the values at each of the `groups` equal positions of every
/// 256-element super-block.
fn rms_by_position(values: &[f32], groups: usize) -> Vec<f64> {
    let width = 256 / groups;
    (0..groups)
        .map(|g| {
            rms(values
                .chunks_exact(256)
                .flat_map(|sb| sb[g * width..(g + 1) * width].iter().copied()))
        })
        .collect()
}

fn find<'a>(tensors: &'a [Decoded], name: &str) -> &'a Decoded {
    tensors.iter().find(|t| t.name == name).unwrap()
}

#[test]
fn k_quant_tensors_decode_to_plausible_gaussians() {
    let tensors = decoded_tensors();
    let mut seen = (0, 0);
    for t in tensors
        .iter()
        .filter(|t| matches!(t.ty, QuantType::Q4K | QuantType::Q6K))
    {
        let name = format!("{} ({})", t.name, t.ty);
        assert!(t.values.iter().all(|v| v.is_finite()), "{name}");
        let r = rms(t.values.iter().copied());
        let mean = t.values.iter().map(|&v| v as f64).sum::<f64>() / t.values.len() as f64;
        assert!(
            r > 0.01 && mean.abs() < 0.02 * r,
            "{name}: mean {mean}, rms {r}"
        );
        // The generator drew normal weights: ~68.3% within one sigma, nothing absurd.
        let within =
            t.values.iter().filter(|v| (v.abs() as f64) < r).count() as f64 / t.values.len() as f64;
        assert!(
            (0.66..0.70).contains(&within),
            "{name}: {within} within 1 rms"
        );
        let max = t.values.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64;
        assert!(max < 7.0 * r, "{name}: max {max} vs rms {r}");
        // Misplaced scales, mins or bit planes would make some sub-block
        // positions systematically larger or smaller than others.
        let groups = if t.ty == QuantType::Q6K { 16 } else { 8 };
        for (g, pr) in rms_by_position(&t.values, groups).iter().enumerate() {
            assert!(
                (pr / r - 1.0).abs() < 0.05,
                "{name}: position {g} rms {pr} vs {r}"
            );
        }
        match t.ty {
            QuantType::Q4K => seen.0 += 1,
            _ => seen.1 += 1,
        }
    }
    assert!(seen.0 > 20 && seen.1 >= 5, "tensors checked: {seen:?}");
}

#[test]
fn q4_k_and_q6_k_siblings_agree() {
    // Q4_K_M stores some layers' attn_v / ffn_down as Q6_K: same distribution,
    // different format, so the decoded magnitudes must match.
    let tensors = decoded_tensors();
    for role in ["attn_v", "ffn_down"] {
        let q4 = find(&tensors, &format!("blk.1.{role}.weight"));
        let q6 = find(&tensors, &format!("blk.2.{role}.weight"));
        assert_eq!((q4.ty, q6.ty), (QuantType::Q4K, QuantType::Q6K));
        let (r4, r6) = (
            rms(q4.values.iter().copied()),
            rms(q6.values.iter().copied()),
        );
        assert!((r4 / r6 - 1.0).abs() < 0.03, "{role}: {r4} vs {r6}");
    }
}

#[test]
fn f32_norms_decode_near_one() {
    let tensors = decoded_tensors();
    let norm = find(&tensors, "output_norm.weight");
    assert_eq!(norm.ty, QuantType::F32);
    let mean = norm.values.iter().sum::<f32>() / norm.values.len() as f32;
    assert!((mean - 1.0).abs() < 0.05, "{mean}");
}
