// IQ2_XS: 74-byte super-blocks of 256: d: f16, qs: u16[32] (one per 8
// elements: 9-bit lattice index | 7-bit sign field << 9, eighth sign implied
// by parity), scales[8] (a nibble per 16 elements, low first);
// value = d * (0.5 + s) * 0.25 * grid * sign. 2-byte aligned: half 0 = d,
// halves 1..32 = qs, 33..36 = scales.
#define IQ_TABLE_IQ2XS
#include "iq_grids.glsl"
#include "iq_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 74

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    uint q = uint(b.v[1u + j]);
    // Elements 8j..8j+7 are in 16-element scale group j / 2.
    uint s = bitfieldExtract(iq_byte(b, 66u + (j >> 2)), int(4u * ((j >> 1) & 1u)), 4);
    float db = d * (0.5 + float(s)) * 0.25;
    iq2_group8(IQ_POINT(IQ2XS_POINTS, q & 511u), IQ2XS_LEVELS[0], iq_signs7(q >> 9), db, lo, hi);
}
