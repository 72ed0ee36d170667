// IQ1_M: 56-byte super-blocks of 256: qs[32] (low 8 bits of each 8-element
// group's 11-bit lattice index), qh[16] (per 16 elements: each group's top 3
// index bits in the low 3 bits of its nibble, low nibble first, and its
// shift's sign at bit 3 of the nibble), scales: u16[4] (a 3-bit scale per 16
// elements, four to a half, in bits 0..11; the binary16 super-scale in the
// four top nibbles, lowest first); value = d * (2s + 1) * (grid ± 1/8).
// Read as halves: qs at byte 0, qh at 32, scales halves 24..27.
#include "iq1_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 56

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    uvec4 sc = uvec4(b.v[24], b.v[25], b.v[26], b.v[27]);
    uint bits = (sc.x >> 12) | ((sc.y >> 8) & 0x00F0u) | ((sc.z >> 4) & 0x0F00u) | (sc.w & 0xF000u);
    float d = unpackHalf2x16(bits).x;
    uint h = j >> 1; // 16-element scale group
    float dl = d * float(2u * bitfieldExtract(sc[h >> 2], int(3u * (h & 3u)), 3) + 1u);
    uint nibble = bitfieldExtract(iq_byte(b, 32u + h), int(4u * (j & 1u)), 4);
    float delta = (nibble & 8u) != 0u ? -0.125 : 0.125;
    uint index = iq_byte(b, j) | ((nibble & 7u) << 8);
    iq1_group8(index, dl, delta, lo, hi);
}
