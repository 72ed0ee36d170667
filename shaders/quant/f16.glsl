// F16 weights, read in blocks of 32 (the interface's unit for plain floats).
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 64

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    // Eight halves at a 16-byte offset of a 64-byte block: 4-byte aligned.
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES + uint64_t(16u * j));
    lo = vec4(unpackHalf2x16(b.v[0]), unpackHalf2x16(b.v[1]));
    hi = vec4(unpackHalf2x16(b.v[2]), unpackHalf2x16(b.v[3]));
}
