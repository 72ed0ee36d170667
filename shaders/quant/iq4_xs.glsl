// IQ4_XS: 136-byte super-blocks of 256: d: f16, scales_h: u16, scales_l[4],
// qs[128]. Sub-block ib (32 elements) has the 6-bit scale
// ls = (nibble ib of scales_l) | (bits 2ib..2ib+1 of scales_h) << 4 and its 16
// qs bytes in IQ4_NL's nibble order; value = d * (ls - 32) * kvalues_iq4nl[q].
// 136 bytes keeps blocks 4-byte aligned: word 0 = (d, scales_h),
// word 1 = scales_l, words 2..33 = qs.
#include "iq4_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 136

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    uint w0 = b.v[0];
    uint s = j >> 2; // sub-block
    uint ls = bitfieldExtract(b.v[1], int(4u * s), 4) | (bitfieldExtract(w0, int(16u + 2u * s), 2) << 4);
    float dl = unpackHalf2x16(w0).x * float(int(ls) - 32);
    // Within the sub-block: bytes 8(j & 1)..+8, low nibbles for (j & 2) == 0.
    uint k = 2u + 4u * s + 2u * (j & 1u);
    uint shift = 2u * (j & 2u);
    lo = iq4nl_levels4(b.v[k], shift) * dl;
    hi = iq4nl_levels4(b.v[k + 1u], shift) * dl;
}
