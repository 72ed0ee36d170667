//! MXFP4 (OCP microscaling FP4), the format of gpt-oss's expert weights.
//!
//! 17 bytes per 32 elements: `e: u8`, an E8M0 scale (a bare biased
//! exponent, `2^(e - 127)`), then `qs[16]` with Q4_0's nibble order (byte
//! `j`: element `j` low, `j + 16` high). Each nibble is an E2M1 float:
//! a sign bit and the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
//!
//! Like ggml, the levels are kept doubled so they are integers
//! ([`MXFP4_VALUES`], -12..12) and the scale halved to compensate
//! ([`e8m0_to_f32_half`]): value = `e8m0_to_f32_half(e) * MXFP4_VALUES[q]`.
//! The integer levels let dot products run as 8-bit integer products with
//! one byte shuffle, exactly as IQ4_NL's do.

/// The E2M1 levels doubled, by nibble: bit 3 is the sign, so 0 and 8 are
/// both zero.
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half the E8M0 scale `2^(e - 127)`, i.e. `2^(e - 128)`, which pairs with
/// the doubled [`MXFP4_VALUES`]. Exponents 0 and 1 give the subnormals
/// 2^-128 and 2^-127. ggml maps 255 (E8M0's NaN) to 2^127 too, and so do we:
/// every byte decodes to a finite scale.
#[inline(always)]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

pub(super) fn decode_mxfp4(b: &[u8], out: &mut [f32]) {
    let d = e8m0_to_f32_half(b[0]);
    for (j, &q) in b[1..17].iter().enumerate() {
        out[j] = MXFP4_VALUES[(q & 0x0F) as usize] as f32 * d;
        out[j + 16] = MXFP4_VALUES[(q >> 4) as usize] as f32 * d;
    }
}

/// The scale exponent ggml picks for a block whose largest magnitude is
/// `amax`: `floor(log2f(amax)) - 2 + 127`, so that `amax / 2^(e - 127)`
/// lands in [4, 8) where E2M1's top levels 4 and 6 are. 0 for an all-zero
/// block.
///
/// `log2f` is an f32 result: just below a power of two it rounds up to the
/// integer (e.g. `16 - 2^-20` gives 4, not 3.99…), and ggml's exponent
/// follows that rounding. It is computed here in f64 and rounded to f32,
/// which is the correctly rounded `log2f`; near integers, where the floor
/// can change, glibc's `log2f` is exact to far better than half an ulp, so
/// both agree (the parity and hand-block tests pin it). The result is
/// saturated to 0..=255 where ggml's cast would overflow (magnitudes below
/// 2^-125, infinities), cases whose C conversion is undefined.
fn scale_exponent(amax: f32) -> u8 {
    if amax > 0.0 {
        let log2 = (amax as f64).log2() as f32;
        (log2.floor() - 2.0 + 127.0) as u8
    } else {
        0
    }
}

/// Index of the level `MXFP4_VALUES[i] * d` nearest to `x`: ggml's linear
/// search, first index on ties (so zero is nibble 0, never 8, and a value
/// halfway between two levels takes the one listed first). NaN maps to 0.
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (MXFP4_VALUES[0] as f32 * d - x).abs();
    for (i, &v) in MXFP4_VALUES.iter().enumerate().skip(1) {
        let err = (v as f32 * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

pub(super) fn encode_mxfp4(x: &[f32], b: &mut [u8]) {
    let x = &x[..32];
    // `amax < |v|` as ggml writes it: NaNs never become the maximum.
    let amax = x
        .iter()
        .fold(0.0f32, |m, v| if m < v.abs() { v.abs() } else { m });
    let e = scale_exponent(amax);
    let d = e8m0_to_f32_half(e);
    b[0] = e;
    for j in 0..16 {
        b[1 + j] = best_index(x[j], d) | (best_index(x[j + 16], d) << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_scales() {
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(2), 2f32.powi(-126));
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
    }

    #[test]
    fn exponents_follow_the_rounded_log2() {
        assert_eq!(scale_exponent(0.0), 0);
        assert_eq!(scale_exponent(1.0), 125);
        assert_eq!(scale_exponent(6.0), 127);
        // log2f(16 - 2^-20) rounds to 4.0: the exponent of 16.
        assert_eq!(scale_exponent(16.0 - 2f32.powi(-20)), 129);
        // log2f(2 - 2^-23) stays below 1: the exponent of 1.
        assert_eq!(scale_exponent(2.0 - 2f32.powi(-23)), 125);
        assert_eq!(scale_exponent(f32::MAX), 253);
        assert_eq!(scale_exponent(f32::INFINITY), 255);
        assert_eq!(scale_exponent(2f32.powi(-130)), 0);
    }

    #[test]
    fn nearest_levels_take_the_first_index_on_ties() {
        assert_eq!(best_index(0.0, 1.0), 0);
        assert_eq!(best_index(-0.0, 1.0), 0);
        // Halfway between 0 and -1: 0 is listed first.
        assert_eq!(best_index(-0.5, 1.0), 0);
        // Halfway between 4 (index 4) and 6 (index 5).
        assert_eq!(best_index(5.0, 1.0), 4);
        assert_eq!(best_index(-5.0, 1.0), 12);
        assert_eq!(best_index(100.0, 1.0), 7);
        assert_eq!(best_index(f32::NAN, 1.0), 0);
    }
}
