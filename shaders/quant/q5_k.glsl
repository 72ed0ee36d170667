// Q5_K: 176-byte super-blocks of 256: d: f16, dmin: f16, scales[12] (as
// Q4_K), qh[32], qs[128] (as Q4_K). Bit s of qh[l] is the fifth bit of element
// 32s + l. value = d * scale * q - dmin * min.
// 176 bytes keeps blocks 4-byte aligned: word 0 = (d, dmin), words 1..3 =
// scales, words 4..11 = qh, words 12..43 = qs.
#include "kquant_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 176

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    vec2 dm = unpackHalf2x16(b.v[0]);
    uint s = j >> 2; // 32-element sub-block
    uvec2 sm = kquant_scale_min(b.v[1], b.v[2], b.v[3], s);
    float dl = dm.x * float(sm.x);
    float ml = dm.y * float(sm.y);
    // qh and qs bytes l0..l0+7 with l0 = 8(j % 4).
    uint m = 2u * (j & 3u);
    uint h0 = ((b.v[4u + m] >> s) & 0x01010101u) << 4;
    uint h1 = ((b.v[5u + m] >> s) & 0x01010101u) << 4;
    uint k = 12u + 8u * (s >> 1) + m;
    uint shift = 4u * (s & 1u);
    uint q0 = ((b.v[k] >> shift) & 0x0F0F0F0Fu) | h0;
    uint q1 = ((b.v[k + 1u] >> shift) & 0x0F0F0F0Fu) | h1;
    lo = dl * vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) - ml;
    hi = dl * vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) - ml;
}
