// IQ3_S: 110-byte super-blocks of 256: d: f16, qs[64] (low 8 bits of 9-bit
// lattice indices, one per 4 elements), qh[8] (bit k of qh[g]: the top bit
// of index k of 32-element group g), signs[32] (8 bits per 8 elements),
// scales[4] (a nibble per 32 elements, low first);
// value = d * (1 + 2s) * grid * sign. 2-byte aligned: the two indices of
// elements 8j..8j+7 are half 1 + j; qh at byte 66, signs at 74, scales at 106.
#define IQ_TABLE_IQ3S
#include "iq_grids.glsl"
#include "iq_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 110

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    uint g = j >> 2, l = j & 3u;
    uint s = bitfieldExtract(iq_byte(b, 106u + (g >> 1)), int(4u * (g & 1u)), 4);
    float db = d * float(1u + 2u * s);
    uint pair = uint(b.v[1u + j]);
    uint qh = iq_byte(b, 66u + g);
    uint i1 = (pair & 0xFFu) | (((qh >> (2u * l)) & 1u) << 8);
    uint i2 = (pair >> 8) | (((qh >> (2u * l + 1u)) & 1u) << 8);
    uint signs = iq_byte(b, 74u + j);
    uvec2 levels = uvec2(IQ3S_LEVELS[0], IQ3S_LEVELS[1]);
    lo = (db * iq3_coords4(IQ_POINT(IQ3S_POINTS, i1), levels)) * iq_sign4(signs, 0u);
    hi = (db * iq3_coords4(IQ_POINT(IQ3S_POINTS, i2), levels)) * iq_sign4(signs, 4u);
}
