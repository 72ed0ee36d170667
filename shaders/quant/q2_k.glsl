// Q2_K: 84-byte super-blocks of 256: scales[16], qs[64], d: f16, dmin: f16.
// Sub-block s (16 elements) has scale = low nibble, min = high nibble of
// scales[s]. qs is two 32-byte groups, one per 128 elements: byte l of group g
// holds element 128g + 32t + l at bits 2t..2t+1 (t in 0..3).
// value = d * scale * q - dmin * min.
// 84 bytes keeps blocks 4-byte aligned: words 0..3 = scales, 4..19 = qs,
// word 20 = (d, dmin).
#define QUANT_K 256
#define QUANT_BLOCK_BYTES 84

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    vec2 dm = unpackHalf2x16(b.v[20]);
    // Elements 8j..8j+7 lie in sub-block j / 2.
    uint sc = bitfieldExtract(b.v[j >> 3], int(8u * ((j >> 1) & 3u)), 8);
    float dl = dm.x * float(sc & 0x0Fu);
    float ml = dm.y * float(sc >> 4);
    // Group j / 16, bytes 8(j % 4)..+8, bits 2((j / 4) % 4).
    uint k = 4u + 8u * (j >> 4) + 2u * (j & 3u);
    uint shift = 2u * ((j >> 2) & 3u);
    uint q0 = (b.v[k] >> shift) & 0x03030303u;
    uint q1 = (b.v[k + 1u] >> shift) & 0x03030303u;
    lo = dl * vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) - ml;
    hi = dl * vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) - ml;
}
