//! Attention over a quantized KV cache (`--cache-type-k/-v q8_0|q4_0`),
//! following ggml's CPU flash attention for such caches: neither its
//! split-KV nor its tiled path takes them (both want f16 K and V of one
//! type), so every (token, head) walks its positions in order
//! (`flash_attn_ext_f16_one_chunk`):
//!
//! - Q is converted to K's dot type first: Q8_0 for a Q8_0 or Q4_0 K
//!   (ggml's x86 quantizer), f16 for an f16 K; the score is ggml's
//!   `vec_dot` of that type times `scale`.
//! - A quantized V row is dequantized to f32 and accumulated in **f32**
//!   (one fused multiply-add a value; a new maximum rescales with a plain
//!   multiply); an f16 V keeps ggml's f16 accumulator ([`super::attend_head`]).
//! - The softmax is online in position order with libm `expf`, the sink
//!   folded in after the positions, as in [`super::attend_head`].

use half::f16;
use rocmforge_core::plan::{KvType, KvTypes};
use rocmforge_core::quant::{dequantize, QuantType};

use super::super::quant_dot::{quantize_activation_into, vec_dot};
use super::{dot, finish_head, has_simd, mad_f16, scale_f16, softmax_sum};

/// Largest head the walk takes (its buffers live on the stack).
pub const MAX_HEAD_DIM: usize = 512;

/// One KV head's rows in a layer's cache blocks of any [`KvTypes`]: `k`
/// and `v` hold rows of `k_row` / `v_row` bytes, this head starts `offset`
/// values into a row (a whole number of blocks), and position `p` is row
/// `p % ring`.
#[derive(Clone, Copy, Debug)]
pub struct TypedKvHead<'a> {
    pub k: &'a [u8],
    pub v: &'a [u8],
    pub types: KvTypes,
    pub k_row: usize,
    pub v_row: usize,
    pub offset: usize,
    pub ring: usize,
}

impl TypedKvHead<'_> {
    fn k_at(&self, p: usize, head_dim: usize) -> &[u8] {
        let at = (p % self.ring) * self.k_row + self.types.k.row_bytes(self.offset);
        &self.k[at..at + self.types.k.row_bytes(head_dim)]
    }

    fn v_at(&self, p: usize, head_dim: usize) -> &[u8] {
        let at = (p % self.ring) * self.v_row + self.types.v.row_bytes(self.offset);
        &self.v[at..at + self.types.v.row_bytes(head_dim)]
    }
}

/// [`super::attend_head`] over a cache of any types: one query head of one
/// token over `positions`, `softmax(q·k * scale) · v` into `out`.
///
/// # Panics
/// If `head_dim` exceeds [`MAX_HEAD_DIM`] or is not whole blocks of the
/// types, or a slice is too short for the geometry (caller bugs).
#[allow(clippy::too_many_arguments)]
pub fn attend_head_typed(
    q: &[f32],
    kv: &TypedKvHead,
    positions: std::ops::Range<usize>,
    head_dim: usize,
    scale: f32,
    sink: Option<f32>,
    out: &mut [f32],
) {
    assert!(
        head_dim <= MAX_HEAD_DIM,
        "attend_head_typed: head of {head_dim}"
    );
    assert_eq!(q.len(), head_dim, "attend_head_typed: query length");
    assert_eq!(out.len(), head_dim, "attend_head_typed: output length");
    assert!(kv.ring > 0, "attend_head_typed: empty ring");
    let simd = has_simd();
    // Q in K's dot type: Q8_0 for both quantized K types.
    let mut q_dot = [0u8; MAX_HEAD_DIM / 32 * 34];
    let q_dot = &mut q_dot[..head_dim / 32 * 34];
    let mut q16 = [0.0f32; MAX_HEAD_DIM];
    let q16 = &mut q16[..head_dim];
    let mut k16 = [f16::ZERO; MAX_HEAD_DIM];
    let k16 = &mut k16[..head_dim];
    match kv.types.k {
        KvType::F16 => {
            for (d, &s) in q16.iter_mut().zip(q) {
                *d = f16::from_f32(s).to_f32();
            }
        }
        t => quantize_activation_into(t.quant_type(), q, q_dot),
    }
    let mut v32 = [0.0f32; MAX_HEAD_DIM];
    let v32 = &mut v32[..head_dim];

    let mut max = f32::NEG_INFINITY;
    let mut sum = 0.0f32;
    out.fill(0.0);
    for p in positions {
        let k = kv.k_at(p, head_dim);
        let s = match kv.types.k {
            KvType::F16 => {
                for (d, b) in k16.iter_mut().zip(k.chunks_exact(2)) {
                    *d = f16::from_le_bytes([b[0], b[1]]);
                }
                dot(simd, k16, q16)
            }
            t => vec_dot(t.quant_type(), head_dim, k, q_dot),
        } * scale;
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        let new_max = s > max;
        if new_max {
            ms = (max - s).exp();
            max = s;
        } else {
            vs = (s - max).exp();
        }
        let v = kv.v_at(p, head_dim);
        match kv.types.v {
            KvType::F16 => {
                if new_max {
                    scale_f16(simd, out, ms);
                }
                for (d, b) in k16.iter_mut().zip(v.chunks_exact(2)) {
                    *d = f16::from_le_bytes([b[0], b[1]]);
                }
                mad_f16(simd, out, k16, vs);
            }
            t => {
                if new_max {
                    out.iter_mut().for_each(|o| *o *= ms);
                }
                dequantize_row(t.quant_type(), v, v32);
                for (o, &x) in out.iter_mut().zip(v32.iter()) {
                    *o = x.mul_add(vs, *o);
                }
            }
        }
        sum = softmax_sum(simd, sum, ms, vs);
    }
    finish_head(out, max, sum, sink);
}

/// A Q8_0 or Q4_0 row as ggml's `to_float` gives it.
fn dequantize_row(ty: QuantType, row: &[u8], out: &mut [f32]) {
    dequantize(ty, row, out).expect("a head is whole blocks (KvTypes::check)");
}

/// A row of `src` values stored as `ty` into `dst` (`ty.row_bytes`
/// bytes), as ggml's `set_rows` stores them: f16 rounded to nearest even,
/// Q8_0 by ggml's x86 quantizer, Q4_0 by its reference quantizer.
pub fn store_row(ty: KvType, src: &[f32], dst: &mut [u8]) {
    match ty {
        KvType::F16 => {
            for (d, &s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f16::from_f32(s).to_le_bytes());
            }
        }
        KvType::Q8_0 => quantize_activation_into(QuantType::Q8_0, src, dst),
        KvType::Q4_0 => rocmforge_core::quant::quantize(QuantType::Q4_0, src, dst)
            .expect("a row is whole blocks (KvTypes::check)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_noise as noise;

    /// A row stored as `ty`, read back as f64.
    fn stored(ty: KvType, x: &[f32]) -> (Vec<u8>, Vec<f64>) {
        let mut bytes = vec![0u8; ty.row_bytes(x.len())];
        store_row(ty, x, &mut bytes);
        let mut back = vec![0f32; x.len()];
        match ty {
            KvType::F16 => {
                for (b, c) in back.iter_mut().zip(bytes.chunks_exact(2)) {
                    *b = f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            t => dequantize_row(t.quant_type(), &bytes, &mut back),
        }
        (bytes, back.into_iter().map(f64::from).collect())
    }

    /// Every K/V type pair against an exact softmax over the stored
    /// values, with Q as K's dot type rounds it: a wrong block, nibble or
    /// head offset is an error of order one (peaked scores).
    #[test]
    fn quantized_cache_matches_f64_reference() {
        let (d, heads, n) = (64, 2, 37);
        let stride = d * heads;
        let k_src = noise(stride * n, 11, 2.0);
        let v_src = noise(stride * n, 12, 2.0);
        let q = noise(d, 13, 6.0);
        for k_ty in KvType::ALL {
            for v_ty in KvType::ALL {
                let types = KvTypes { k: k_ty, v: v_ty };
                let (mut k, mut v) = (Vec::new(), Vec::new());
                let (mut k64, mut v64) = (Vec::new(), Vec::new());
                for p in 0..n {
                    let (b, x) = stored(k_ty, &k_src[p * stride..(p + 1) * stride]);
                    k.extend(b);
                    k64.push(x);
                    let (b, x) = stored(v_ty, &v_src[p * stride..(p + 1) * stride]);
                    v.extend(b);
                    v64.push(x);
                }
                let q64: Vec<f64> = match k_ty {
                    KvType::F16 => q
                        .iter()
                        .map(|&x| f64::from(f16::from_f32(x).to_f32()))
                        .collect(),
                    _ => stored(KvType::Q8_0, &q).1,
                };
                let scale = 1.0 / (d as f32).sqrt();
                for head in 0..heads {
                    let kv = TypedKvHead {
                        k: &k,
                        v: &v,
                        types,
                        k_row: k_ty.row_bytes(stride),
                        v_row: v_ty.row_bytes(stride),
                        offset: head * d,
                        ring: usize::MAX,
                    };
                    let mut out = vec![f32::NAN; d];
                    attend_head_typed(&q, &kv, 3..n, d, scale, Some(0.5), &mut out);
                    let cols = head * d..(head + 1) * d;
                    let s: Vec<f64> = (3..n)
                        .map(|p| {
                            let dot: f64 = q64
                                .iter()
                                .zip(&k64[p][cols.clone()])
                                .map(|(a, b)| a * b)
                                .sum();
                            dot * f64::from(scale)
                        })
                        .collect();
                    let max = s.iter().cloned().fold(0.5, f64::max);
                    let w: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                    let total = w.iter().sum::<f64>() + (0.5 - max).exp();
                    // An f16 V accumulator rounds at every step.
                    let tol = if v_ty == KvType::F16 { 4e-3 } else { 1e-5 };
                    for (j, o) in out.iter().enumerate() {
                        let want: f64 = (3..n)
                            .zip(&w)
                            .map(|(p, wp)| wp * v64[p][head * d + j])
                            .sum::<f64>()
                            / total;
                        assert!(
                            (f64::from(*o) - want).abs() <= tol * 2.0,
                            "{types:?} head {head} dim {j}: {o} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// Stored rows keep each value to half a step of its block's scale
    /// (a step for Q4_0's clamped end; plus the f16 rounding of the scale times the largest quant), and
    /// Q8_0 follows ggml's x86 quantizer (the activation one).
    #[test]
    fn stored_rows_round_to_their_blocks() {
        let x = noise(64, 5, 3.0);
        // Q4_0 maps the largest magnitude to -8: the other end clamps at
        // +7, a whole step short.
        for (ty, step, top) in [(KvType::Q8_0, 0.5, 127.0), (KvType::Q4_0, 1.0, 8.0)] {
            let (bytes, back) = stored(ty, &x);
            for (b, chunk) in x.chunks(32).enumerate() {
                let at = b * ty.row_bytes(32);
                let dscale = f16::from_le_bytes([bytes[at], bytes[at + 1]])
                    .to_f32()
                    .abs();
                for (j, &v) in chunk.iter().enumerate() {
                    let err = (f64::from(v) - back[b * 32 + j]).abs();
                    assert!(
                        err <= f64::from(dscale) * (step + top / 1024.0),
                        "{ty} {b}/{j}: {v} -> {}",
                        back[b * 32 + j]
                    );
                }
            }
        }
        let mut act = vec![0u8; 68];
        quantize_activation_into(QuantType::Q8_0, &x, &mut act);
        assert_eq!(stored(KvType::Q8_0, &x).0, act);
    }
}
