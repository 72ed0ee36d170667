// Reading a quantized KV cache (rocmforge_core::plan::kv): with KV_Q8_0 or
// KV_Q4_0 defined, a cache row of kv_dim values is kv_dim / 32 of ggml's
// blocks back to back,
//   Q8_0: 34 bytes {f16 d; int8 qs[32]},  value j = d * qs[j];
//   Q4_0: 18 bytes {f16 d; uint8 qs[16]}, value j < 16 = d * ((qs[j] & 15) - 8),
//         value j >= 16 = d * ((qs[j - 16] >> 4) - 8);
// a head's values are whole blocks. Blocks are only 2-byte aligned, so they
// are read as 16-bit words (U16s at the layer's block base): word 0 of a
// block is d, word 1 + i holds quant bytes 2i (low) and 2i + 1 (high).
// Without either define the cache is f16 and nothing here is defined but
// KV_PAIR, which is then unpackHalf2x16.
#ifndef KV_CACHE_GLSL
#define KV_CACHE_GLSL

#include "types.glsl"

#if defined(KV_Q8_0) && defined(KV_Q4_0)
#error "KV_Q8_0 and KV_Q4_0 are exclusive"
#endif

#if defined(KV_Q8_0) || defined(KV_Q4_0)
#define KV_QUANTIZED
#ifdef KV_Q8_0
#define KV_BLOCK_WORDS 17u
#else
#define KV_BLOCK_WORDS 9u
#endif

// The scale of the block at word `bw`.
float kv_scale(U16s c, uint bw) {
    return unpackHalf2x16(uint(c.v[bw])).x;
}

// The stored quants of values 4i .. 4i + 3 (i < 8) of the block at word
// `bw`, as floats: Q8_0's signed quants; Q4_0's nibbles 0 .. 15 (the value
// is d * (q - 8)).
vec4 kv_quants4(U16s c, uint bw, uint i) {
#ifdef KV_Q8_0
    uint w = uint(c.v[bw + 1u + 2u * i]) | (uint(c.v[bw + 2u + 2u * i]) << 16);
    int s = int(w);
    return vec4(float(bitfieldExtract(s, 0, 8)), float(bitfieldExtract(s, 8, 8)),
                float(bitfieldExtract(s, 16, 8)), float(bitfieldExtract(s, 24, 8)));
#else
    // Values 0 .. 15 are the low nibbles of bytes 0 .. 15, values 16 .. 31
    // their high nibbles.
    uint at = bw + 1u + ((4u * i) % 16u) / 2u;
    uint w = uint(c.v[at]) | (uint(c.v[at + 1u]) << 16);
    uint sh = i >= 4u ? 4u : 0u;
    return vec4(float((w >> sh) & 15u), float((w >> (8u + sh)) & 15u),
                float((w >> (16u + sh)) & 15u), float((w >> (24u + sh)) & 15u));
#endif
}

// Value j (< 32) of the block at word `bw`, as ggml's to_float gives it.
float kv_value(U16s c, uint bw, uint j) {
    float d = kv_scale(c, bw);
#ifdef KV_Q8_0
    int w = int(uint(c.v[bw + 1u + j / 2u]));
    return float(bitfieldExtract(w, int(8u * (j & 1u)), 8)) * d;
#else
    uint w = uint(c.v[bw + 1u + (j % 16u) / 2u]);
    uint q = (w >> (8u * (j & 1u) + (j >= 16u ? 4u : 0u))) & 15u;
    return float(int(q) - 8) * d;
#endif
}

// Pair p (values 2p and 2p + 1, p counted from the row's start) of cache
// row `row` (rows of `row_blocks` blocks) in one u32: the block's scale in
// the high half, the 16-bit word holding both quants in the low half. KV_PAIR
// turns it into the two values, as unpackHalf2x16 does an f16 cache's word.
uint kv_load_pair(uint64_t cache, uint row, uint row_blocks, uint p) {
    U16s c = U16s(cache);
    uint bw = (row * row_blocks + p / 16u) * KV_BLOCK_WORDS;
#ifdef KV_Q8_0
    uint qw = p % 16u;
#else
    // Pairs 0 .. 7 of a block are low nibbles of bytes 2p, 2p + 1; pairs
    // 8 .. 15 the high nibbles of bytes 2p - 16, 2p - 15.
    uint qw = p % 8u;
#endif
    return (uint(c.v[bw]) << 16) | uint(c.v[bw + 1u + qw]);
}

// The two values of pair p from kv_load_pair's word `x`.
vec2 kv_pair(uint x, uint p) {
    float d = unpackHalf2x16(x >> 16).x;
#ifdef KV_Q8_0
    int s = int(x);
    return vec2(float(bitfieldExtract(s, 0, 8)), float(bitfieldExtract(s, 8, 8))) * d;
#else
    uint sh = (p % 16u) >= 8u ? 4u : 0u;
    return vec2(float(int((x >> sh) & 15u) - 8), float(int((x >> (8u + sh)) & 15u) - 8)) * d;
#endif
}

#define KV_PAIR(x, p) kv_pair(x, p)
#else
#define KV_PAIR(x, p) unpackHalf2x16(x)
#endif

#endif
