//! TEMPORARY: dequantize-then-dot stand-in until kernels::quant_dot lands.
use rocmforge_core::quant::{dequantize, QuantType};

pub fn activation_type(_w: QuantType) -> QuantType {
    QuantType::F32
}

pub fn quantize_activation_into(_w: QuantType, x: &[f32], out: &mut [u8]) {
    for (o, v) in out.chunks_exact_mut(4).zip(x) {
        o.copy_from_slice(&v.to_le_bytes());
    }
}

pub fn matmul_tile(
    ty: QuantType,
    k: usize,
    w: &[u8],
    rows: std::ops::Range<usize>,
    acts: &[u8],
    n: usize,
    out: &mut [f32],
) {
    let rb = ty.bytes_for(k as u64).unwrap() as usize;
    let mut row = vec![0f32; k];
    let mut x: Vec<f32> = acts[..n * k * 4]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let aty = match ty { QuantType::Q8_0 | QuantType::Q4_0 => Some(QuantType::Q8_0), QuantType::Q4K | QuantType::Q6K => Some(QuantType::Q8K), _ => None };
    if let Some(aty) = aty {
        for t in 0..n {
            let q = rocmforge_core::quant::quantize_to_vec(aty, &x[t * k..(t + 1) * k]).unwrap();
            dequantize(aty, &q, &mut x[t * k..(t + 1) * k]).unwrap();
        }
    }
    let width = rows.len();
    for (j, r) in rows.enumerate() {
        dequantize(ty, &w[r * rb..(r + 1) * rb], &mut row).unwrap();
        for t in 0..n {
            out[t * width + j] = row.iter().zip(&x[t * k..(t + 1) * k]).map(|(a, b)| a * b).sum();
        }
    }
}
