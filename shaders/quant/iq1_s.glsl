// IQ1_S: 50-byte super-blocks of 256: d: f16, qs[32] (low 8 bits of each
// 8-element group's 11-bit lattice index), qh: u16[8], one per 32 elements:
// the four groups' top 3 index bits at bits 3k, the scale s at bits 12..14,
// the shift's sign at bit 15; value = d * (2s + 1) * (grid ± 1/8).
// 2-byte aligned: qs at byte 2, qh halves 17..24.
#include "iq1_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 50

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    uint qh = uint(b.v[17u + (j >> 2)]);
    float dl = d * float(2u * bitfieldExtract(qh, 12, 3) + 1u);
    float delta = (qh & 0x8000u) != 0u ? -0.125 : 0.125;
    uint index = iq_byte(b, 2u + j) | (bitfieldExtract(qh, int(3u * (j & 3u)), 3) << 8);
    iq1_group8(index, dl, delta, lo, hi);
}
