//! Writer → reader round trips, the streaming writer, and writer-side errors.

use rocmforge_core::gguf::{GgufError, GgufFile, GgufValue, GgufWriter};
use rocmforge_core::quant::QuantType;

fn every_value_type() -> Vec<(&'static str, GgufValue)> {
    vec![
        ("t.u8", GgufValue::U8(200)),
        ("t.i8", GgufValue::I8(-100)),
        ("t.u16", GgufValue::U16(60000)),
        ("t.i16", GgufValue::I16(-30000)),
        ("t.u32", GgufValue::U32(4_000_000_000)),
        ("t.i32", GgufValue::I32(-2_000_000_000)),
        ("t.f32", GgufValue::F32(-1.5e-3)),
        ("t.bool", GgufValue::Bool(true)),
        ("t.bool_false", GgufValue::Bool(false)),
        ("t.string", GgufValue::from("héllo ▁wörld")),
        ("t.empty_string", GgufValue::from("")),
        ("t.u64", GgufValue::U64(u64::MAX - 1)),
        ("t.i64", GgufValue::I64(i64::MIN + 1)),
        ("t.f64", GgufValue::F64(std::f64::consts::PI)),
        ("t.arr_u32", GgufValue::from(vec![1u32, 2, 3])),
        ("t.arr_f32", GgufValue::from(vec![0.5f32, -0.25])),
        ("t.arr_bool", GgufValue::from(vec![true, false, true])),
        ("t.arr_str", GgufValue::from(vec!["a", "", "<0x0A>"])),
        ("t.arr_i8", GgufValue::from(vec![-1i8, 1])),
        ("t.arr_empty", GgufValue::Array(vec![])),
        (
            "t.nested",
            GgufValue::from(vec![
                GgufValue::from(vec![1i64, -2]),
                GgufValue::from(vec!["x", "y"]),
                GgufValue::Array(vec![]),
                GgufValue::from(vec![GgufValue::from(vec![7u16])]),
            ]),
        ),
    ]
}

#[test]
fn every_value_type_round_trips() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", GgufValue::from("llama"));
    for (k, v) in every_value_type() {
        w.add_metadata(k, v);
    }
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.architecture(), Some("llama"));
    let expected = every_value_type();
    assert_eq!(f.metadata().len(), expected.len() + 1);
    for ((k, v), (ek, ev)) in f.metadata()[1..].iter().zip(&expected) {
        assert_eq!(k, ek);
        assert_eq!(v, ev, "{k}");
        assert_eq!(f.get(k), Some(ev));
        assert_eq!(v.type_name(), ev.type_name());
    }
    assert_eq!(f.get("t.nested").unwrap().type_name(), "array[array]");
    assert_eq!(f.get("t.arr_str").unwrap().type_name(), "array[string]");
    assert_eq!(f.get("missing"), None);
    assert!(f.tensors().is_empty());
}

/// The exact bytes of a small file, worked out by hand from the format.
#[test]
fn writer_encoding_matches_the_format() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", GgufValue::U32(7));
    w.add_tensor("t", &[2], QuantType::F32, vec![1, 2, 3, 4, 5, 6, 7, 8])
        .unwrap();
    let mut expected = Vec::new();
    expected.extend_from_slice(b"GGUF");
    expected.extend_from_slice(&3u32.to_le_bytes());
    expected.extend_from_slice(&1u64.to_le_bytes()); // tensors
    expected.extend_from_slice(&1u64.to_le_bytes()); // kvs
    expected.extend_from_slice(&1u64.to_le_bytes());
    expected.push(b'k');
    expected.extend_from_slice(&4u32.to_le_bytes()); // u32
    expected.extend_from_slice(&7u32.to_le_bytes());
    expected.extend_from_slice(&1u64.to_le_bytes());
    expected.push(b't');
    expected.extend_from_slice(&1u32.to_le_bytes()); // n_dims
    expected.extend_from_slice(&2u64.to_le_bytes());
    expected.extend_from_slice(&0u32.to_le_bytes()); // F32
    expected.extend_from_slice(&0u64.to_le_bytes()); // offset
    assert_eq!(expected.len(), 74);
    expected.resize(96, 0);
    expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    expected.resize(128, 0);
    assert_eq!(w.to_bytes().unwrap(), expected);
}

fn pattern(n: u64, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sample_tensors() -> Vec<(&'static str, Vec<u64>, QuantType)> {
    vec![
        ("norm.weight", vec![7], QuantType::F32),
        ("w.q8", vec![64, 3], QuantType::Q8_0),
        ("w.q4k", vec![256, 2, 1, 1], QuantType::Q4K),
        // Known but not computable: must still round-trip.
        ("w.iq2", vec![256], QuantType::IQ2XXS),
        ("scalar", vec![], QuantType::F16),
    ]
}

fn in_memory_writer(alignment: Option<u32>) -> GgufWriter {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.add_metadata("general.alignment", GgufValue::U32(a));
    }
    for (i, (name, shape, ty)) in sample_tensors().into_iter().enumerate() {
        let n = ty.bytes_for(shape.iter().product()).unwrap();
        w.add_tensor(name, &shape, ty, pattern(n, i as u8)).unwrap();
    }
    w
}

#[test]
fn tensors_round_trip() {
    for alignment in [None, Some(64), Some(1)] {
        let bytes = in_memory_writer(alignment).to_bytes().unwrap();
        let f = GgufFile::from_bytes(bytes).unwrap();
        let align = alignment.map_or(32, u64::from);
        assert_eq!(f.alignment(), align);
        assert_eq!(f.data_offset() % align, 0);
        assert_eq!(f.tensors().len(), 5);
        let mut expected_offset = 0;
        for (i, (t, (name, shape, ty))) in f.tensors().iter().zip(sample_tensors()).enumerate() {
            assert_eq!(t.name, name);
            assert_eq!(t.shape, shape);
            assert_eq!(t.ty, ty);
            assert_eq!(t.offset, expected_offset);
            let n = ty.bytes_for(shape.iter().product()).unwrap();
            assert_eq!(t.n_bytes, n);
            assert_eq!(f.tensor_data(t), pattern(n, i as u8));
            expected_offset = (t.offset + n).div_ceil(align) * align;
        }
        assert_eq!(f.file_size(), f.data_offset() + expected_offset);
        assert_eq!(f.tensor("w.q4k").unwrap().n_elements(), 512);
        assert_eq!(f.tensor("scalar").unwrap().n_elements(), 1);
    }
}

#[test]
fn streaming_matches_in_memory() {
    let expected = in_memory_writer(None).to_bytes().unwrap();
    let tensors = sample_tensors();
    let mut w = GgufWriter::new();
    for (i, (name, shape, ty)) in tensors.iter().enumerate() {
        // Mix both kinds: data given up front is written when its turn comes.
        if i == 0 || i == 3 {
            let n = ty.bytes_for(shape.iter().product()).unwrap();
            w.add_tensor(name, shape, *ty, pattern(n, i as u8)).unwrap();
        } else {
            w.declare_tensor(name, shape, *ty).unwrap();
        }
    }
    let mut s = w.stream_to(Vec::new()).unwrap();
    for (i, (name, shape, ty)) in tensors.iter().enumerate() {
        if i == 0 || i == 3 {
            continue;
        }
        assert_eq!(s.next_tensor(), Some(*name));
        let n = ty.bytes_for(shape.iter().product()).unwrap();
        // A wrong length is refused without writing anything.
        assert!(matches!(
            s.write_tensor(&pattern(n + 1, 0)),
            Err(GgufError::DataLength { .. })
        ));
        s.write_tensor(&pattern(n, i as u8)).unwrap();
    }
    assert_eq!(s.next_tensor(), None);
    assert!(matches!(
        s.write_tensor(&[0; 4]),
        Err(GgufError::NoTensorPending { len: 4 })
    ));
    assert_eq!(s.finish().unwrap(), expected);
}

#[test]
fn stream_requires_every_declared_tensor() {
    let mut w = GgufWriter::new();
    w.declare_tensor("a", &[4], QuantType::F32).unwrap();
    w.declare_tensor("b", &[4], QuantType::F32).unwrap();
    assert!(matches!(
        w.to_bytes(),
        Err(GgufError::MissingTensorData { tensor }) if tensor == "a"
    ));
    let mut s = w.stream_to(Vec::new()).unwrap();
    s.write_tensor(&[0; 16]).unwrap();
    assert!(matches!(
        s.finish(),
        Err(GgufError::MissingTensorData { tensor }) if tensor == "b"
    ));
}

#[test]
fn writer_rejects_bad_tensors() {
    let mut w = GgufWriter::new();
    assert!(matches!(
        w.add_tensor("a", &[4], QuantType::F32, vec![0; 15]),
        Err(GgufError::DataLength {
            expected: 16,
            actual: 15,
            ..
        })
    ));
    w.add_tensor("a", &[4], QuantType::F32, vec![0; 16])
        .unwrap();
    assert!(matches!(
        w.declare_tensor("a", &[4], QuantType::F32),
        Err(GgufError::DuplicateTensor { tensor }) if tensor == "a"
    ));
    assert!(matches!(
        w.declare_tensor("b", &[1, 1, 1, 1, 1], QuantType::F32),
        Err(GgufError::TooManyDims { n_dims: 5, .. })
    ));
    assert!(matches!(
        w.declare_tensor("b", &[0], QuantType::F32),
        Err(GgufError::ZeroDim { .. })
    ));
    assert!(matches!(
        w.declare_tensor("b", &[u64::MAX, 2], QuantType::F32),
        Err(GgufError::ShapeOverflow { .. })
    ));
    assert!(matches!(
        w.declare_tensor("b", &[100], QuantType::Q4K),
        Err(GgufError::PartialBlock { .. })
    ));
    // Failed declarations leave nothing behind.
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.tensors().len(), 1);
}

#[test]
fn writer_rejects_bad_metadata() {
    for bad in [
        GgufValue::U32(0),
        GgufValue::U32(3),
        GgufValue::U64(64),
        GgufValue::from("32"),
    ] {
        let mut w = GgufWriter::new();
        w.add_metadata("general.alignment", bad);
        assert!(matches!(
            w.to_bytes(),
            Err(GgufError::InvalidAlignment { .. })
        ));
    }
    let mut w = GgufWriter::new();
    w.add_metadata(
        "mixed",
        GgufValue::Array(vec![GgufValue::U32(1), GgufValue::I32(1)]),
    );
    assert!(matches!(
        w.to_bytes(),
        Err(GgufError::MixedArray { key, .. }) if key == "mixed"
    ));
    let mut deep = GgufValue::U8(0);
    for _ in 0..40 {
        deep = GgufValue::Array(vec![deep]);
    }
    let mut w = GgufWriter::new();
    w.add_metadata("deep", deep);
    assert!(matches!(
        w.to_bytes(),
        Err(GgufError::NestingTooDeep { .. })
    ));
}

#[test]
fn metadata_keys_are_replaced_in_place() {
    let mut w = GgufWriter::new();
    w.add_metadata("a", GgufValue::U32(1));
    w.add_metadata("b", GgufValue::U32(2));
    w.add_metadata("a", GgufValue::from("one"));
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(f.get("a").and_then(GgufValue::as_str), Some("one"));
}

struct TempPath(std::path::PathBuf);

impl TempPath {
    fn new(tag: &str) -> Self {
        TempPath(
            std::env::temp_dir().join(format!("rocmforge-gguf-{tag}-{}.gguf", std::process::id())),
        )
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn write_to_path_then_open() {
    let path = TempPath::new("path");
    let w = in_memory_writer(None);
    w.write_to_path(&path.0).unwrap();
    let f = GgufFile::open(&path.0).unwrap();
    assert_eq!(f.as_bytes(), w.to_bytes().unwrap());
    let t = f.tensor("w.q8").unwrap();
    assert_eq!(f.tensor_data(t), pattern(t.n_bytes, 1));
}

#[test]
fn opening_a_missing_file_is_an_io_error() {
    let err = GgufFile::open(std::path::Path::new("/nonexistent/x.gguf")).unwrap_err();
    assert!(matches!(err, GgufError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/x.gguf"), "{err}");
}

/// Offsets beyond 4 GiB survive the round trip. The big tensor's data is a
/// hole in a sparse file, so this needs neither 4 GiB of RAM nor of disk.
#[test]
fn tensors_past_4_gib() {
    use std::io::{Seek, SeekFrom, Write};
    let big: u64 = (1 << 32) + 96;
    let mut w = GgufWriter::new();
    w.declare_tensor("big", &[big], QuantType::I8).unwrap();
    w.declare_tensor("small", &[2], QuantType::F32).unwrap();
    // The stream writes the header; the tensor bytes are never produced.
    let mut header_bytes = Vec::new();
    drop(w.stream_to(&mut header_bytes).unwrap());
    let data_offset = header_bytes.len() as u64;
    assert_eq!(data_offset % 32, 0);
    let small_offset = big.div_ceil(32) * 32;

    let path = TempPath::new("big");
    let mut file = std::fs::File::create(&path.0).unwrap();
    file.write_all(&header_bytes).unwrap();
    file.seek(SeekFrom::Start(data_offset + small_offset))
        .unwrap();
    file.write_all(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    drop(file);

    let f = GgufFile::open(&path.0).unwrap();
    assert!(f.file_size() > 1 << 32);
    let small = f.tensor("small").unwrap();
    assert_eq!(small.offset, small_offset);
    assert_eq!(f.tensor_data(small), [1, 2, 3, 4, 5, 6, 7, 8]);
    let big_info = f.tensor("big").unwrap();
    assert_eq!(f.tensor_data(big_info).len() as u64, big);
}
