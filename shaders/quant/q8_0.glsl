// Q8_0: 34-byte blocks of 32: d: f16, qs[32] (int8); value = d * q.
// 34 bytes keeps blocks 2-byte aligned only: read 16-bit halves.
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 34

vec2 i8x2(uint h) {
    // Two little-endian int8 in the low 16 bits, sign-extended.
    return vec2(float(int(h << 24) >> 24), float(int(h << 16) >> 24));
}

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[0])).x;
    uint h = 1u + 4u * j;
    lo = vec4(i8x2(uint(b.v[h])), i8x2(uint(b.v[h + 1u]))) * d;
    hi = vec4(i8x2(uint(b.v[h + 2u])), i8x2(uint(b.v[h + 3u]))) * d;
}

// Integer form for the decode mat-vec over Q8_0 activations (matvec_int.comp):
// the 32 signed quants, word i = elements 4i..4i+3.
#define QUANT_Q8_BLOCK 1
// Eight aligned words from the block's address rounded down to 4 bytes,
// the quants shifted out of them, and the last quant word (past those
// eight) as two halves: 10 loads where 16-bit halves take 17 (measured
// +2.5% on gpt-oss-20b's Vulkan decode, whose dense weights are Q8_0, on
// the H200; lavapipe loads lane by lane). The rounded-down address starts
// at most 2 bytes before the block, inside the buffer (whose start is
// 4-byte aligned).
void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    uint64_t a = row + uint64_t(ib) * QUANT_BLOCK_BYTES;
    bool aligned = (uint(a) & 2u) == 0u;
    U32s w = U32s(aligned ? a : a - 2ul);
    uint x[8];
    for (uint i = 0u; i < 8u; i++) {
        x[i] = w.v[i];
    }
    U16s h = U16s(a);
    // Aligned: x[0] = d | q bytes 0, 1 << 16, quant word i straddles x[i]
    // and x[i + 1]; else x[0]'s high half is d and x[i + 1] quant word i.
    dm = vec2(unpackHalf2x16(aligned ? x[0] : x[0] >> 16).x, 0.0);
    for (uint i = 0u; i < 7u; i++) {
        q[i] = aligned ? (x[i] >> 16) | (x[i + 1u] << 16) : x[i + 1u];
    }
    q[7] = uint(h.v[15]) | (uint(h.v[16]) << 16);
}
