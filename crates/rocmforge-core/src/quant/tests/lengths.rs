//! Bad lengths and types give typed errors, never panics.

use crate::quant::{
    dequantize, quantize, quantize_to_vec, quantize_to_vec_with_importance,
    quantize_with_importance, QuantError, QuantType,
};

#[test]
fn wrong_byte_count_names_the_expected_size() {
    let mut out = vec![0.0f32; 64];
    let err = dequantize(QuantType::Q4_0, &[0u8; 35], &mut out).unwrap_err();
    match err {
        QuantError::Length {
            ty,
            elements,
            expected_bytes,
            actual_bytes,
        } => {
            assert_eq!(ty, QuantType::Q4_0);
            assert_eq!((elements, expected_bytes, actual_bytes), (64, Some(36), 35));
        }
        other => panic!("unexpected {other:?}"),
    }
    let msg = dequantize(QuantType::Q4K, &[0u8; 145], &mut vec![0.0; 256])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("144") && msg.contains("145"), "{msg}");

    let err = quantize(QuantType::Q6K, &[0.0; 256], &mut [0u8; 209]).unwrap_err();
    assert!(matches!(
        err,
        QuantError::Length {
            expected_bytes: Some(210),
            actual_bytes: 209,
            ..
        }
    ));
}

#[test]
fn partial_blocks_are_rejected() {
    let err = dequantize(QuantType::Q8_0, &[0u8; 34], &mut [0.0; 31]).unwrap_err();
    assert!(matches!(
        err,
        QuantError::Length {
            expected_bytes: None,
            elements: 31,
            ..
        }
    ));
    assert!(err.to_string().contains("32"), "{err}");
    let err = quantize_to_vec(QuantType::IQ4XS, &[0.0; 300]).unwrap_err();
    assert!(matches!(
        err,
        QuantError::Length {
            expected_bytes: None,
            ..
        }
    ));
}

#[test]
fn types_without_codec_are_unsupported() {
    for ty in [QuantType::I8, QuantType::I16, QuantType::F64] {
        let n = ty.block_size();
        let src = vec![0u8; ty.type_size()];
        let e = dequantize(ty, &src, &mut vec![0.0; n]).unwrap_err();
        assert!(matches!(e, QuantError::Unsupported(t) if t == ty), "{ty}");
        assert!(matches!(
            quantize_to_vec(ty, &vec![0.0; n]),
            Err(QuantError::Unsupported(_))
        ));
    }
}

#[test]
fn empty_rows_are_fine() {
    dequantize(QuantType::Q4K, &[], &mut []).unwrap();
    assert!(quantize_to_vec(QuantType::Q5_1, &[]).unwrap().is_empty());
}

#[test]
fn arbitrary_bytes_decode_without_panicking() {
    // Every bit pattern is a valid block; garbage in must not mean a panic.
    let mut state = 0x1234_5678u32;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect();
    for ty in QuantType::all().filter(|&t| crate::quant::has_codec(t)) {
        let n = 1024;
        let nbytes = ty.bytes_for(n as u64).unwrap() as usize;
        let mut out = vec![0.0; n];
        dequantize(ty, &bytes[..nbytes], &mut out).unwrap();
    }
}

#[test]
fn importance_must_be_whole_rows_of_whole_blocks() {
    let x = vec![0.5f32; 1024];
    let mut out = vec![0u8; QuantType::IQ2XS.bytes_for(1024).unwrap() as usize];
    for cols in [0, 100, 768] {
        let e =
            quantize_with_importance(QuantType::IQ2XS, &x, &vec![1.0; cols], &mut out).unwrap_err();
        assert!(
            matches!(e, QuantError::ImportanceLength { importance, elements: 1024, .. } if importance == cols),
            "{cols}: {e}"
        );
    }
    let e = quantize_with_importance(QuantType::IQ2XS, &x, &[1.0; 256], &mut out[1..]).unwrap_err();
    assert!(matches!(e, QuantError::Length { .. }), "{e}");
    quantize_with_importance(QuantType::IQ2XS, &x, &[1.0; 512], &mut out).unwrap();
}

#[test]
fn only_iquants_take_an_importance() {
    for ty in [
        QuantType::Q4K,
        QuantType::IQ4XS,
        QuantType::TQ1_0,
        QuantType::F16,
    ] {
        let e = quantize_to_vec_with_importance(ty, &[0.0; 256], &[1.0; 256]).unwrap_err();
        assert!(
            matches!(e, QuantError::NoImportanceQuantizer(t) if t == ty),
            "{ty}"
        );
    }
}
