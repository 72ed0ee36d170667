// The KV cache's types for the HIP attention kernels (ops_attention.hip,
// ops_attention_cm.hip): f16 rows, or ggml's Q8_0 / Q4_0 blocks of 32
// values (rocmforge_core::plan::kv), a head being whole blocks.

#pragma once

#include "prelude.h"

namespace ops {

// How a lane reads head-dim pair w (values 2w, 2w + 1 of the head) of a
// cache row, the cache type being the decode and rows kernels' template
// parameter KV: head() points at the KV head's first value in row 0, a row
// is row_units(kv_dim) Units; a lane loads one 32-bit word per pair and
// position and holds it until the pair is used, lo() and hi() giving the
// two values from it.
//
// f16 (WORDS): the row is the pairs' words, one aligned 32-bit load of
// head[row + w]. The kernels write that load out themselves: made through
// a function it changed the f16 kernels' code (up to 4 VGPRs more).
struct KvF16 {
    using Unit = uint32_t;
    static constexpr bool WORDS = true;
    DEV const Unit* head(uint64_t cache, uint32_t kvh, uint32_t hd) {
        return dev_ptr<const Unit>(cache) + kvh * (hd / 2u);
    }
    DEV uint32_t row_units(uint32_t kv_dim) { return kv_dim / 2u; }
    DEV float lo(uint32_t word) { return f16_bits_to_f32((uint16_t)word); }
    DEV float hi(uint32_t word) { return f16_bits_to_f32((uint16_t)(word >> 16)); }
};

// ggml's blocks of 32 values, only 2-byte aligned: read in 16-bit units.
// Pair w lies in block w / 16 of the head (a head is whole blocks) as its
// pair w % 16. The word holds the block's f16 scale d in its low half and
// the pair's quants in its high half.
//
// Q8_0: {f16 d; int8 qs[32]} (17 units), value j = d * qs[j]; the pair's
// two int8s are one unit.
struct KvQ8_0 {
    using Unit = uint16_t;
    static constexpr bool WORDS = false;
    static constexpr uint32_t BLOCK_UNITS = 17u;
    DEV const Unit* head(uint64_t cache, uint32_t kvh, uint32_t hd) {
        return dev_ptr<const Unit>(cache) + kvh * (hd / 32u) * BLOCK_UNITS;
    }
    DEV uint32_t row_units(uint32_t kv_dim) { return kv_dim / 32u * BLOCK_UNITS; }
    DEV uint32_t load(const Unit* head, uint64_t row, uint32_t w) {
        const Unit* b = head + row + (w / 16u) * BLOCK_UNITS;
        return (uint32_t)b[0] | ((uint32_t)b[1u + w % 16u] << 16);
    }
    DEV float lo(uint32_t word) {
        return (float)(int8_t)(uint8_t)(word >> 16) * f16_bits_to_f32((uint16_t)word);
    }
    DEV float hi(uint32_t word) {
        return (float)(int8_t)(uint8_t)(word >> 24) * f16_bits_to_f32((uint16_t)word);
    }
    // Values j0 .. j0 + 7 (j0 a multiple of 8) of the block at b.
    DEV void dequant8(const Unit* b, uint32_t j0, float (&out)[8]) {
        float d = f16_bits_to_f32(b[0]);
#pragma unroll
        for (uint32_t i = 0u; i < 4u; i++) {
            uint32_t w = b[1u + j0 / 2u + i];
            out[2u * i] = (float)(int8_t)(uint8_t)w * d;
            out[2u * i + 1u] = (float)(int8_t)(uint8_t)(w >> 8) * d;
        }
    }
};

// Q4_0: {f16 d; uint8 qs[16]} (9 units), value j = d * (q_j - 8) with q_j
// the low nibble of qs[j] for j < 16, the high nibble of qs[j - 16] past.
// The pair's nibbles sit in one unit (qs[j], qs[j + 1], j = 2 (w % 16)
// mod 16), shifted down into the word's bytes 2 and 3.
struct KvQ4_0 {
    using Unit = uint16_t;
    static constexpr bool WORDS = false;
    static constexpr uint32_t BLOCK_UNITS = 9u;
    DEV const Unit* head(uint64_t cache, uint32_t kvh, uint32_t hd) {
        return dev_ptr<const Unit>(cache) + kvh * (hd / 32u) * BLOCK_UNITS;
    }
    DEV uint32_t row_units(uint32_t kv_dim) { return kv_dim / 32u * BLOCK_UNITS; }
    DEV uint32_t load(const Unit* head, uint64_t row, uint32_t w) {
        const Unit* b = head + row + (w / 16u) * BLOCK_UNITS;
        uint32_t i = w % 16u;
        uint32_t q = ((uint32_t)b[1u + i % 8u] >> (i < 8u ? 0u : 4u)) & 0x0F0Fu;
        return (uint32_t)b[0] | (q << 16);
    }
    DEV float lo(uint32_t word) {
        return (float)((int32_t)((word >> 16) & 15u) - 8) * f16_bits_to_f32((uint16_t)word);
    }
    DEV float hi(uint32_t word) {
        return (float)((int32_t)(word >> 24) - 8) * f16_bits_to_f32((uint16_t)word);
    }
    // Values j0 .. j0 + 7 (j0 a multiple of 8) of the block at b: low
    // nibbles of bytes j0 .. for j0 < 16, high nibbles of bytes j0 - 16 ..
    // past.
    DEV void dequant8(const Unit* b, uint32_t j0, float (&out)[8]) {
        float d = f16_bits_to_f32(b[0]);
        uint32_t sh = j0 < 16u ? 0u : 4u;
#pragma unroll
        for (uint32_t i = 0u; i < 4u; i++) {
            uint32_t w = (uint32_t)b[1u + (j0 % 16u) / 2u + i] >> sh;
            out[2u * i] = (float)((int32_t)(w & 15u) - 8) * d;
            out[2u * i + 1u] = (float)((int32_t)((w >> 8) & 15u) - 8) * d;
        }
    }
};

} // namespace ops
