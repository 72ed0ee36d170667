// Q4_K: 144-byte super-blocks of 256: d: f16, dmin: f16, scales[12] (eight
// 6-bit scale/min pairs, see kquant_scale_min), qs[128]. qs is four 32-byte
// groups; byte l of group g holds element 64g + l (low nibble) and 64g + 32 + l
// (high nibble). value = d * scale * q - dmin * min.
// 144 bytes keeps blocks 4-byte aligned: word 0 = (d, dmin), words 1..3 =
// scales, words 4..35 = qs.
#include "kquant_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 144

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    vec2 dm = unpackHalf2x16(b.v[0]);
    uint s = j >> 2; // 32-element sub-block
    uvec2 sm = kquant_scale_min(b.v[1], b.v[2], b.v[3], s);
    float dl = dm.x * float(sm.x);
    float ml = dm.y * float(sm.y);
    // Group s / 2, bytes 8(j % 4)..+8, high nibbles for odd s.
    uint k = 4u + 8u * (s >> 1) + 2u * (j & 3u);
    uint shift = 4u * (s & 1u);
    uint q0 = (b.v[k] >> shift) & 0x0F0F0F0Fu;
    uint q1 = (b.v[k + 1u] >> shift) & 0x0F0F0F0Fu;
    lo = dl * vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) - ml;
    hi = dl * vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) - ml;
}
