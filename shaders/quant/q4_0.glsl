// Q4_0: blocks of 32, in ggml 18 bytes each: d: f16, qs[16]; byte i of qs
// holds element i (low nibble) and i + 16 (high nibble); value = d * (q - 8).
// On the device each row is split (QUANT_SPLIT_ROWS): the row's nb blocks'
// qs, 16 bytes each, from the row's start, then their d, 2 bytes each, from
// byte 16 * nb; the row keeps its 18 * nb bytes (the Vulkan backend repacks
// at upload, src/layout.rs). A block's quants are then one 16-byte run
// rather than eight 2-byte loads.
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 18
// Each block's first 2 bytes (d) go to the row's tail: see quant/README.md.
#define QUANT_SPLIT_ROWS 2

float q4_0_d(uint64_t row, uint ib) {
    uint64_t a = row + uint64_t(quant_row_blocks) * 16u + uint64_t(ib) * 2u;
    return unpackHalf2x16(uint(U16s(a).v[0])).x;
}

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    float d = q4_0_d(row, ib);
    // Elements 8j..8j+7: qs bytes 8(j & 1)..+8, low nibbles for j < 2.
    U16s b = U16s(row + uint64_t(ib) * 16u + 8u * (j & 1u));
    uint shift = 4u * (j >> 1);
    uint q0 = ((uint(b.v[0]) | (uint(b.v[1]) << 16)) >> shift) & 0x0F0F0F0Fu;
    uint q1 = ((uint(b.v[2]) | (uint(b.v[3]) << 16)) >> shift) & 0x0F0F0F0Fu;
    lo = (vec4(uvec4(q0, q0 >> 8, q0 >> 16, q0 >> 24) & 0xFFu) - 8.0) * d;
    hi = (vec4(uvec4(q1, q1 >> 8, q1 >> 16, q1 >> 24) & 0xFFu) - 8.0) * d;
}

// Integer form for the decode mat-vec over Q8_0 activations (matvec_int.comp):
// the 32 quants minus 8 as signed bytes, word i = elements 4i..4i+3.
#define QUANT_Q8_BLOCK 1
void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    dm = vec2(q4_0_d(row, ib), 0.0);
    uvec4 w4 = load16(row + uint64_t(ib) * 16u);
    for (uint i = 0u; i < 4u; i++) {
        q[i] = q8_sub_bytes(w4[i] & 0x0F0F0F0Fu, 0x08080808u);
        q[i + 4u] = q8_sub_bytes((w4[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    }
}
