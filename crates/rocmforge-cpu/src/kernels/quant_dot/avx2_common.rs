//! AVX2 building blocks shared by the quantized kernels.
//!
//! Every kernel is generic over `T`, the number of activation rows (tokens)
//! it dots one weight row with: a weight block is unpacked once and reused for
//! all `T` tokens, which is where prefill gets its speed. Decode uses `T = 1`.
//!
//! Integer products use `maddubs` (u8 × i8 → pairwise i16 sums), so one side
//! must be unsigned. Weights with an offset (Q4_0's `q - 8`, Q6_K's `q - 32`,
//! ...) either fold the offset into the activation sums or use the sign trick:
//! `|x| * (y * sign(x))`. Activation quants are within ±127, which keeps
//! every pairwise i16 sum below 2 * 128 * 127 < 32768.
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX2, FMA and
//! F16C, and a pointer argument is valid for the unaligned read its name
//! says (2 bytes for `f16_at`, 16 for `load128` and `nibbles`, ...).

use std::arch::x86_64::*;

/// One f16 at `p` (unaligned) as f32.
///
/// Written in assembly because LLVM, seeing that only lane 0 matters, turns
/// the intrinsic sequence into a `vpinsrw` that merges into whatever register
/// is free, often a loop accumulator: that false dependency chained every
/// block's scale conversion to the previous block's FMA and cost 3x.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes at `p` (this fn's
    // contract).
    let bits = unsafe { (p as *const u16).read_unaligned() } as u32;
    let out: __m128;
    // SAFETY: the assembly only converts a register (F16C is enabled on this
    // fn) and touches no memory, stack or flags, as its options say.
    unsafe {
        std::arch::asm!(
            "vmovd {v}, {b:e}",
            "vcvtph2ps {v}, {v}",
            b = in(reg) bits,
            v = out(xmm_reg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    _mm_cvtss_f32(out)
}

/// Two consecutive f16 at `p` (unaligned) as f32, with one conversion.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16x2_at(p: *const u8) -> (f32, f32) {
    // SAFETY: the caller guarantees four readable bytes at `p` (this fn's
    // contract).
    let bits = unsafe { (p as *const u32).read_unaligned() };
    let out: __m128;
    // See f16_at for why this is assembly.
    // SAFETY: as in `f16_at`: a register conversion only.
    unsafe {
        std::arch::asm!(
            "vmovd {v}, {b:e}",
            "vcvtph2ps {v}, {v}",
            b = in(reg) bits,
            v = out(xmm_reg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    (_mm_cvtss_f32(out), _mm_cvtss_f32(_mm_movehdup_ps(out)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees four readable bytes at `p` (this fn's
    // contract).
    unsafe { (p as *const f32).read_unaligned() }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes at `p` (this fn's
    // contract); AVX is enabled on this fn.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load128(p: *const u8) -> __m128i {
    // SAFETY: the caller guarantees 16 readable bytes at `p` (this fn's
    // contract).
    unsafe { _mm_loadu_si128(p as *const __m128i) }
}

/// The 32 nibbles of a 16-byte payload in element order: byte `j` holds
/// element `j` (low nibbles) and `j + 16` (high nibbles).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes at `p` (this fn's
    // contract); AVX2 is enabled on this fn.
    let q = unsafe { load128(p) };
    let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// 0xFF in byte `i` where bit `i` of the little-endian u32 at `p` is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bits_to_bytes(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees four readable bytes at `p` (this fn's
    // contract).
    let bits = _mm256_set1_epi32(unsafe { (p as *const i32).read_unaligned() });
    // Byte i takes source byte i / 8 (every 4-byte group holds all four).
    let spread = _mm256_shuffle_epi8(
        bits,
        _mm256_setr_epi64x(
            0x0000_0000_0000_0000,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select)
}

/// Pairwise i16 sums of `x * y` widened to eight i32 lanes, for signed `x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_signed(ax: __m256i, x: __m256i, y: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// As [`dot_signed`] for unsigned `x` (at most 127).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_unsigned(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

/// `Σ x * y` over 32 elements weighted per 16-element group: `scales` holds
/// the low group's scale in its low eight i16 lanes and the high group's in
/// the high eight. `x` unsigned (at most 127).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_scaled(x: __m256i, y: __m256i, scales: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), scales)
}

/// Shuffle controls picking i8 scales `2r` (eight times) and `2r + 1` (eight
/// times) out of sixteen, for 32-element run `r` of a 16-scale super-block.
const RUN_SCALE_PICK: [[u8; 16]; 8] = {
    let mut t = [[0u8; 16]; 8];
    let mut r = 0;
    while r < 8 {
        let mut i = 0;
        while i < 16 {
            t[r][i] = (2 * r + i / 8) as u8;
            i += 1;
        }
        r += 1;
    }
    t
};

/// The i16 scale vector of run `r` (see [`dot_scaled`]) from sixteen i8
/// scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn run_scales(scales: __m128i, r: usize) -> __m256i {
    // SAFETY: a row of RUN_SCALE_PICK is 16 bytes (indexing checks `r`);
    // AVX2 is enabled on this fn.
    let pick = unsafe { load128(RUN_SCALE_PICK[r].as_ptr()) };
    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    // SAFETY: AVX2/FMA/F16C are enabled on this fn.
    unsafe { hsum128(s) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum128(s: __m128) -> f32 {
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// `acc += d * (i32 lanes as f32)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn fma_i32(acc: __m256, d: f32, v: __m256i) -> __m256 {
    _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(v), acc)
}
