// Shared by the K-quant dequantizers (q4_k, q5_k).
#ifndef QUANT_KQUANT_COMMON_GLSL
#define QUANT_KQUANT_COMMON_GLSL

// The 6-bit (scale, min) of sub-block `s` (0..7) of a Q4_K/Q5_K super-block,
// from its 12-byte `scales` array read as three little-endian words w0..w2
// (ggml's get_scale_min_k4). Sub-blocks 0..3: scale = low six bits of byte s,
// min = low six bits of byte s + 4. Sub-blocks 4..7: low nibbles in byte s + 4
// (scale low, min high), top two bits in the spare bits 6..7 of bytes s - 4
// (scale) and s (min).
uvec2 kquant_scale_min(uint w0, uint w1, uint w2, uint s) {
    uint k = 8u * (s & 3u);
    uint a = (w0 >> k) & 0xFFu;
    uint b = (w1 >> k) & 0xFFu;
    if (s < 4u) {
        return uvec2(a & 63u, b & 63u);
    }
    uint c = (w2 >> k) & 0xFFu;
    return uvec2((c & 0x0Fu) | ((a >> 6) << 4), (c >> 4) | ((b >> 6) << 4));
}

#endif
