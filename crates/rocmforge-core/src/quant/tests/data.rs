//! Deterministic test inputs. The generator is also written in C next to
//! ggml's reference quantizers (see `ggml_parity`), so both sides must see the
//! exact same floats: keep every operation and its order as is.

/// splitmix64.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 24 bits, exact in f32.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / 16_777_216.0)
    }
}

/// Roughly Gaussian weights whose magnitude changes every 256 elements, with
/// ~1/61 outliers six times larger, then (when `n` allows) the special
/// super-blocks 13 (all zero), 14 (all non-negative) and 15 (constant 0.5).
pub fn weights(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut x = Vec::with_capacity(n);
    for i in 0..n {
        let mut g = rng.unit();
        g += rng.unit();
        g += rng.unit();
        g += rng.unit();
        g -= 2.0;
        let scale = 1.0 + ((i / 256) % 4) as f32;
        let mut v = g * scale;
        if rng.next_u64().is_multiple_of(61) {
            v *= 6.0;
        }
        x.push(v);
    }
    let block = |k: usize| 256 * k..(256 * (k + 1)).min(n);
    if n > 13 * 256 {
        x[block(13)].fill(0.0);
    }
    if n > 14 * 256 {
        x[block(14)].iter_mut().for_each(|v| *v = v.abs());
    }
    if n > 15 * 256 {
        x[block(15)].fill(0.5);
    }
    x
}

/// Positive per-column importances in [0.1, 4.1), skewed towards small values
/// like a real imatrix, for the quantizers that take one.
pub fn importance(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let u = rng.unit();
            let mut v = u * u;
            v *= 4.0;
            v += 0.1;
            v
        })
        .collect()
}

/// `blocks` blocks of `ty` from random bytes, with every binary16 scale
/// masked to a finite value below 1 in magnitude (bits 10 and 14 cleared) so
/// that decoding compares numbers, not NaN payloads. The C copy masks the
/// same bits.
pub fn random_blocks(ty: crate::quant::QuantType, seed: u64, blocks: usize) -> Vec<u8> {
    use crate::quant::QuantType as T;
    let mut rng = Rng::new(seed);
    let ts = ty.type_size();
    let mut b: Vec<u8> = (0..blocks * ts).map(|_| rng.next_u64() as u8).collect();
    for block in b.chunks_exact_mut(ts) {
        match ty {
            // The scale is spread over the top nibbles of four u16s: bit 10
            // is bit 14 of the third, bit 14 bit 14 of the fourth.
            T::IQ1M => {
                block[53] &= !0x40;
                block[55] &= !0x40;
            }
            T::TQ1_0 => block[53] &= 0xBB,
            T::TQ2_0 => block[65] &= 0xBB,
            _ => block[1] &= 0xBB,
        }
    }
    b
}

/// Standard normal samples (Box-Muller), for error bounds that should not
/// depend on the outliers `weights` plants.
pub fn gaussian(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let u1 = 1.0 - rng.unit() as f64; // (0, 1]: keeps ln finite
            let u2 = rng.unit() as f64;
            ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        })
        .collect()
}

/// Relative RMS error `||a - b|| / ||a||`.
pub fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        err += (x as f64 - y as f64).powi(2);
        norm += (x as f64).powi(2);
    }
    (err / norm).sqrt()
}

/// FNV-1a, 64-bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
