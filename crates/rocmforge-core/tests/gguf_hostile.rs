//! Hand-built files: a valid v2 file, and malformed or hostile ones that must
//! each fail with the specific error, before any large allocation.

use rocmforge_core::gguf::{GgufError, GgufFile, GgufValue, GgufWriter};
use rocmforge_core::quant::QuantType;

/// Builds GGUF bytes field by field, independently of `GgufWriter`.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw::default();
        r.0.extend_from_slice(b"GGUF");
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    fn pad_to(&mut self, align: usize) -> &mut Self {
        self.0.resize(self.0.len().next_multiple_of(align), 0);
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn parse(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.0.clone())
    }
}

/// A v3 file with one tensor "w" and `data_len` bytes after the header.
fn one_tensor_file(dims: &[u64], type_id: u32, offset: u64, data_len: usize) -> Raw {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("w", dims, type_id, offset)
        .pad_to(32)
        .zeros(data_len);
    r
}

#[test]
fn hand_built_v2_file() {
    let mut r = Raw::header(2, 2, 4);
    r.str("general.architecture").u32(8).str("qwen2");
    r.kv_u32("qwen2.block_count", 24);
    r.str("general.flags")
        .u32(9)
        .u32(7)
        .u64(3)
        .u8(1)
        .u8(0)
        .u8(1);
    r.str("general.scale").u32(12).u64(0.5f64.to_bits());
    r.tensor("a", &[4, 2], 0, 0);
    r.tensor("b", &[32], 8, 32);
    r.pad_to(32);
    let data_offset = r.0.len() as u64;
    for i in 0..8 {
        r.0.extend_from_slice(&(i as f32).to_le_bytes());
    }
    r.u8(0x11).zeros(33);

    let f = r.parse().unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.architecture(), Some("qwen2"));
    assert_eq!(
        f.get("qwen2.block_count").and_then(GgufValue::as_u32),
        Some(24)
    );
    assert_eq!(
        f.get("general.flags"),
        Some(&GgufValue::from(vec![true, false, true]))
    );
    assert_eq!(
        f.get("general.scale").and_then(GgufValue::as_f32),
        Some(0.5)
    );
    assert_eq!(f.data_offset(), data_offset);
    let a = f.tensor("a").unwrap();
    assert_eq!(
        (a.shape.as_slice(), a.ty, a.n_bytes),
        (&[4, 2][..], QuantType::F32, 32)
    );
    assert_eq!(&f.tensor_data(a)[4..8], &1f32.to_le_bytes());
    let b = f.tensor("b").unwrap();
    assert_eq!((b.ty, b.offset, b.n_bytes), (QuantType::Q8_0, 32, 34));
    assert_eq!(f.tensor_data(b)[0], 0x11);
}

fn assert_err(r: &Raw, check: impl FnOnce(&GgufError) -> bool) -> GgufError {
    let err = r.parse().expect_err("hostile file parsed");
    assert!(check(&err), "unexpected error: {err:?}");
    err
}

#[test]
fn bad_magic_and_versions() {
    let mut r = Raw::header(3, 0, 0);
    r.0[..4].copy_from_slice(b"GGML");
    assert_err(
        &r,
        |e| matches!(e, GgufError::BadMagic { found } if found == b"GGML"),
    );
    assert_err(&Raw(vec![]), |e| matches!(e, GgufError::Truncated { .. }));
    assert_err(&Raw(b"GGU".to_vec()), |e| {
        matches!(e, GgufError::Truncated { .. })
    });
    assert_err(&Raw::header(1, 0, 0), |e| {
        matches!(e, GgufError::UnsupportedVersion { version: 1 })
    });
    assert_err(&Raw::header(4, 0, 0), |e| {
        matches!(e, GgufError::UnsupportedVersion { version: 4 })
    });
    assert_err(&Raw::header(3u32.swap_bytes(), 0, 0), |e| {
        matches!(e, GgufError::BigEndian { .. })
    });
    // The smallest valid file: no tensors, no metadata.
    let f = Raw::header(3, 0, 0).parse().unwrap();
    assert_eq!((f.tensors().len(), f.metadata().len()), (0, 0));
}

#[test]
fn absurd_counts_fail_before_allocating() {
    let count_too_large =
        |e: &GgufError, n: u64| matches!(e, GgufError::CountTooLarge { count, .. } if *count == n);
    let mut r = Raw::header(3, 1 << 62, 0);
    r.zeros(64);
    assert_err(&r, |e| count_too_large(e, 1 << 62));

    let mut r = Raw::header(3, 0, 1 << 62);
    r.zeros(64);
    assert_err(&r, |e| count_too_large(e, 1 << 62));

    // Key length.
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 63).zeros(64);
    assert_err(&r, |e| count_too_large(e, 1 << 63));

    // String value length; the error names the key.
    let mut r = Raw::header(3, 0, 1);
    r.str("general.name").u32(8).u64(1 << 63).zeros(64);
    let err = assert_err(&r, |e| count_too_large(e, 1 << 63));
    assert!(err.to_string().contains("general.name"), "{err}");

    // Array length, for a one-byte and a nested element type.
    for elem in [0u32, 9] {
        let mut r = Raw::header(3, 0, 1);
        r.str("arr").u32(9).u32(elem).u64(1 << 62).zeros(64);
        assert_err(&r, |e| count_too_large(e, 1 << 62));
    }

    // Tensor name length.
    let mut r = Raw::header(3, 1, 0);
    r.u64(1 << 63).zeros(64);
    assert_err(&r, |e| count_too_large(e, 1 << 63));

    // Dimension count: rejected before the dims are read.
    let mut r = Raw::header(3, 1, 0);
    r.str("w").u32(99).zeros(64);
    let err = assert_err(
        &r,
        |e| matches!(e, GgufError::TooManyDims { tensor, n_dims: 99 } if tensor == "w"),
    );
    assert!(err.to_string().contains("'w'"), "{err}");
}

#[test]
fn bad_metadata_values() {
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    let err = assert_err(&r, |e| {
        matches!(
            e,
            GgufError::UnknownValueType {
                type_id: 13,
                offset: 33,
                ..
            }
        )
    });
    assert!(err.to_string().contains("'k'"), "{err}");

    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(9).u32(100).u64(0);
    assert_err(&r, |e| {
        matches!(e, GgufError::UnknownValueType { type_id: 100, .. })
    });

    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(7).u8(2);
    assert_err(&r, |e| matches!(e, GgufError::InvalidBool { value: 2, .. }));

    let mut r = Raw::header(3, 0, 1);
    r.u64(2).u8(b'a').u8(0xc0).u32(4).u32(0);
    assert_err(&r, |e| {
        matches!(e, GgufError::InvalidUtf8 { offset: 33, .. })
    });

    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    assert_err(
        &r,
        |e| matches!(e, GgufError::DuplicateKey { key, offset: 41 } if key == "k"),
    );
}

#[test]
fn deep_nesting_is_refused_without_recursing_forever() {
    for depth in [33u64, 1_000_000] {
        let mut r = Raw::header(3, 0, 1);
        r.str("deep").u32(9);
        for _ in 0..depth {
            r.u32(9).u64(1);
        }
        r.u32(0).u64(0);
        assert_err(&r, |e| matches!(e, GgufError::NestingTooDeep { .. }));
    }
    // 32 levels are allowed.
    let mut r = Raw::header(3, 0, 1);
    r.str("deep").u32(9);
    for _ in 0..31 {
        r.u32(9).u64(1);
    }
    r.u32(0).u64(1).u8(5);
    let f = r.parse().unwrap();
    let mut v = f.get("deep").unwrap();
    for _ in 0..32 {
        v = &v.as_array().unwrap()[0];
    }
    assert_eq!(v, &GgufValue::U8(5));
}

#[test]
fn bad_tensor_types() {
    for type_id in [4u32, 31, 1000] {
        let err = assert_err(&one_tensor_file(&[32], type_id, 0, 64), |e| {
            matches!(e, GgufError::UnknownTensorType { tensor, type_id: t, offset: 24 }
                if tensor == "w" && *t == type_id)
        });
        assert!(err.to_string().contains(&type_id.to_string()), "{err}");
    }
    // Known but not computable types still parse.
    let f = one_tensor_file(&[256], 24, 0, 256).parse().unwrap();
    assert_eq!(f.tensors()[0].ty, QuantType::I8);
    assert!(!f.tensors()[0].ty.is_supported());
}

#[test]
fn bad_tensor_shapes() {
    assert_err(
        &one_tensor_file(&[1 << 32, 1 << 32], 0, 0, 64),
        |e| matches!(e, GgufError::ShapeOverflow { tensor, .. } if tensor == "w"),
    );
    assert_err(&one_tensor_file(&[u64::MAX], 24, 0, 64), |e| {
        matches!(e, GgufError::ShapeOverflow { .. })
    });
    assert_err(&one_tensor_file(&[4, 0], 0, 0, 64), |e| {
        matches!(e, GgufError::ZeroDim { .. })
    });
    assert_err(&one_tensor_file(&[100], 12, 0, 1024), |e| {
        matches!(
            e,
            GgufError::PartialBlock {
                row_len: 100,
                block_size: 256,
                ..
            }
        )
    });
}

#[test]
fn bad_tensor_placement() {
    assert_err(&one_tensor_file(&[4], 0, 16, 64), |e| {
        matches!(e, GgufError::MisalignedTensor { tensor, offset: 16, alignment: 32 }
            if tensor == "w")
    });
    // One byte short.
    assert_err(
        &one_tensor_file(&[4], 0, 0, 15),
        |e| matches!(e, GgufError::TensorOutOfBounds { tensor, n_bytes: 16, .. } if tensor == "w"),
    );
    assert_err(&one_tensor_file(&[4], 0, 32, 47), |e| {
        matches!(e, GgufError::TensorOutOfBounds { .. })
    });
    // An offset whose sum with the data section start overflows u64.
    assert_err(&one_tensor_file(&[4], 0, u64::MAX - 31, 64), |e| {
        matches!(e, GgufError::TensorOutOfBounds { .. })
    });
    assert!(one_tensor_file(&[4], 0, 0, 16).parse().is_ok());
    assert!(one_tensor_file(&[4], 0, 32, 48).parse().is_ok());
}

#[test]
fn duplicate_tensor_names() {
    let mut r = Raw::header(3, 2, 0);
    r.tensor("w", &[4], 0, 0)
        .tensor("w", &[4], 0, 32)
        .pad_to(32)
        .zeros(64);
    assert_err(
        &r,
        |e| matches!(e, GgufError::DuplicateTensor { tensor } if tensor == "w"),
    );
}

/// `general.alignment` with the given type id and encoded value, and one tensor
/// at `tensor_offset`.
fn file_with_alignment(value_type: u32, value: &[u8], tensor_offset: u64) -> Raw {
    let mut r = Raw::header(3, 1, 1);
    r.str("general.alignment").u32(value_type);
    r.0.extend_from_slice(value);
    r.tensor("w", &[4], 0, tensor_offset).pad_to(64).zeros(128);
    r
}

#[test]
fn alignment_rules() {
    for bad in [0u32, 3, 48] {
        assert_err(&file_with_alignment(4, &bad.to_le_bytes(), 64), |e| {
            matches!(e, GgufError::InvalidAlignment { .. })
        });
    }
    assert_err(
        &file_with_alignment(
            8,
            &{
                let mut s = 2u64.to_le_bytes().to_vec();
                s.extend_from_slice(b"64");
                s
            },
            64,
        ),
        |e| matches!(e, GgufError::InvalidAlignment { .. }),
    );
    // Too big for llama.cpp's u32.
    assert_err(
        &file_with_alignment(10, &(1u64 << 32).to_le_bytes(), 64),
        |e| matches!(e, GgufError::InvalidAlignment { .. }),
    );

    let f = file_with_alignment(4, &64u32.to_le_bytes(), 64)
        .parse()
        .unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset() % 64, 0);
    assert!(f.data_offset() > 32);
    // Other integer types carrying a valid value are accepted too.
    let f = file_with_alignment(10, &64u64.to_le_bytes(), 64)
        .parse()
        .unwrap();
    assert_eq!(f.alignment(), 64);
    // With alignment 64, an offset of 32 is misaligned.
    assert_err(&file_with_alignment(4, &64u32.to_le_bytes(), 32), |e| {
        matches!(
            e,
            GgufError::MisalignedTensor {
                alignment: 64,
                offset: 32,
                ..
            }
        )
    });
}

/// Random byte flips in a small file must give a clean result or a clean
/// error; when the parse succeeds, every tensor slice is in bounds.
#[test]
fn random_byte_flips_never_panic() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", GgufValue::from("llama"));
    w.add_metadata("a.u32", GgufValue::U32(7));
    w.add_metadata("a.f64", GgufValue::F64(1.0));
    w.add_metadata("a.bool", GgufValue::Bool(true));
    w.add_metadata("a.strs", GgufValue::from(vec!["x", "yy", "zzz"]));
    w.add_metadata(
        "a.nested",
        GgufValue::from(vec![
            GgufValue::from(vec![1i16, 2]),
            GgufValue::from(vec![3i16]),
        ]),
    );
    w.add_tensor("t0", &[8, 2], QuantType::F32, vec![1; 64])
        .unwrap();
    w.add_tensor("t1", &[32], QuantType::Q8_0, vec![2; 34])
        .unwrap();
    w.add_tensor("t2", &[256], QuantType::Q4K, vec![3; 144])
        .unwrap();
    let original = w.to_bytes().unwrap();

    // xorshift64: fixed seed, so failures reproduce.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut n_ok = 0;
    for _ in 0..20_000 {
        let mut bytes = original.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % bytes.len() as u64) as usize;
            // Mostly single-bit flips; sometimes a whole byte of 0xff, which
            // turns lengths and counts huge.
            bytes[at] = if next() % 4 == 0 {
                0xff
            } else {
                bytes[at] ^ (1 << (next() % 8))
            };
        }
        if let Ok(f) = GgufFile::from_bytes(bytes) {
            n_ok += 1;
            for t in f.tensors() {
                assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
            }
        }
    }
    // Flips in tensor data and padding leave the file valid.
    assert!(n_ok > 0);
}
