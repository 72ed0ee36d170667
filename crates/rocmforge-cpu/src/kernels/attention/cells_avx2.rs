//! The AVX2 kernel of the split-KV path
//! ([`attend_cells`](super::attend_cells)): blocks of cells widened to f32
//! once per KV head, eight query heads at a time, one per lane, with a
//! vector replica of glibc's `expf` that is checked against libm before it
//! is used.

#[cfg(target_arch = "x86_64")]
use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use super::split::{block_len, partial_len};
#[cfg(target_arch = "x86_64")]
use super::{has_simd, KvHead, LANES};

/// Query heads one pass of the AVX2 kernel takes: one per f32 lane.
pub(super) const HEAD_LANES: usize = 8;

/// The AVX2 kernel of [`attend_cells`](super::attend_cells) for a head size
/// of whole 32-lane steps. Cells go in blocks; per KV head, the block's K
/// and V rows are widened to f32 once, then, for up to eight of its query
/// heads at a time, one head per lane: the block's scores (the dot
/// products' cross-lane sums transposed so that a vector holds one
/// position's scores for eight heads), the online softmax of all eight
/// together, and each head's accumulator over the block. Each head's
/// operations are [`attend_head`](super::attend_head)'s, in the same order.
///
/// # Safety
/// AVX2, FMA and F16C are present; every row of `cells` lies in `kv.k` and
/// `kv.v` for all `n_kv_heads`; `q16` holds whole heads of `hd` (a multiple
/// of 32) values, an equal group per KV head; `partials` is initialized and
/// holds one partial per head; `buf` holds
/// [`cells_scratch_len`](super::cells_scratch_len) less the query's values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn cells_avx2(
    q16: &[f32],
    kv: &KvHead,
    n_kv_heads: usize,
    cells: &[Range<usize>],
    hd: usize,
    scale: f32,
    partials: &mut [f32],
    buf: &mut [f32],
) {
    use std::arch::x86_64::*;
    let n_head = q16.len() / hd;
    let group = n_head / n_kv_heads;
    let plen = partial_len(hd);
    let blk = block_len(hd);
    let (kf, rest) = buf.split_at_mut(blk * hd);
    let (vf, rest) = rest.split_at_mut(blk * hd);
    let (scores, rest) = rest.split_at_mut(blk * HEAD_LANES);
    let (rescales, rest) = rest.split_at_mut(blk * HEAD_LANES);
    let (weights, rest) = rest.split_at_mut(blk * HEAD_LANES);
    // Each lane group's running maximum and sum (eight lanes each),
    // carried across blocks; lane group `j` of KV head `g` is entry
    // `g * per_kv + j`.
    let per_kv = group.div_ceil(HEAD_LANES);
    let state = &mut rest[..2 * HEAD_LANES * n_kv_heads * per_kv];
    for (lg, st) in state.chunks_exact_mut(2 * HEAD_LANES).enumerate() {
        let (g, j) = (lg / per_kv, lg % per_kv);
        let h0 = g * group + j * HEAD_LANES;
        let nh = HEAD_LANES.min(group - j * HEAD_LANES);
        st[..HEAD_LANES].fill(f32::NEG_INFINITY);
        st[HEAD_LANES..].fill(0.0);
        for (l, p) in partials[h0 * plen..(h0 + nh) * plen]
            .chunks_exact(plen)
            .enumerate()
        {
            (st[l], st[HEAD_LANES + l]) = (p[0], p[1]);
        }
    }
    let fast_exp = exp_avx2_matches_libm();
    let (kp, vp) = (kv.k.as_ptr(), kv.v.as_ptr());
    let scale_v = _mm256_set1_ps(scale);
    let one = _mm256_set1_ps(1.0);
    let sign = _mm256_set1_ps(-0.0);
    for run in cells {
        let mut start = run.start;
        while start < run.end {
            let n = blk.min(run.end - start);
            for g in 0..n_kv_heads {
                let offset = kv.offset + g * hd;
                for i in 0..n {
                    let at = (start + i) * kv.stride + offset;
                    for d in (0..hd).step_by(8) {
                        // SAFETY: row `start + i` is in `cells`, so KV head
                        // `g`'s `at + hd` is within both caches (this fn's
                        // contract); `i < blk` and `d + 8 <= hd` keep the
                        // stores in `kf` and `vf`.
                        unsafe {
                            let k = _mm256_cvtph_ps(_mm_loadu_si128(kp.add(at + d).cast()));
                            let v = _mm256_cvtph_ps(_mm_loadu_si128(vp.add(at + d).cast()));
                            _mm256_storeu_ps(kf.as_mut_ptr().add(i * hd + d), k);
                            _mm256_storeu_ps(vf.as_mut_ptr().add(i * hd + d), v);
                        }
                    }
                }
                for j in 0..per_kv {
                    let h0 = g * group + j * HEAD_LANES;
                    let nh = HEAD_LANES.min(group - j * HEAD_LANES);
                    for i in 0..n {
                        // SAFETY: `nh` heads from `h0` are in `q16`, row `i`
                        // in `kf`; the store is row `i` of `scores`.
                        unsafe {
                            let s = dot8_avx2(
                                kf.as_ptr().add(i * hd),
                                q16.as_ptr().add(h0 * hd),
                                hd,
                                nh,
                            );
                            _mm256_storeu_ps(
                                scores.as_mut_ptr().add(i * HEAD_LANES),
                                _mm256_mul_ps(s, scale_v),
                            );
                        }
                    }
                    // The online softmax, eight heads at once: s > M:
                    // ms = exp(M - s), M = s, vs = 1; else vs = exp(s - M).
                    // Both exponents are -|s - M| exactly.
                    let st = state[(g * per_kv + j) * 2 * HEAD_LANES..].as_mut_ptr();
                    // SAFETY: each lane group has 16 values of `state`.
                    let (mut max, mut sum) =
                        unsafe { (_mm256_loadu_ps(st), _mm256_loadu_ps(st.add(HEAD_LANES))) };
                    let mut any_new = 0;
                    for i in 0..n {
                        // SAFETY: row `i` of the block's buffers.
                        unsafe {
                            let s = _mm256_loadu_ps(scores.as_ptr().add(i * HEAD_LANES));
                            let new = _mm256_cmp_ps::<_CMP_GT_OQ>(s, max);
                            let e = exp_avx2(fast_exp, _mm256_or_ps(_mm256_sub_ps(s, max), sign));
                            max = _mm256_blendv_ps(max, s, new);
                            let ms = _mm256_blendv_ps(one, e, new);
                            let vs = _mm256_blendv_ps(e, one, new);
                            // `softmax_sum`: with ms = 1 the fused form is
                            // the plain sum.
                            sum = _mm256_fmadd_ps(sum, ms, vs);
                            any_new |= _mm256_movemask_ps(new);
                            _mm256_storeu_ps(rescales.as_mut_ptr().add(i * HEAD_LANES), ms);
                            _mm256_storeu_ps(weights.as_mut_ptr().add(i * HEAD_LANES), vs);
                        }
                    }
                    // SAFETY: as for the loads.
                    unsafe {
                        _mm256_storeu_ps(st, max);
                        _mm256_storeu_ps(st.add(HEAD_LANES), sum);
                    }
                    let rescale = any_new != 0;
                    let mut h = 0;
                    while h < nh {
                        // Three heads at a time: twelve accumulator
                        // vectors in flight hide the latency of each one's
                        // multiply-add and two conversions.
                        let take = (nh - h).min(3);
                        // SAFETY: heads `h0 + h..h0 + h + take` have
                        // partials of `hd` values from `acc`; `vf`,
                        // `rescales` and `weights` hold `n` rows.
                        unsafe {
                            let w = (rescales.as_ptr().add(h), weights.as_ptr().add(h));
                            let acc = partials.as_mut_ptr().add((h0 + h) * plen + 2);
                            let v = vf.as_ptr();
                            match take {
                                3 => accumulate_heads::<3>(acc, plen, v, hd, n, w, rescale),
                                2 => accumulate_heads::<2>(acc, plen, v, hd, n, w, rescale),
                                _ => accumulate_heads::<1>(acc, plen, v, hd, n, w, rescale),
                            }
                        }
                        h += take;
                    }
                }
            }
            start += n;
        }
    }
    for (lg, st) in state.chunks_exact(2 * HEAD_LANES).enumerate() {
        let (g, j) = (lg / per_kv, lg % per_kv);
        let h0 = g * group + j * HEAD_LANES;
        let nh = HEAD_LANES.min(group - j * HEAD_LANES);
        for (l, p) in partials[h0 * plen..(h0 + nh) * plen]
            .chunks_exact_mut(plen)
            .enumerate()
        {
            (p[0], p[1]) = (st[l], st[HEAD_LANES + l]);
        }
    }
}

/// One position's scores (before scaling) for `nh <= 8` heads, one per
/// lane (0 past `nh`): each is ggml's f16 dot product on AVX2 of the
/// widened K row `k` and head `h`'s query at `q + h*hd`, `hd` a multiple
/// of 32. The cross-lane sums of [`lane_reduce`](super::lane_reduce) are
/// taken for eight heads at once: halves added in pairs of heads, then two
/// horizontal adds.
///
/// # Safety
/// AVX2 and FMA are present; `k` points at `hd` readable values and `q`
/// at `nh * hd`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot8_avx2(
    k: *const f32,
    q: *const f32,
    hd: usize,
    nh: usize,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // Accumulators (a0+a2)+(a1+a3) of head h, as in `dot_avx2`.
    let head = |h: usize| {
        if h >= nh {
            return _mm256_setzero_ps();
        }
        let mut acc = [_mm256_setzero_ps(); 4];
        for i in (0..hd).step_by(LANES) {
            for (j, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + 8j + 8 <= hd, head h < nh (this fn's contract).
                unsafe {
                    let kv = _mm256_loadu_ps(k.add(i + 8 * j));
                    let qv = _mm256_loadu_ps(q.add(h * hd + i + 8 * j));
                    *a = _mm256_fmadd_ps(kv, qv, *a);
                }
            }
        }
        _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]))
    };
    // [v_a[l] + v_a[l+4] | v_b[l] + v_b[l+4]], l = 0..4.
    let halves = |a: __m256, b: __m256| {
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(a, b),
            _mm256_permute2f128_ps::<0x31>(a, b),
        )
    };
    let t04 = halves(head(0), head(4));
    let t15 = halves(head(1), head(5));
    let t26 = halves(head(2), head(6));
    let t37 = halves(head(3), head(7));
    // Lanes (t0+t1, t2+t3) of heads 0,1 | 4,5, then of 2,3 | 6,7; the
    // second add leaves heads 0..8 in order.
    let h01 = _mm256_hadd_ps(t04, t15);
    let h23 = _mm256_hadd_ps(t26, t37);
    _mm256_hadd_ps(h01, h23)
}

/// One 32-value slice of `NH` heads' f16 accumulators through a block's
/// `n` positions: at a new maximum (`rescale` says the block has one) a
/// head whose `ms` is not 1 is rescaled (by 1 it would be left as it is),
/// then `acc = f16(v * w + acc)`, as
/// [`scale_f16_avx2`](super::scale_f16_avx2) and
/// [`mad_f16_avx2`](super::mad_f16_avx2) do. Head `k`'s `ms` and `w` of
/// position `i` are at `i * 8 + k` from `mw`'s pointers.
///
/// # Safety
/// AVX2, FMA and F16C are present; each `acc` points at 32 values; `v` at
/// `n` rows of 32, `stride` apart; `mw` at `n` rows of eight values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn accumulate_avx2<const NH: usize>(
    acc: [*mut f32; NH],
    v: *const f32,
    stride: usize,
    n: usize,
    mw: (*const f32, *const f32),
    rescale: bool,
) {
    use std::arch::x86_64::*;
    let round = |x: __m256| _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x));
    let mut a = [[_mm256_setzero_ps(); 4]; NH];
    for (ah, p) in a.iter_mut().zip(acc) {
        for (j, a) in ah.iter_mut().enumerate() {
            // SAFETY: 32 values at each `acc` (this fn's contract).
            *a = unsafe { _mm256_loadu_ps(p.add(8 * j)) };
        }
    }
    for i in 0..n {
        if rescale {
            for (k, ah) in a.iter_mut().enumerate() {
                // SAFETY: row `i` of `n` (this fn's contract).
                let m = unsafe { *mw.0.add(i * HEAD_LANES + k) };
                if m != 1.0 {
                    let mv = _mm256_set1_ps(m);
                    for a in ah.iter_mut() {
                        *a = round(_mm256_mul_ps(*a, mv));
                    }
                }
            }
        }
        let mut w = [_mm256_setzero_ps(); NH];
        for (k, w) in w.iter_mut().enumerate() {
            // SAFETY: as above.
            *w = unsafe { _mm256_broadcast_ss(&*mw.1.add(i * HEAD_LANES + k)) };
        }
        for j in 0..4 {
            // SAFETY: row `i` of `n`, 32 values each (this fn's contract).
            let x = unsafe { _mm256_loadu_ps(v.add(i * stride + 8 * j)) };
            for (ah, w) in a.iter_mut().zip(&w) {
                ah[j] = round(_mm256_fmadd_ps(x, *w, ah[j]));
            }
        }
    }
    for (ah, p) in a.iter().zip(acc) {
        for (j, a) in ah.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { _mm256_storeu_ps(p.add(8 * j), *a) };
        }
    }
}

/// [`accumulate_avx2`] over every 32-value slice of `NH` heads whose
/// accumulators start at `acc`, `plen` apart.
///
/// # Safety
/// As for [`accumulate_avx2`], for `hd` (a multiple of 32) values at each
/// head's accumulator and in each row of `v`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn accumulate_heads<const NH: usize>(
    acc: *mut f32,
    plen: usize,
    v: *const f32,
    hd: usize,
    n: usize,
    mw: (*const f32, *const f32),
    rescale: bool,
) {
    for d in (0..hd).step_by(LANES) {
        // SAFETY: `d + 32 <= hd` values of each head and row (this fn's
        // contract).
        unsafe {
            let heads = std::array::from_fn(|k| acc.add(k * plen + d));
            accumulate_avx2::<NH>(heads, v.add(d), hd, n, mw, rescale);
        }
    }
}

/// glibc's `expf` (the FMA build its x86-64 dispatch picks, since 2.28)
/// for arguments below 88 in magnitude: `2^(k/32) * 2^(r/32)` from a table
/// of 32 entries and a cubic, in f64, each step with the roundings its
/// compiled code has.
#[cfg(target_arch = "x86_64")]
pub(super) mod glibc_expf {
    pub const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
    pub const SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000);
    pub const C: [f64; 3] = [
        f64::from_bits(0x3ebc_6af8_4b91_2394),
        f64::from_bits(0x3f2e_bfce_50fa_c4f3),
        f64::from_bits(0x3f96_2e42_ff0c_52d6),
    ];
    pub const TABLE: [u64; 32] = [
        0x3ff0000000000000,
        0x3fefd9b0d3158574,
        0x3fefb5586cf9890f,
        0x3fef9301d0125b51,
        0x3fef72b83c7d517b,
        0x3fef54873168b9aa,
        0x3fef387a6e756238,
        0x3fef1e9df51fdee1,
        0x3fef06fe0a31b715,
        0x3feef1a7373aa9cb,
        0x3feedea64c123422,
        0x3feece086061892d,
        0x3feebfdad5362a27,
        0x3feeb42b569d4f82,
        0x3feeab07dd485429,
        0x3feea47eb03a5585,
        0x3feea09e667f3bcd,
        0x3fee9f75e8ec5f74,
        0x3feea11473eb0187,
        0x3feea589994cce13,
        0x3feeace5422aa0db,
        0x3feeb737b0cdc5e5,
        0x3feec49182a3f090,
        0x3feed503b23e255d,
        0x3feee89f995ad3ad,
        0x3feeff76f2fb5e47,
        0x3fef199bdd85529c,
        0x3fef3720dcef9069,
        0x3fef5818dcfba487,
        0x3fef7c97337b9b5f,
        0x3fefa4afa2a490da,
        0x3fefd0765b6e4540,
    ];
    /// Arguments whose magnitude's bits reach this take glibc's special
    /// cases (overflow, underflow, infinities, NaN).
    pub const SPECIAL_BITS: i32 = 0x42b0_0000;
}

/// `expf` of eight lanes: the replica of glibc's where `fast` (it matched
/// this process's libm, see [`exp_avx2_matches_libm`]) and the argument is
/// in its main range, else libm's own.
///
/// # Safety
/// AVX2 and FMA are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn exp_avx2(
    fast: bool,
    x: std::arch::x86_64::__m256,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let special = if fast {
        let abs = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(i32::MAX));
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(
            abs,
            _mm256_set1_epi32(glibc_expf::SPECIAL_BITS - 1),
        )))
    } else {
        0xff
    };
    let mut r = if fast {
        // SAFETY: AVX2 and FMA are present (this fn's contract).
        let (lo, hi) = unsafe {
            (
                exp_pd_avx2(_mm256_cvtps_pd(_mm256_castps256_ps128(x))),
                exp_pd_avx2(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x))),
            )
        };
        _mm256_set_m128(hi, lo)
    } else {
        x
    };
    if special != 0 {
        let (mut xs, mut rs) = ([0.0f32; 8], [0.0f32; 8]);
        // SAFETY: eight values each.
        unsafe {
            _mm256_storeu_ps(xs.as_mut_ptr(), x);
            _mm256_storeu_ps(rs.as_mut_ptr(), r);
        }
        for (l, (r, x)) in rs.iter_mut().zip(xs).enumerate() {
            if special & (1 << l) != 0 {
                *r = x.exp();
            }
        }
        // SAFETY: eight values.
        r = unsafe { _mm256_loadu_ps(rs.as_ptr()) };
    }
    r
}

/// The main path of glibc's `expf` on four arguments widened to f64.
///
/// # Safety
/// AVX2 and FMA are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn exp_pd_avx2(xd: std::arch::x86_64::__m256d) -> std::arch::x86_64::__m128 {
    use glibc_expf::*;
    use std::arch::x86_64::*;
    let inv = _mm256_set1_pd(INV_LN2_N);
    let shift = _mm256_set1_pd(SHIFT);
    // kd = round(x*N/ln2) through the shift, its bits holding k.
    let kd = _mm256_fmadd_pd(inv, xd, shift);
    let ki = _mm256_castpd_si256(kd);
    let r = _mm256_fmsub_pd(inv, xd, _mm256_sub_pd(kd, shift));
    let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    // SAFETY: every index is below 32, the table's length.
    let t = unsafe { _mm256_i64gather_epi64::<8>(TABLE.as_ptr().cast(), idx) };
    let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
    let z = _mm256_fmadd_pd(r, _mm256_set1_pd(C[0]), _mm256_set1_pd(C[1]));
    let r2 = _mm256_mul_pd(r, r);
    let y = _mm256_fmadd_pd(r, _mm256_set1_pd(C[2]), _mm256_set1_pd(1.0));
    let y = _mm256_fmadd_pd(z, r2, y);
    _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
}

/// Whether [`exp_avx2`]'s replica gives this process's libm `expf` bit for
/// bit, checked once on a spread of the arguments attention takes (0 down
/// to -88, every binade). Another libm (or glibc before 2.28) falls back to
/// calling its own.
#[cfg(target_arch = "x86_64")]
pub(super) fn exp_avx2_matches_libm() -> bool {
    static MATCHES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MATCHES.get_or_init(|| {
        if !has_simd() {
            return false;
        }
        let n = 1u32 << 14;
        let top = glibc_expf::SPECIAL_BITS as u32;
        (0..n).step_by(8).all(|i| {
            let xs: [f32; 8] = std::array::from_fn(|l| {
                f32::from_bits(0x8000_0000 | ((i + l as u32) as u64 * top as u64 / n as u64) as u32)
            });
            let mut got = [0.0f32; 8];
            // SAFETY: `has_simd` said AVX2 and FMA are present; eight values.
            unsafe {
                use std::arch::x86_64::*;
                let r = exp_avx2(true, _mm256_loadu_ps(xs.as_ptr()));
                _mm256_storeu_ps(got.as_mut_ptr(), r);
            }
            got.iter()
                .zip(xs)
                .all(|(g, x)| g.to_bits() == x.exp().to_bits())
        })
    })
}
