// e^x, sin and cos of an f32 with the CPU reference's exact results.
//
// The CPU backend calls libm (Rust's f32::exp / sin / cos are glibc's expf,
// sinf and cosf on Linux). Since glibc 2.27 (expf) and 2.28 (sinf, cosf)
// these are Szabolcs Nagy's algorithms from Arm's optimized-routines:
// evaluated in f64 and rounded once to f32 (0.502 / 0.56 ulp), on x86-64
// through the build with FMA (an ifunc picks it on every AVX2 CPU). The
// functions below evaluate the same algorithms with the same f64 operations,
// fused where that build fuses them (read off its machine code), so they
// return the same f32 bits: checked against the host's glibc 2.36 for
// every f32 input (expf, sinf, cosf; 2^32 each). A libm built without FMA
// rounds its f64 intermediates differently and can disagree in the last
// f32 bit on inputs within ~2^-50 of a rounding midpoint (a handful in
// 2^32).
//
// The f64 work (~10-20 operations) is slow on RDNA (1/16-1/32 rate), so
// kernels call these where the count is small: once per RoPE angle, once
// per SwiGLU value, once per attention position (not per lane).
//
// Plain arithmetic and integer operations only (no ocml/libdevice), so the
// header also compiles for the host, which is how it was checked: define
// OPS_LIBM_HOST before including it and it needs only <stdint.h>.
#pragma once

#if defined(OPS_LIBM_HOST)
#define OPS_LIBM_FN static inline
#define OPS_LIBM_TABLE static const
#else
#include "prelude.h"
#define OPS_LIBM_FN DEV
// Constant memory on both targets (AMDGPU address space 4, PTX .const).
#define OPS_LIBM_TABLE static __attribute__((constant)) const
#endif

namespace ops {

OPS_LIBM_FN double libm_fma(double a, double b, double c) { return __builtin_fma(a, b, c); }
OPS_LIBM_FN uint32_t f32_bits(float f) { return __builtin_bit_cast(uint32_t, f); }
OPS_LIBM_FN float f32_from_bits(uint32_t u) { return __builtin_bit_cast(float, u); }

// ---- expf --------------------------------------------------------------

// 2^(i/32) as f64 bits, minus i << 47 (the exponent is added back from k).
OPS_LIBM_TABLE uint64_t libm_exp2_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

// e^x: x * 32 / ln2 = k + r, |r| <= 1/2, e^x = 2^(k/32) * 2^(r/32), the
// second factor a cubic in r. Special cases as glibc: -inf -> 0, NaN and
// +inf -> x + x, overflow -> +inf, x < log(2^-150) -> 0, x < log(2^-149)
// -> the least subnormal (what glibc's errno path returns).
// ln(x) in f64 for positive finite x: x = 2^e * m with m in [1, 2), and
// ln(m) = 2 atanh((m - 1) / (m + 1)) by its series (|s| <= 1/3, 14 terms:
// below f64's resolution). For the attention temperature, whose reference
// takes std::log in f64 and rounds to f32.
OPS_LIBM_FN double libm_log(double x) {
    uint64_t bits = __builtin_bit_cast(uint64_t, x);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    double m = __builtin_bit_cast(double, (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double sum = 0.0;
    for (int k = 27; k >= 1; k -= 2) {
        sum = sum * s2 + 1.0 / k;
    }
    return (double)e * 0.69314718055994530942 + 2.0 * s * sum;
}

// e^x as glibc's expf, its table of 2^(i/32) read at `tab` (libm_exp2_tab,
// or a copy of it in faster memory).
OPS_LIBM_FN float libm_expf_tab(float x, const uint64_t* tab) {
    uint32_t abstop = (f32_bits(x) >> 20) & 0x7ffu;
    if (abstop >= 0x42bu) { // |x| >= 88 or NaN
        if (f32_bits(x) == 0xff800000u) {
            return 0.0f;
        }
        if (abstop >= 0x7f8u) {
            return x + x;
        }
        if (x > 0x1.62e42ep6f) {
            return __builtin_inff();
        }
        if (x < -0x1.9fe368p6f) {
            return 0.0f;
        }
        if (x < -0x1.9d1d9ep6f) {
            return 0x1p-149f;
        }
    }
    const double inv_ln2_n = 0x1.71547652b82fep+0 * 32.0;
    const double shift = 0x1.8p+52;
    double xd = (double)x;
    // k rounded to an integer by the shift (ties to even), in kd's low bits.
    double kd = libm_fma(inv_ln2_n, xd, shift);
    uint64_t ki = __builtin_bit_cast(uint64_t, kd);
    kd -= shift;
    double r = libm_fma(inv_ln2_n, xd, -kd);
    uint64_t t = tab[ki % 32u] + (ki << 47);
    double s = __builtin_bit_cast(double, t);
    double z = libm_fma(0x1.c6af84b912394p-5 / 32.0 / 32.0 / 32.0, r,
                        0x1.ebfce50fac4f3p-3 / 32.0 / 32.0);
    double r2 = r * r;
    double y = libm_fma(0x1.62e42ff0c52d6p-1 / 32.0, r, 1.0);
    y = libm_fma(z, r2, y);
    return (float)(y * s);
}

OPS_LIBM_FN float libm_expf(float x) { return libm_expf_tab(x, libm_exp2_tab); }

// ---- sinf / cosf -------------------------------------------------------

// 4/pi to 192 bits, 8 new bits per entry (so any 3 words 4 apart are
// aligned 32-bit windows of it).
OPS_LIBM_TABLE uint32_t libm_inv_pio4[24] = {
    0xa2u,       0xa2f9u,     0xa2f983u,   0xa2f9836eu, 0xf9836e4eu, 0x836e4e44u,
    0x6e4e4415u, 0x4e441529u, 0x441529fcu, 0x1529fc27u, 0x29fc2757u, 0xfc2757d1u,
    0x2757d1f5u, 0x57d1f534u, 0xd1f534ddu, 0xf534ddc0u, 0x34ddc0dbu, 0xddc0db62u,
    0xc0db6295u, 0xdb629599u, 0x6295993cu, 0x95993c43u, 0x993c4390u, 0x3c439041u,
};

// sin(x) on [-pi/4, pi/4] (x2 = x * x), fused as glibc's FMA build.
OPS_LIBM_FN double libm_sin_poly(double x, double x2) {
    double x3 = x * x2;
    double s1 = libm_fma(x2, -0x1.994eb3774cf24p-13, 0x1.1107605230bc4p-7);
    double x7 = x3 * x2;
    double s = libm_fma(x3, -0x1.555545995a603p-3, x);
    return libm_fma(x7, s1, s);
}

// cos(x) on [-pi/4, pi/4] from x2 = x * x.
OPS_LIBM_FN double libm_cos_poly(double x2) {
    double x4 = x2 * x2;
    double c2 = libm_fma(x2, 0x1.99343027bf8c3p-16, -0x1.6c087e89a359dp-10);
    double c1 = libm_fma(x2, -0x1.ffffffd0c621cp-2, 1.0);
    double x6 = x4 * x2;
    double c = libm_fma(x4, 0x1.55553e1068f19p-5, c1);
    return libm_fma(x6, c2, c);
}

// sinf(y) and cosf(y), as the two glibc calls would return them (they
// share the range reduction, which is the same computation in both).
// Every f32 input, NaN and infinities included (NaN out).
OPS_LIBM_FN void libm_sincosf(float y, float* sin_out, float* cos_out) {
    uint32_t xi = f32_bits(y);
    uint32_t abstop = (xi >> 20) & 0x7ffu;
    double x = (double)y;
    if (abstop < 0x3f4u) { // |y| < pi/4 (to 3 mantissa bits)
        if (abstop < 0x398u) { // |y| < 2^-12
            *sin_out = y;
            *cos_out = 1.0f;
            return;
        }
        double x2 = x * x;
        *sin_out = (float)libm_sin_poly(x, x2);
        *cos_out = (float)libm_cos_poly(x2);
        return;
    }
    if (abstop >= 0x7f8u) { // NaN or infinity
        *sin_out = y - y;
        *cos_out = y - y;
        return;
    }
    int32_t n;   // quadrant: x = y - n * pi/2
    uint32_t sq; // quadrant that picks the signs (sin's; cos is sin at +1)
    if (abstop < 0x42fu) { // |y| < 120: one fused multiply-subtract
        double r = x * 0x1.45f306dc9c883p+23; // 2/pi * 2^24
        n = ((int32_t)r + 0x800000) >> 24;
        x = libm_fma(-(double)n, 0x1.921fb54442d18p0, x);
        sq = (uint32_t)n;
    } else { // 32 x 96 bit product with 4/pi in integers
        uint32_t at = (xi >> 26) & 15u;
        uint32_t shift = (xi >> 23) & 7u;
        uint32_t m = ((xi & 0xffffffu) | 0x800000u) << shift;
        uint64_t res0 = (uint64_t)(m * libm_inv_pio4[at]);
        uint64_t res1 = (uint64_t)m * libm_inv_pio4[at + 4u];
        uint64_t res2 = (uint64_t)m * libm_inv_pio4[at + 8u];
        res0 = (res2 >> 32) | (res0 << 32);
        res0 += res1;
        uint64_t nn = (res0 + (1ull << 61)) >> 62;
        res0 -= nn << 62;
        x = (double)(int64_t)res0 * 0x1.921fb54442d18p-62; // 2 pi * 2^-64
        n = (int32_t)nn;
        sq = (uint32_t)n + (xi >> 31);
    }
    double x2 = x * x;
    // sin(y) = sign * (sin or cos)(x) by quadrant; glibc applies the sign
    // to x before the odd polynomial and negates the even one's
    // coefficients (the same bits as negating its result).
    double xs = ((sq + 1u) & 2u) != 0u ? -x : x; // sign[q] = +, -, -, +
    bool neg_cos = (sq & 2u) != 0u;
    double sp = libm_sin_poly(xs, x2);
    double cp = libm_cos_poly(x2);
    if (neg_cos) {
        cp = -cp;
    }
    bool odd = (n & 1) != 0;
    *sin_out = (float)(odd ? cp : sp);
    *cos_out = (float)(odd ? sp : cp);
}

} // namespace ops
