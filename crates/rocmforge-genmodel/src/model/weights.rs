//! Random tensor contents, encoded to their storage type on all cores.
//!
//! Every row draws from its own generator seeded by (seed, tensor, row), so the
//! bytes depend on the seed alone, not on the thread count or the order in
//! which workers pick up rows.

use std::sync::Mutex;

use rocmforge_core::quant::{
    quantize, quantize_fast, quantize_with_importance, QuantError, QuantType,
};

use super::layout::{Fill, TensorSpec};

/// Standard deviation of weight matrices and embeddings: small enough that
/// activations stay in range through dozens of layers, as in trained models.
pub const MATRIX_STD: f32 = 0.02;
/// Spread of RMSNorm scales around 1.
pub const NORM_NOISE_STD: f32 = 0.02;
pub const BIAS_STD: f32 = 0.01;
/// gpt-oss's biases: with BIAS_STD they would change the logits by less
/// than the tests' tolerance; much wider, and constant biases would drown
/// the token-dependent part of the residual stream.
pub const WIDE_BIAS_STD: f32 = 0.1;
/// Attention sinks: on the scale of the scores (a few units), so they take
/// a visible share of each softmax.
pub const SINK_STD: f32 = 1.0;
/// Mixture-of-experts routers: trained ones are confident (logits several
/// units apart), and with MATRIX_STD every expert would be a near tie,
/// whose choice the rounding of any two correct backends may flip.
pub const ROUTER_STD: f32 = 0.5;

/// Elements generated per work item; bounds each worker's f32 scratch (4 MiB)
/// and sets the granularity of progress updates.
const CHUNK_ELEMENTS: u64 = 1 << 20;

/// SplitMix64: tiny, fast, and good enough for weights nobody trains on.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Zero mean, unit variance, bell-shaped: the sum of four uniform 16-bit
    /// draws (Irwin-Hall), bounded at about ±3.5 sigma. One 64-bit draw per
    /// value keeps a 7B model's worth of them cheap.
    fn next_normalish(&mut self) -> f32 {
        let x = self.next_u64();
        let sum = (x & 0xffff) + (x >> 16 & 0xffff) + (x >> 32 & 0xffff) + (x >> 48);
        // Each field has mean 65535/2 and variance (65536^2 - 1)/12.
        const MEAN: f32 = 4.0 * 65535.0 / 2.0;
        const STD: f32 = 37837.23; // sqrt(4 * (65536^2 - 1) / 12)
        (sum as f32 - MEAN) / STD
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn row_rng(seed: u64, tensor_index: u64, row: u64) -> SplitMix64 {
    SplitMix64(mix(mix(seed ^ mix(tensor_index)) ^ row))
}

/// Fills one row of `fill`'s values.
fn fill_row(fill: &Fill, seed: u64, tensor_index: u64, row: u64, out: &mut [f32]) {
    let mut rng = row_rng(seed, tensor_index, row);
    match fill {
        Fill::Matrix => out
            .iter_mut()
            .for_each(|v| *v = MATRIX_STD * rng.next_normalish()),
        Fill::Norm => out
            .iter_mut()
            .for_each(|v| *v = 1.0 + NORM_NOISE_STD * rng.next_normalish()),
        Fill::Router => out
            .iter_mut()
            .for_each(|v| *v = ROUTER_STD * rng.next_normalish()),
        Fill::Bias => out
            .iter_mut()
            .for_each(|v| *v = BIAS_STD * rng.next_normalish()),
        Fill::WideBias => out
            .iter_mut()
            .for_each(|v| *v = WIDE_BIAS_STD * rng.next_normalish()),
        Fill::Sink => out
            .iter_mut()
            .for_each(|v| *v = SINK_STD * rng.next_normalish()),
        Fill::Fixed(values) => {
            let start = row as usize * out.len();
            out.copy_from_slice(&values[start..start + out.len()]);
        }
    }
}

/// How generated values are encoded into their storage type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Quantizer {
    /// ggml's reference quantizers, byte for byte.
    #[default]
    Reference,
    /// Q4_K without the scale search (`quant::quantize_fast`): for
    /// benchmark models of real size, which the search takes an hour to
    /// write on two cores.
    FastKQuants,
}

/// Whether `ty` is quantized with an importance matrix. `llama-quantize`
/// refuses the 1- to 3-bit lattice i-quants without one (ggml's quantizers
/// for IQ2_XXS, IQ2_XS and IQ1_S cannot run without it), so these are
/// encoded as with an imatrix of a model whose activations are white noise:
/// every column equally important. IQ3_S, which llama-quantize also quantizes
/// without, gets the same for uniformity.
fn uses_importance(ty: QuantType) -> bool {
    use QuantType as T;
    matches!(
        ty,
        T::IQ2XXS | T::IQ2XS | T::IQ2S | T::IQ3XXS | T::IQ3S | T::IQ1S | T::IQ1M
    )
}

/// Generates and encodes tensor number `tensor_index` on `threads` workers,
/// calling `progress` with the bytes of each finished piece (from any worker).
#[cfg(test)]
pub fn encode_tensor(
    spec: &TensorSpec,
    tensor_index: u64,
    seed: u64,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<u8>, QuantError> {
    encode_tensor_with(
        spec,
        tensor_index,
        seed,
        threads,
        Quantizer::Reference,
        progress,
    )
}

/// [`encode_tensor`] with a choice of quantizer.
pub fn encode_tensor_with(
    spec: &TensorSpec,
    tensor_index: u64,
    seed: u64,
    threads: usize,
    quantizer: Quantizer,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<u8>, QuantError> {
    let row_len = spec.row_len() as usize;
    if let Fill::Fixed(values) = &spec.fill {
        assert_eq!(
            values.len() as u64,
            spec.n_elements(),
            "{}: fixed values",
            spec.name
        );
    }
    let row_bytes = spec
        .ty
        .bytes_for(row_len as u64)
        .expect("rows are whole blocks") as usize;
    let mut out = vec![0u8; spec.n_bytes() as usize];
    let rows_per_chunk = (CHUNK_ELEMENTS / spec.row_len()).max(1) as usize;
    let jobs = Mutex::new(out.chunks_mut(rows_per_chunk * row_bytes).enumerate());

    let flat = vec![1.0f32; row_len];
    let worker = || -> Result<(), QuantError> {
        let mut scratch = Vec::new();
        loop {
            // A worker that panicked holding the lock left the iterator intact.
            let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((chunk, dst)) = job else {
                return Ok(());
            };
            let first_row = (chunk * rows_per_chunk) as u64;
            scratch.resize(dst.len() / row_bytes * row_len, 0.0f32);
            for (r, row) in scratch.chunks_exact_mut(row_len).enumerate() {
                fill_row(&spec.fill, seed, tensor_index, first_row + r as u64, row);
            }
            if uses_importance(spec.ty) {
                quantize_with_importance(spec.ty, &scratch, &flat, dst)?;
            } else if quantizer == Quantizer::FastKQuants {
                quantize_fast(spec.ty, &scratch, dst)?;
            } else {
                quantize(spec.ty, &scratch, dst)?;
            }
            progress(dst.len() as u64);
        }
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1)).map(|_| s.spawn(worker)).collect();
        handles.into_iter().try_for_each(|h| match h.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocmforge_core::quant::{dequantize, QuantType};

    fn spec(fill: Fill, shape: &[u64], ty: QuantType) -> TensorSpec {
        TensorSpec {
            name: "t".into(),
            shape: shape.to_vec(),
            ty,
            fill,
            fallback_from: None,
        }
    }

    fn decoded(spec: &TensorSpec, seed: u64, threads: usize) -> Vec<f32> {
        let bytes = encode_tensor(spec, 7, seed, threads, &|_| {}).unwrap();
        let mut values = vec![0.0; spec.n_elements() as usize];
        dequantize(spec.ty, &bytes, &mut values).unwrap();
        values
    }

    fn mean_std(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    }

    #[test]
    fn matrix_statistics() {
        // 4M values span several work chunks.
        let v = decoded(&spec(Fill::Matrix, &[2048, 2048], QuantType::F32), 1, 2);
        let (mean, std) = mean_std(&v);
        assert!(mean.abs() < 1e-4, "mean {mean}");
        assert!((std - 0.02).abs() < 0.0002, "std {std}");
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(
            max > 0.06 && max < 0.071,
            "max |w| {max}: ~3.46 sigma bound"
        );
        let norms = decoded(&spec(Fill::Norm, &[4096], QuantType::F32), 1, 1);
        let (mean, std) = mean_std(&norms);
        assert!(
            (mean - 1.0).abs() < 0.002 && (std - 0.02).abs() < 0.002,
            "{mean} {std}"
        );
    }

    #[test]
    fn bytes_depend_on_seed_not_threads() {
        let s = spec(Fill::Matrix, &[256, 5000], QuantType::Q4K);
        let one = encode_tensor(&s, 3, 42, 1, &|_| {}).unwrap();
        let two = encode_tensor(&s, 3, 42, 2, &|_| {}).unwrap();
        let five = encode_tensor(&s, 3, 42, 5, &|_| {}).unwrap();
        assert!(one == two && two == five);
        assert_ne!(one, encode_tensor(&s, 3, 43, 2, &|_| {}).unwrap());
        assert_ne!(one, encode_tensor(&s, 4, 42, 2, &|_| {}).unwrap());
    }

    #[test]
    fn rows_differ_and_progress_adds_up() {
        let s = spec(Fill::Matrix, &[64, 40000], QuantType::Q8_0);
        let done = std::sync::atomic::AtomicU64::new(0);
        let bytes = encode_tensor(&s, 0, 1, 2, &|n| {
            done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(done.into_inner(), bytes.len() as u64);
        assert_eq!(bytes.len() as u64, s.n_bytes());
        let row = 64 / 32 * 34;
        assert_ne!(bytes[..row], bytes[row..2 * row]);
    }

    #[test]
    fn fixed_values_are_stored_exactly() {
        let values = vec![1.0, 1.5, 7.25, 32.0];
        let s = spec(Fill::Fixed(values.clone()), &[4], QuantType::F32);
        assert_eq!(decoded(&s, 9, 2), values);
    }
}
