// IQ2_XXS: 66-byte super-blocks of 256: d: f16, then per 32 elements two
// little-endian u32: four 8-bit lattice indices (one per 8 elements), then
// four 7-bit sign fields (bits 7l..7l+6, eighth sign implied by parity) and
// the scale s in bits 28..31; value = d * (0.5 + s) * 0.25 * grid * sign.
// 2-byte aligned: half 0 = d, the 32 elements of group g at halves
// 1 + 4g .. 4 + 4g.
#define IQ_TABLE_IQ2XXS
#include "iq_grids.glsl"
#include "iq_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 66

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    uint g = j >> 2, l = j & 3u;
    uint aux = iq_word(b, 3u + 4u * g);
    float db = d * (0.5 + float(aux >> 28)) * 0.25;
    uint index = iq_byte(b, 2u + 8u * g + l);
    uint signs = iq_signs7(bitfieldExtract(aux, int(7u * l), 7));
    iq2_group8(IQ_POINT(IQ2XXS_POINTS, index), IQ2XXS_LEVELS[0], signs, db, lo, hi);
}
