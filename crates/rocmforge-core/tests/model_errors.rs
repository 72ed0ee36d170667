//! A model file that parses but cannot be run gives an error naming the key or
//! tensor at fault, at load time.

use std::path::PathBuf;

use rocmforge_core::gguf::{GgufFile, GgufValue, GgufWriter};
use rocmforge_core::model::{Arch, Model, ModelConfig, ModelError};
use rocmforge_core::quant::QuantType;

fn fixture() -> GgufFile {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference/tiny-qwen3-Q8_0.gguf");
    GgufFile::open(&p).unwrap()
}

/// Rewrites the fixture: `meta` may change or drop (None) metadata values,
/// `tensor` may change or drop a tensor (name, shape, type, data).
fn rewrite(
    meta: impl Fn(&str, &GgufValue) -> Option<GgufValue>,
    tensor: impl Fn(&str, &[u64], QuantType, &[u8]) -> Option<(Vec<u64>, QuantType, Vec<u8>)>,
) -> Result<Model, ModelError> {
    let src = fixture();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if let Some(v) = meta(k, v) {
            w.add_metadata(k, v);
        }
    }
    for t in src.tensors() {
        if let Some((shape, ty, data)) = tensor(&t.name, &t.shape, t.ty, src.tensor_data(t)) {
            w.add_tensor(&t.name, &shape, ty, data).unwrap();
        }
    }
    Model::from_file(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn keep(_: &str, v: &GgufValue) -> Option<GgufValue> {
    Some(v.clone())
}

fn keep_tensor(
    _: &str,
    s: &[u64],
    ty: QuantType,
    d: &[u8],
) -> Option<(Vec<u64>, QuantType, Vec<u8>)> {
    Some((s.to_vec(), ty, d.to_vec()))
}

#[test]
fn unchanged_copy_loads() {
    let m = rewrite(keep, keep_tensor).unwrap();
    assert_eq!(m.config, ModelConfig::from_gguf(&fixture()).unwrap());
}

#[test]
fn unsupported_architecture() {
    let r = rewrite(
        |k, v| {
            Some(if k == "general.architecture" {
                GgufValue::String("rwkv6".into())
            } else {
                v.clone()
            })
        },
        keep_tensor,
    );
    let err = r.err().expect("rwkv6 is refused");
    assert!(matches!(&err, ModelError::UnsupportedArch(a) if a == "rwkv6"));
    // The message names every architecture that loads.
    let msg = err.to_string();
    for arch in Arch::ALL {
        assert!(msg.contains(arch.name()), "{msg}");
    }
}

#[test]
fn missing_required_key() {
    let r = rewrite(
        |k, v| (k != "qwen3.block_count").then(|| v.clone()),
        keep_tensor,
    );
    assert!(matches!(r, Err(ModelError::MissingKey(k)) if k == "qwen3.block_count"));
}

#[test]
fn wrongly_typed_key() {
    let r = rewrite(
        |k, v| {
            Some(if k == "qwen3.embedding_length" {
                GgufValue::String("big".into())
            } else {
                v.clone()
            })
        },
        keep_tensor,
    );
    assert!(matches!(r, Err(ModelError::BadKey { key, .. }) if key == "qwen3.embedding_length"));
}

#[test]
fn contradictory_heads() {
    let r = rewrite(
        |k, v| {
            Some(if k == "qwen3.attention.head_count_kv" {
                GgufValue::U32(3)
            } else {
                v.clone()
            })
        },
        keep_tensor,
    );
    assert!(
        matches!(r, Err(ModelError::Contradiction(_))),
        "{:?}",
        r.err()
    );
}

#[test]
fn missing_tensor() {
    let r = rewrite(keep, |n, s, t, d| {
        (n != "blk.1.ffn_down.weight").then(|| (s.to_vec(), t, d.to_vec()))
    });
    assert!(matches!(r, Err(ModelError::MissingTensor(n)) if n == "blk.1.ffn_down.weight"));
}

#[test]
fn missing_qk_norm_for_qwen3() {
    let r = rewrite(keep, |n, s, t, d| {
        (n != "blk.0.attn_k_norm.weight").then(|| (s.to_vec(), t, d.to_vec()))
    });
    assert!(matches!(r, Err(ModelError::MissingTensor(n)) if n == "blk.0.attn_k_norm.weight"));
}

#[test]
fn unsupported_tensor_type_names_the_tensor() {
    // F64: a real ggml type that no weight computation here takes.
    let r = rewrite(keep, |n, s, t, d| {
        if n == "blk.0.ffn_up.weight" {
            let n_el: u64 = s.iter().product();
            let bytes = QuantType::F64.bytes_for(n_el).unwrap() as usize;
            Some((s.to_vec(), QuantType::F64, vec![0; bytes]))
        } else {
            Some((s.to_vec(), t, d.to_vec()))
        }
    });
    match r {
        Err(e @ ModelError::UnsupportedType { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("blk.0.ffn_up.weight") && msg.contains("F64"),
                "{msg}"
            );
        }
        other => panic!("expected UnsupportedType, got {:?}", other.err()),
    }
}

#[test]
fn wrong_shape() {
    let r = rewrite(keep, |n, s, t, d| {
        if n == "blk.0.attn_q.weight" {
            // Same bytes, rows and columns swapped: a converter bug we must catch.
            Some((vec![s[1], s[0]], t, d.to_vec()))
        } else {
            Some((s.to_vec(), t, d.to_vec()))
        }
    });
    match r {
        Err(ModelError::ShapeMismatch { tensor, .. }) => assert_eq!(tensor, "blk.0.attn_q.weight"),
        other => panic!("expected ShapeMismatch, got {:?}", other.err()),
    }
}
