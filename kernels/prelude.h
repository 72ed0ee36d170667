// Device prelude for the HIP kernels, used instead of the ROCm / CUDA
// headers so that any clang with the target builds them:
//
//   AMDGPU (ROCm's clang or Debian's clang-19):
//     clang -x hip --offload-arch=gfx1100 --cuda-device-only -nogpulib
//           -nogpuinc --no-gpu-bundle-output -O3 -c
//   NVPTX (the verification GPU, loaded through the CUDA driver API):
//     clang -x cuda --cuda-gpu-arch=sm_90 --cuda-device-only -nocudalib
//           -nocudainc --cuda-feature=+ptx78 -O3 -S
//
// crates/rocmforge-hip/build.rs adds -ffp-contract=off (no silent a*b+c
// fusion: the CPU reference rounds every product, so kernels write
// fma() where they want one) and -fno-strict-aliasing.
//
// Nothing here calls ocml/ockl or libdevice: only clang builtins and
// inline asm. Every wave is 32 lanes (RDNA's wave32, NVIDIA's warp).
// Kernels use 1-D workgroups; the wave index is thread_id_x() / 32.
#pragma once

#if defined(__AMDGCN__)
#define RF_AMDGPU 1
#elif defined(__NVPTX__)
#define RF_NVPTX 1
#else
#error "prelude.h is device-only: compile with -x hip --offload-arch=gfx... or -x cuda --cuda-gpu-arch=sm_..."
#endif

// ---- Types -------------------------------------------------------------

typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef _Float16 half;

typedef float float2 __attribute__((ext_vector_type(2)));
typedef float float8 __attribute__((ext_vector_type(8)));
typedef uint32_t uint2 __attribute__((ext_vector_type(2)));
typedef uint32_t uint4 __attribute__((ext_vector_type(4)));
typedef half half8 __attribute__((ext_vector_type(8)));
typedef half half16 __attribute__((ext_vector_type(16)));

// ---- Qualifiers --------------------------------------------------------

#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif

// Helpers: always inlined, so pointers into __shared__ arrays keep their
// address space (LDS instructions on AMDGPU, not flat ones).
#define DEV static __device__ inline __attribute__((always_inline))
// The same for member functions (which cannot be static).
#define DEV_METHOD __device__ inline __attribute__((always_inline))
// Kernels: unmangled names for hipModuleGetFunction / cuModuleGetFunction.
#define KERNEL extern "C" __global__
// The workgroup size a kernel is launched with. Required on every kernel:
// without it AMDGPU assumes 1024 threads and caps registers to fit them.
#if RF_AMDGPU
#define LAUNCH_BOUNDS(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
#else
#define LAUNCH_BOUNDS(n) __attribute__((launch_bounds(n)))
#endif

#define WAVE_SIZE 32u

// Every wave-level helper below (the butterflies from distance 16, lane_id
// from mbcnt_lo, wave_id = tid / 32) and every kernel's per-wave shared
// slots assume 32 lanes. build.rs passes -mno-wavefrontsize64, but GCN/CDNA
// (gfx6-gfx9, e.g. gfx90a, gfx942 via ROCMFORGE_GPU_TARGETS) only run wave64
// and clang ignores the flag there silently (the code object says
// .wavefront_size 64): the reductions would then be wrong, not slow. Refuse
// those targets at build time. (By family: __AMDGCN_WAVEFRONT_SIZE__ is
// deprecated from clang 20, where -Werror would reject its use.)
#if RF_AMDGPU && (defined(__GFX6__) || defined(__GFX7__) || defined(__GFX8__) || defined(__GFX9__))
#error "rocmforge's HIP kernels are written for 32-lane waves; gfx6-gfx9 (GCN, CDNA) run wave64 only"
#endif

// ---- Ids ---------------------------------------------------------------

#if RF_AMDGPU
DEV uint32_t thread_id_x() { return __builtin_amdgcn_workitem_id_x(); }
DEV uint32_t block_id_x() { return __builtin_amdgcn_workgroup_id_x(); }
DEV uint32_t block_id_y() { return __builtin_amdgcn_workgroup_id_y(); }
DEV uint32_t block_dim_x() { return __builtin_amdgcn_workgroup_size_x(); }
DEV uint32_t grid_dim_x() {
    // grid_size is in work-items (HSA dispatch packet), not workgroups.
    return (__builtin_amdgcn_grid_size_x() + block_dim_x() - 1u) / block_dim_x();
}
// mbcnt counts the set bits of the mask below this lane: its lane index.
DEV uint32_t lane_id() { return __builtin_amdgcn_mbcnt_lo(~0u, 0u); }
// readfirstlane tells the compiler the value is wave-uniform (an SGPR).
DEV uint32_t wave_id() { return __builtin_amdgcn_readfirstlane(thread_id_x() / WAVE_SIZE); }
#else
DEV uint32_t thread_id_x() { return __nvvm_read_ptx_sreg_tid_x(); }
DEV uint32_t block_id_x() { return __nvvm_read_ptx_sreg_ctaid_x(); }
DEV uint32_t block_id_y() { return __nvvm_read_ptx_sreg_ctaid_y(); }
DEV uint32_t block_dim_x() { return __nvvm_read_ptx_sreg_ntid_x(); }
DEV uint32_t grid_dim_x() { return __nvvm_read_ptx_sreg_nctaid_x(); }
DEV uint32_t lane_id() { return __nvvm_read_ptx_sreg_laneid(); }
DEV uint32_t wave_id() { return thread_id_x() / WAVE_SIZE; }
#endif

// ---- Barriers ----------------------------------------------------------

// Workgroup barrier with shared-memory ordering (HIP's __syncthreads).
DEV void block_barrier() {
#if RF_AMDGPU
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#else
    __syncthreads();
#endif
}

// Adds v to the shared-memory counter *p for the workgroup; returns the
// value before (LDS atomics on AMDGPU, atom.shared on NVIDIA).
DEV uint32_t shared_fetch_add(uint32_t* p, uint32_t v) {
    return __scoped_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __MEMORY_SCOPE_WRKGRP);
}

// Orders this thread's global-memory accesses before it against those
// after it for every workgroup of the device (HIP's __threadfence): the
// release before a device-scope count, the acquire after it.
DEV void device_fence() {
#if RF_AMDGPU
    __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
#else
    __nvvm_membar_gl();
#endif
}

// Adds v to the global counter *p, atomically for the whole device;
// returns the value before. Order it with device_fence.
DEV uint32_t device_fetch_add(uint32_t* p, uint32_t v) {
    return __scoped_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
}

// Called once by every thread of a workgroup, from uniform control flow,
// after the workgroup's global writes: counts the workgroup in *counter
// (zero before the launch) and tells all its threads whether it is the
// n-th, the last of the launch's n to finish. That one then sees every
// other workgroup's writes (device fences on both sides of the count) and
// finds the counter put back to zero for the next launch.
DEV bool last_to_finish(uint32_t* counter, uint32_t n) {
    __shared__ uint32_t last;
    device_fence();
    block_barrier();
    if (thread_id_x() == 0u) {
        last = device_fetch_add(counter, 1u) + 1u == n ? 1u : 0u;
    }
    block_barrier();
    if (last == 0u) {
        return false;
    }
    device_fence();
    if (thread_id_x() == 0u) {
        *counter = 0u;
    }
    return true;
}

// Orders shared-memory writes and reads among the lanes of one wave.
DEV void wave_barrier() {
#if RF_AMDGPU
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
    __nvvm_bar_warp_sync(0xffffffffu);
#endif
}

// ---- Lane shuffles and wave reductions ---------------------------------
// Call from wave-uniform control flow with all 32 lanes active: the
// butterfly reads every partner lane.

// The value of lane (lane_id() ^ mask).
DEV uint32_t wave_shfl_xor(uint32_t v, uint32_t mask) {
#if RF_AMDGPU
    // ds_bpermute takes a byte address: lane * 4.
    return (uint32_t)__builtin_amdgcn_ds_bpermute((int)((lane_id() ^ mask) << 2), (int)v);
#else
    return (uint32_t)__nvvm_shfl_sync_bfly_i32(0xffffffffu, (int)v, (int)mask, 0x1f);
#endif
}

DEV float wave_shfl_xor_f32(float v, uint32_t mask) {
    return __builtin_bit_cast(float, wave_shfl_xor(__builtin_bit_cast(uint32_t, v), mask));
}

// The value of lane `src` (the same for every lane: a broadcast).
DEV float wave_shfl_idx_f32(float v, uint32_t src) {
#if RF_AMDGPU
    return __builtin_bit_cast(
        float, __builtin_amdgcn_ds_bpermute((int)(src << 2), __builtin_bit_cast(int, v)));
#else
    return __builtin_bit_cast(float, __nvvm_shfl_sync_idx_i32(0xffffffffu, __builtin_bit_cast(int, v),
                                                              (int)src, 0x1f));
#endif
}

// `c ? a : b` with both values in registers: a select of two array
// elements may otherwise become a load through a selected address, and
// the array then lives in local memory.
DEV float pick(bool c, float a, float b) {
    uint32_t m = 0u - (uint32_t)c;
    return __builtin_bit_cast(float, (__builtin_bit_cast(uint32_t, a) & m) |
                                         (__builtin_bit_cast(uint32_t, b) & ~m));
}

// One reduce-scatter step: a lane with `mask`'s bit set keeps the upper
// half of `in` and sends the lower to its partner (lane ^ mask), which
// does the opposite; each kept value gains the partner's.
template <uint32_t N>
DEV void scatter_half(const float (&in)[2u * N], float (&out)[N], uint32_t mask) {
    bool up = (lane_id() & mask) != 0u;
#pragma unroll
    for (uint32_t i = 0u; i < N; i++) {
        out[i] = pick(up, in[i + N], in[i]) + wave_shfl_xor_f32(pick(up, in[i], in[i + N]), mask);
    }
}

// The wave sums of eight values v[0..8) by a reduce-scatter (partners 16,
// 8, 4 each take half of what is left) and the last two butterfly steps:
// lane l ends with the sum of v[wave_sum8_index(l)], j = 4 b4 + 2 b3 + b2
// of its bits, in 15 shuffles (eight wave_sums take 40).
DEV uint32_t wave_sum8_index(uint32_t lane) {
    return ((lane >> 4) & 1u) * 4u + ((lane >> 3) & 1u) * 2u + ((lane >> 2) & 1u);
}
// The lane that holds sum j (and three more do: bits 1 and 0 are free).
DEV uint32_t wave_sum8_lane(uint32_t j) {
    return ((j >> 2) & 1u) * 16u + ((j >> 1) & 1u) * 8u + (j & 1u) * 4u;
}
DEV float wave_sum8_scattered(const float (&v)[8]) {
    static_assert(WAVE_SIZE == 32u, "lane bits 4..0");
    float a4[4];
    float a2[2];
    float a1[1];
    scatter_half<4u>(v, a4, 16u);
    scatter_half<2u>(a4, a2, 8u);
    scatter_half<1u>(a2, a1, 4u);
    float sum = a1[0] + wave_shfl_xor_f32(a1[0], 2u);
    return sum + wave_shfl_xor_f32(sum, 1u);
}
// Sum over the wave, returned to every lane. Butterfly order (partners at
// distance 16, 8, 4, 2, 1): both partners add the same two values, so every
// lane ends with the same bits, and the order is the same on every target.
DEV float wave_sum(float v) {
    for (uint32_t m = 16u; m > 0u; m >>= 1) {
        v += wave_shfl_xor_f32(v, m);
    }
    return v;
}

DEV int32_t wave_sum_i32(int32_t v) {
    for (uint32_t m = 16u; m > 0u; m >>= 1) {
        v += (int32_t)wave_shfl_xor((uint32_t)v, m);
    }
    return v;
}

// f64 sums (RMSNorm's sum of squares, as the CPU reference): two words.
DEV double wave_sum_f64(double v) {
    for (uint32_t m = 16u; m > 0u; m >>= 1) {
        uint64_t u = __builtin_bit_cast(uint64_t, v);
        uint64_t lo = wave_shfl_xor((uint32_t)u, m);
        uint64_t hi = wave_shfl_xor((uint32_t)(u >> 32), m);
        v += __builtin_bit_cast(double, lo | (hi << 32));
    }
    return v;
}

DEV float wave_max(float v) {
    for (uint32_t m = 16u; m > 0u; m >>= 1) {
        v = __builtin_fmaxf(v, wave_shfl_xor_f32(v, m));
    }
    return v;
}

// ---- f16 ---------------------------------------------------------------
// Hardware conversions: both targets round f32 -> f16 to nearest even
// (v_cvt_f16_f32 in the default mode, cvt.rn.f16.f32).

DEV float f16_bits_to_f32(uint16_t bits) { return (float)__builtin_bit_cast(half, bits); }
DEV uint16_t f32_to_f16_bits(float f) { return __builtin_bit_cast(uint16_t, (half)f); }
// f rounded to the nearest f16 value, as an f32.
DEV float round_f16(float f) { return (float)(half)f; }

// ---- Math: clang builtins that lower on both targets -------------------
// sqrt and / are correctly rounded (HIP's default, NVPTX's sqrt.rn /
// div.rn); fma is one rounding; rint rounds half to even. __builtin_expf
// does NOT lower on NVPTX without libdevice, hence dev_expf below.

DEV float dev_sqrtf(float x) { return __builtin_sqrtf(x); }
DEV float dev_fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
DEV float dev_rintf(float x) { return __builtin_rintf(x); }
DEV float dev_fabsf(float x) { return __builtin_fabsf(x); }
DEV float dev_fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }

// e^x from plain f32 arithmetic, so it gives the same bits on every target
// (the hardware exp2 differs between vendors). Cody-Waite reduction
// x = n ln2 + r, |r| <= ln2/2, then Cephes' expf polynomial (within ~1.5
// ulp of the correctly rounded result over the normal range), scaled by
// 2^n exactly. Overflow gives +inf, underflow 0 or a subnormal.
DEV float dev_expf(float x) {
    if (x > 88.72283935546875f) {
        return __builtin_inff();
    }
    if (x < -103.97208f) {
        return 0.0f;
    }
    float n = dev_rintf(x * 1.44269504088896341f);
    float r = dev_fmaf(n, -0.693359375f, x);
    r = dev_fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = dev_fmaf(p, r, 1.3981999507e-3f);
    p = dev_fmaf(p, r, 8.3334519073e-3f);
    p = dev_fmaf(p, r, 4.1665795894e-2f);
    p = dev_fmaf(p, r, 1.6666665459e-1f);
    p = dev_fmaf(p, r, 5.0000001201e-1f);
    float e = dev_fmaf(p, r * r, r) + 1.0f;
    // Two steps keep 2^n representable for n in [-150, 128].
    int32_t ni = (int32_t)n;
    int32_t n1 = ni / 2;
    return __builtin_ldexpf(__builtin_ldexpf(e, n1), ni - n1);
}

// ---- 4 x int8 dot product ----------------------------------------------
// c + sum over the four bytes of a[i] * b[i], all bytes signed.
// One instruction where the target has it: v_dot4_i32_i8 (gfx1011/1012,
// gfx103x), v_dot4_i32_iu8 with both operands signed (gfx11, gfx12),
// dp4a (NVPTX). gfx1010 and anything unknown: the portable form.

DEV int32_t dot4_i8_portable(uint32_t a, uint32_t b, int32_t c) {
#if RF_AMDGPU
    // Opaque to the optimizer: otherwise it sign-extends every weight byte
    // once and keeps all of them live across the mat-vec's token loop
    // (127 VGPRs for matvec_q4_0 on gfx1010 instead of 99).
    asm volatile("" : "+v"(a));
#endif
#pragma unroll
    for (uint32_t i = 0u; i < 32u; i += 8u) {
        c += (int32_t)(int8_t)(a >> i) * (int32_t)(int8_t)(b >> i);
    }
    return c;
}

// The path, chosen once (RF_FORCE_PORTABLE_DOT4 tests the portable form
// on any target).
#if defined(RF_FORCE_PORTABLE_DOT4)
#define RF_DOT4_PORTABLE 1
#elif RF_AMDGPU && (defined(__GFX11__) || defined(__GFX12__))
#define RF_DOT4_SUDOT4 1
#elif RF_AMDGPU && (defined(__gfx1011__) || defined(__gfx1012__) || defined(__gfx1030__) ||      \
                    defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1033__) ||      \
                    defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__))
#define RF_DOT4_SDOT4 1
#elif RF_NVPTX
#define RF_DOT4_DP4A 1
#else
#define RF_DOT4_PORTABLE 1
#endif

DEV int32_t dot4_i8(uint32_t a, uint32_t b, int32_t c) {
#if RF_DOT4_SUDOT4
    return __builtin_amdgcn_sudot4(true, (int32_t)a, true, (int32_t)b, c, false);
#elif RF_DOT4_SDOT4
    return __builtin_amdgcn_sdot4((int32_t)a, (int32_t)b, c, false);
#elif RF_DOT4_DP4A
    int32_t d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    return dot4_i8_portable(a, b, c);
#endif
}

// ---- Matrix fragments: D = A * B + C, 16x16x16, f16 in, f32 accumulate --
//
// One wave multiplies a 16x16 A (M x K) by a 16x16 B (K x N) into a 16x16
// f32 accumulator. Kernels see three types and four functions:
//
//   FragA frag_a_load(const half* tile, uint32_t ld)
//       A[m][k] = tile[m * ld + k]            (row-major M x K)
//   FragB frag_b_load(const half* tile, uint32_t ld)
//       B[k][n] = tile[n * ld + k]            (B stored transposed, N x K:
//                                              a weight matrix's rows)
//   FragC frag_c_zero()
//   FragC mma_16x16x16(FragA a, FragB b, FragC c)     returns A * B + C
//
// tile must point into __shared__ memory, 16-byte aligned, with ld a
// multiple of 8 halves; every lane of the wave passes the same tile and ld
// (wave-uniform control flow, all lanes active). On the generic path the
// fragments only remember tile and ld and mma_16x16x16 reads shared memory,
// so the tile must stay unchanged until the mma.
//
// The accumulator is per lane: element e (0..7) of FragC::v holds
//   C[frag_c_row(e)][frag_c_col(e)]     (lane = lane_id(), h = lane / 16)
//
//   target          path            row                 col
//   gfx11 (RDNA3)   WMMA            2e + h              lane % 16
//   gfx12 (RDNA4)   WMMA gfx12      e + 8h              lane % 16
//   NVPTX sm_80+    2 x mma.m16n8k16  lane/4 + 8((e>>1)&1)  2(lane%4) + (e&1) + 8(e>>2)
//   others          shared/FMA      e + 8h              lane % 16
//
// so a kernel stores its results (with bounds checks, bias, ...) through
// frag_c_row / frag_c_col and never depends on the layout. Where the A and
// B registers come from (AMD matrix instruction calculator, PTX ISA):
//   gfx11: lane holds A row lane%16, k 0..15 (both half-waves the same),
//          and B column lane%16, k 0..15;
//   gfx12: lane holds A row lane%16, k {0..3, 8..11} + 4h, B likewise;
//   NVPTX: A regs {(g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)} as f16x2
//          pairs along k, g = lane/4, t = lane%4; B for n-tile j in {0,1}:
//          {(k 2t, n g+8j), (k 2t+8, n g+8j)}.

#if defined(RF_FORCE_GENERIC_MMA)
#define RF_MMA_GENERIC 1
#elif RF_AMDGPU && defined(__GFX11__)
#define RF_MMA_WMMA11 1
#elif RF_AMDGPU && defined(__GFX12__)
#define RF_MMA_WMMA12 1
#elif RF_NVPTX && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define RF_MMA_NV 1
#else
#define RF_MMA_GENERIC 1
#endif

struct FragC {
    float8 v;
};

DEV FragC frag_c_zero() {
    FragC c;
    c.v = (float8)(0.0f);
    return c;
}

#if RF_MMA_WMMA11

struct FragA {
    half16 v;
};
typedef FragA FragB;

DEV half16 load_row16(const half* tile, uint32_t ld) {
    const half* p = tile + (lane_id() % 16u) * ld;
    half8 lo = *(const half8*)p;
    half8 hi = *(const half8*)(p + 8);
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
DEV FragA frag_a_load(const half* tile, uint32_t ld) { return FragA{load_row16(tile, ld)}; }
DEV FragB frag_b_load(const half* tile, uint32_t ld) { return FragB{load_row16(tile, ld)}; }
DEV FragC mma_16x16x16(FragA a, FragB b, FragC c) {
    c.v = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a.v, b.v, c.v);
    return c;
}
DEV uint32_t frag_c_row(uint32_t e) { return 2u * e + lane_id() / 16u; }
DEV uint32_t frag_c_col(uint32_t) { return lane_id() % 16u; }

#elif RF_MMA_WMMA12

struct FragA {
    half8 v;
};
typedef FragA FragB;

DEV half8 load_row8(const half* tile, uint32_t ld) {
    uint32_t lane = lane_id();
    const half* p = tile + (lane % 16u) * ld + 4u * (lane / 16u);
    typedef half half4 __attribute__((ext_vector_type(4)));
    half4 lo = *(const half4*)p;
    half4 hi = *(const half4*)(p + 8);
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
}
DEV FragA frag_a_load(const half* tile, uint32_t ld) { return FragA{load_row8(tile, ld)}; }
DEV FragB frag_b_load(const half* tile, uint32_t ld) { return FragB{load_row8(tile, ld)}; }
DEV FragC mma_16x16x16(FragA a, FragB b, FragC c) {
    c.v = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a.v, b.v, c.v);
    return c;
}
DEV uint32_t frag_c_row(uint32_t e) { return e + 8u * (lane_id() / 16u); }
DEV uint32_t frag_c_col(uint32_t) { return lane_id() % 16u; }

#elif RF_MMA_NV

struct FragA {
    uint4 v;
};
struct FragB {
    uint4 v;
};

// Two halves along k at (row, k) of an ld-strided tile, as one f16x2.
DEV uint32_t pair_at(const half* tile, uint32_t ld, uint32_t row, uint32_t k) {
    return *(const uint32_t*)(tile + row * ld + k);
}
DEV FragA frag_a_load(const half* tile, uint32_t ld) {
    uint32_t g = lane_id() / 4u;
    uint32_t t = 2u * (lane_id() % 4u);
    FragA a;
    a.v = (uint4){pair_at(tile, ld, g, t), pair_at(tile, ld, g + 8u, t),
                  pair_at(tile, ld, g, t + 8u), pair_at(tile, ld, g + 8u, t + 8u)};
    return a;
}
DEV FragB frag_b_load(const half* tile, uint32_t ld) {
    uint32_t g = lane_id() / 4u;
    uint32_t t = 2u * (lane_id() % 4u);
    FragB b;
    b.v = (uint4){pair_at(tile, ld, g, t), pair_at(tile, ld, g, t + 8u),
                  pair_at(tile, ld, g + 8u, t), pair_at(tile, ld, g + 8u, t + 8u)};
    return b;
}
DEV FragC mma_16x16x16(FragA a, FragB b, FragC c) {
    float d0 = c.v[0], d1 = c.v[1], d2 = c.v[2], d3 = c.v[3];
    float d4 = c.v[4], d5 = c.v[5], d6 = c.v[6], d7 = c.v[7];
    // Columns 0..7, then 8..15 of the output tile.
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a.v[0]), "r"(a.v[1]), "r"(a.v[2]), "r"(a.v[3]), "r"(b.v[0]), "r"(b.v[1]));
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d4), "+f"(d5), "+f"(d6), "+f"(d7)
        : "r"(a.v[0]), "r"(a.v[1]), "r"(a.v[2]), "r"(a.v[3]), "r"(b.v[2]), "r"(b.v[3]));
    c.v = (float8){d0, d1, d2, d3, d4, d5, d6, d7};
    return c;
}
DEV uint32_t frag_c_row(uint32_t e) { return lane_id() / 4u + 8u * ((e >> 1) & 1u); }
DEV uint32_t frag_c_col(uint32_t e) { return 2u * (lane_id() % 4u) + (e & 1u) + 8u * (e >> 2); }

#else // RF_MMA_GENERIC

// No matrix cores (gfx10, or forced for testing): each lane computes its 8
// accumulator elements with f32 FMAs in k order, reading A rows (the same
// row for 16 lanes: a broadcast) and its B column straight from shared
// memory. The products of two f16 values are exact in f32, as on the
// matrix cores; only the summation order differs.
struct FragA {
    const half* tile;
    uint32_t ld;
};
typedef FragA FragB;

DEV FragA frag_a_load(const half* tile, uint32_t ld) { return FragA{tile, ld}; }
DEV FragB frag_b_load(const half* tile, uint32_t ld) { return FragB{tile, ld}; }
DEV FragC mma_16x16x16(FragA a, FragB b, FragC c) {
    // A compiler-only barrier: keeps the scheduler from hoisting the reads
    // of every multiply of a tile step ahead of the first (which needed
    // 165-168 VGPRs for matmul_f16 on gfx1010/gfx1030, 72 with it).
    asm volatile("" ::: "memory");
    uint32_t lane = lane_id();
    // 16-byte vector reads (the contract's alignment): without them gfx1010
    // (LDS misalignment bug) reads every half separately.
    const half8* bp = (const half8*)(b.tile + (lane % 16u) * b.ld);
    half8 b0 = bp[0];
    half8 b1 = bp[1];
#pragma unroll
    for (uint32_t e = 0u; e < 8u; e++) {
        const half8* ap = (const half8*)(a.tile + (e + 8u * (lane / 16u)) * a.ld);
        half8 a0 = ap[0];
        half8 a1 = ap[1];
        float acc = c.v[e];
#pragma unroll
        for (uint32_t k = 0u; k < 8u; k++) {
            acc = dev_fmaf((float)a0[k], (float)b0[k], acc);
        }
#pragma unroll
        for (uint32_t k = 0u; k < 8u; k++) {
            acc = dev_fmaf((float)a1[k], (float)b1[k], acc);
        }
        c.v[e] = acc;
    }
    return c;
}
DEV uint32_t frag_c_row(uint32_t e) { return e + 8u * (lane_id() / 16u); }
DEV uint32_t frag_c_col(uint32_t) { return lane_id() % 16u; }

#endif
