//! Element-wise activations and the plain softmax.
//!
//! These use libm `expf`. ggml's AVX2 build evaluates SiLU and softmax with a
//! vectorised exp approximation (≤ ~1.5 ulp); matching libm instead costs at
//! most a couple of ulp per element, far below the weight quantisation noise,
//! and keeps the reference backend simple and platform-independent.

/// `out = silu(gate) * up` (SwiGLU), with `silu(x) = x / (1 + e^-x)`.
///
/// # Panics
/// If the three slices differ in length.
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert_eq!(up.len(), gate.len(), "silu_mul: up length");
    assert_eq!(out.len(), gate.len(), "silu_mul: output length");
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
}

/// `out = g * sigmoid(alpha * g) * (u + 1)` with `g = min(gate, limit)` and
/// `u = clamp(up, -limit, limit)`: gpt-oss's clamped SwiGLU, in the order of
/// ggml's `swiglu_oai` (`g / (1 + e^(alpha * -g))`).
///
/// # Panics
/// If the three slices differ in length.
pub fn swiglu_oai(gate: &[f32], up: &[f32], out: &mut [f32], alpha: f32, limit: f32) {
    assert_eq!(up.len(), gate.len(), "swiglu_oai: up length");
    assert_eq!(out.len(), gate.len(), "swiglu_oai: output length");
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let x = g.min(limit);
        let y = u.clamp(-limit, limit);
        *o = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
    }
}

/// Llama 4's attention temperature for position `pos`, as llama.cpp
/// fills its input: `ln(floor(pos / floor) + 1) * scale + 1`, the division
/// and floor in f32, the rest in f64, rounded to f32.
pub fn attn_temperature(pos: usize, scale: f32, floor: usize) -> f32 {
    let steps = (pos as f32 / floor.max(1) as f32).floor() as f64 + 1.0;
    (steps.ln() * scale as f64 + 1.0) as f32
}

/// `sigmoid(g)` as ggml's qwen2moe graph computes it: `silu(g) / g`.
pub fn sigmoid_as_silu_ratio(g: f32) -> f32 {
    silu(g) / g
}

/// The same form as ggml's scalar `ggml_silu_f32`: for very negative x,
/// `e^-x` overflows to inf and the quotient is -0, not NaN.
fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `out = gelu(gate) * up` (GeGLU) as ggml's CPU computes it: GELU's tanh
/// form evaluated on the input rounded to f16 and rounded to f16 itself
/// (ggml reads it from a table of every f16), 0 below -10 and the identity
/// above 10.
///
/// # Panics
/// If the three slices differ in length.
pub fn gelu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert_eq!(up.len(), gate.len(), "gelu_mul: up length");
    assert_eq!(out.len(), gate.len(), "gelu_mul: output length");
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = gelu_f16(g) * u;
    }
}

/// ggml's `GELU_COEF_A` and `SQRT_2_OVER_PI`.
const GELU_COEF_A: f32 = 0.044715;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

fn gelu_f16(x: f32) -> f32 {
    use half::f16;
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let x = f16::from_f32(x).to_f32();
    let g = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh());
    f16::from_f32(g).to_f32()
}

/// `x += y`.
///
/// # Panics
/// If the slices differ in length.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    assert_eq!(y.len(), x.len(), "add_inplace: length");
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Numerically stable softmax in place: max-subtracted `expf` in f32, the
/// normaliser summed in f64 (as ggml's `soft_max` does) and applied as one
/// f32 multiplier. A row with no finite maximum (empty, all -inf) becomes all
/// zeros rather than NaN.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        x.fill(0.0);
        return;
    }
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_known_values() {
        let gate = [0.0f32, 1.0, -1.0, 20.0, -200.0];
        let up = [5.0f32, 2.0, 1.0, 1.0, 1.0];
        let mut out = [0.0f32; 5];
        silu_mul(&gate, &up, &mut out);
        // silu(1) = 1 / (1 + e^-1) = 0.7310586, silu(-1) = -0.2689414.
        let expect = [0.0, 1.462_117_2, -0.268_941_43, 20.0, 0.0];
        for (o, e) in out.iter().zip(expect) {
            assert!((o - e).abs() < 1e-6, "{o} vs {e}");
        }
        assert!(!out[4].is_nan());
    }

    #[test]
    fn add_adds() {
        let mut x = [1.0f32, 2.0, 3.0];
        add_inplace(&mut x, &[0.5, -2.0, 10.0]);
        assert_eq!(x, [1.5, 0.0, 13.0]);
    }

    #[test]
    fn softmax_known_values() {
        // softmax(0, ln 2, ln 5) = (1, 2, 5) / 8.
        let mut x = [0.0f32, 2f32.ln(), 5f32.ln()];
        softmax_inplace(&mut x);
        for (o, e) in x.iter().zip([0.125f32, 0.25, 0.625]) {
            assert!((o - e).abs() < 1e-6, "{o} vs {e}");
        }
    }

    #[test]
    fn softmax_is_shift_invariant_and_handles_large_values() {
        let mut a = [1000.0f32, 1001.0, 999.0, f32::NEG_INFINITY];
        let mut b = [0.0f32, 1.0, -1.0, f32::NEG_INFINITY];
        softmax_inplace(&mut a);
        softmax_inplace(&mut b);
        assert_eq!(a, b);
        assert_eq!(a[3], 0.0);
        assert!((a.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn softmax_degenerate_rows() {
        let mut empty: [f32; 0] = [];
        softmax_inplace(&mut empty);
        let mut all_masked = [f32::NEG_INFINITY; 3];
        softmax_inplace(&mut all_masked);
        assert_eq!(all_masked, [0.0; 3]);
    }
}
