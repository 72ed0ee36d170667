// Host build of the weight-type readers (kernels/quant/*.h) for
// tests/quant_readers.rs: `quant_readers <suffix> <elements> <in> <out>`
// writes dequant8 of every 8-element unit of the <elements> values in <in>
// as little-endian f32 to <out>; `quant_readers int <suffix> ...` writes
// the integer form's values instead (block_q8: q * d + m per element, the
// quants signed, and m 0, but for Q4_1's and Q5_1's), for the types that have one. The readers are plain arithmetic on bytes,
// so compiled for the host (with the same -ffp-contract=off) they compute
// what they compute on the GPU; common.h's RF_QUANT_HOST_TEST swaps the one
// AMDGPU builtin they use for its model.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define __device__
#define DEV static inline __attribute__((always_inline))
typedef _Float16 half;
typedef float float2 __attribute__((ext_vector_type(2)));
typedef float float8 __attribute__((ext_vector_type(8)));
static inline float f16_bits_to_f32(uint16_t bits) { return (float)__builtin_bit_cast(half, bits); }
#define RF_QUANT_HOST_TEST 1
#include "quant/all.h"

template <typename T> static void run(const uint8_t* data, uint32_t elements, FILE* out) {
    for (uint32_t ib = 0; ib < elements / T::K; ib++) {
        for (uint32_t j = 0; j < T::K / 8u; j++) {
            float8 v = T::dequant8(data, ib, j);
            float f[8];
            for (int i = 0; i < 8; i++) f[i] = v[i];
            fwrite(f, 4, 8, out);
        }
    }
}

// block_q8's word i holds elements 4i..4i+3, a byte each.
template <typename T> static void run_int(const uint8_t* data, uint32_t elements, bool is_signed, FILE* out) {
    for (uint32_t ib = 0; ib < elements / 32u; ib++) {
        uint32_t q[8];
        float2 dm = T::block_q8(data, ib, q);
        float f[32];
        for (int e = 0; e < 32; e++) {
            uint32_t byte = (q[e / 4] >> (8 * (e % 4))) & 0xFFu;
            float v = is_signed ? (float)(int8_t)byte : (float)byte;
            // The signed forms' m is 0 by contract (NaN flags one that is
            // not); not added, so a -0 stays -0, as the reference has it.
            f[e] = is_signed ? (dm.y == 0.0f ? v * dm.x : __builtin_nanf("")) : v * dm.x + dm.y;
        }
        fwrite(f, 4, 32, out);
    }
}

int main(int argc, char** argv) {
    bool int_form = argc == 6 && !strcmp(argv[1], "int");
    if (int_form) {
        argv++;
        argc--;
    }
    if (argc != 5) return 2;
    const char* ty = argv[1];
    uint32_t elements = (uint32_t)atoi(argv[2]);
    FILE* in = fopen(argv[3], "rb");
    if (!in) return 3;
    fseek(in, 0, SEEK_END);
    long n = ftell(in);
    fseek(in, 0, SEEK_SET);
    // 16-byte aligned, as tensors are on the device (F32 reads vec4s).
    uint32_t* buf = (uint32_t*)aligned_alloc(16, ((size_t)n / 16 + 1) * 16);
    if (fread(buf, 1, (size_t)n, in) != (size_t)n) return 4;
    FILE* out = fopen(argv[4], "wb");
#define RUN(suffix, T) if (!strcmp(ty, #suffix)) { run<T>((const uint8_t*)buf, elements, out); fclose(out); return 0; }
#define RUN_INT(suffix, T) if (!strcmp(ty, #suffix)) { run_int<T>((const uint8_t*)buf, elements, strcmp(ty, "q4_1") && strcmp(ty, "q5_1"), out); fclose(out); return 0; }
    if (int_form) {
        RF_INT_WEIGHT_TYPES(RUN_INT)
        return 6;
    }
    RF_WEIGHT_TYPES(RUN)
    return 5;
}
