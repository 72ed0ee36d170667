// F32 weights, read in blocks of 32 (the interface's unit for plain floats).
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 128

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    // Rows of 32-multiple f32 from a 256-aligned tensor: 16-byte aligned.
    V4s b = V4s(row + uint64_t(ib) * QUANT_BLOCK_BYTES + uint64_t(32u * j));
    lo = b.v[0];
    hi = b.v[1];
}
