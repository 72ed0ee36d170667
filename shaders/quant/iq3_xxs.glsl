// IQ3_XXS: 98-byte super-blocks of 256: d: f16, qs[64] (8-bit lattice
// indices, one per 4 elements), then per 32 elements a little-endian u32 of
// four 7-bit sign fields (one per 8 elements, eighth sign implied by parity)
// and the scale s in bits 28..31; value = d * (0.5 + s) * 0.5 * grid * sign.
// 2-byte aligned: the two indices of elements 8j..8j+7 are half 1 + j, the
// word of group g halves 33 + 2g and 34 + 2g.
#define IQ_TABLE_IQ3XXS
#include "iq_grids.glsl"
#include "iq_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 98

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    uint aux = iq_word(b, 33u + 2u * (j >> 2));
    float db = d * (0.5 + float(aux >> 28)) * 0.5;
    uint signs = iq_signs7(bitfieldExtract(aux, int(7u * (j & 3u)), 7));
    uint pair = uint(b.v[1u + j]);
    uvec2 levels = uvec2(IQ3XXS_LEVELS[0], IQ3XXS_LEVELS[1]);
    lo = (db * iq3_coords4(IQ_POINT(IQ3XXS_POINTS, pair & 0xFFu), levels)) * iq_sign4(signs, 0u);
    hi = (db * iq3_coords4(IQ_POINT(IQ3XXS_POINTS, pair >> 8), levels)) * iq_sign4(signs, 4u);
}
