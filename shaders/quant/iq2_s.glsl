// IQ2_S: 82-byte super-blocks of 256: d: f16, qs[32] (low 8 bits of each
// 8-element group's 10-bit lattice index), signs[32] (all 8 bits per group),
// qh[8] (top 2 index bits of group g at bits 2(g % 4) of qh[g / 4]),
// scales[8] (a nibble per 16 elements, low first);
// value = d * (0.5 + s) * 0.25 * grid * sign. 2-byte aligned: qs at byte 2,
// signs at 34, qh at 66, scales at 74.
#define IQ_TABLE_IQ2S
#include "iq_grids.glsl"
#include "iq_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 82

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    uint index = iq_byte(b, 2u + j) | (bitfieldExtract(iq_byte(b, 66u + (j >> 2)), int(2u * (j & 3u)), 2) << 8);
    uint s = bitfieldExtract(iq_byte(b, 74u + (j >> 2)), int(4u * ((j >> 1) & 1u)), 4);
    float db = d * (0.5 + float(s)) * 0.25;
    iq2_group8(IQ_POINT(IQ2S_POINTS, index), IQ2S_LEVELS[0], iq_byte(b, 34u + j), db, lo, hi);
}
