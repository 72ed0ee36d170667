// TQ2_0: 66-byte super-blocks of 256: qs[64], d: f16. Element
// 128h + 32n + m is bits 2n..2n+1 of qs[32h + m], stored + 1;
// value = (q - 1) * d. 2-byte aligned: d is half 32.
#include "iq_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 66

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[32])).x;
    // Bytes 32(j / 16) + 8(j % 4)..+8, bits 2((j / 4) % 4).
    uint k = 16u * (j >> 4) + 4u * (j & 3u);
    uint shift = 2u * ((j >> 2) & 3u);
    uint q0 = (iq_word(b, k) >> shift) & 0x03030303u;
    uint q1 = (iq_word(b, k + 2u) >> shift) & 0x03030303u;
    lo = (vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) - 1.0) * d;
    hi = (vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) - 1.0) * d;
}
