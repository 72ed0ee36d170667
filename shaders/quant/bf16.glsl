// BF16 weights, read in blocks of 32: a bf16 is the top half of an f32.
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 64

vec2 bf16x2(uint w) {
    return vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xFFFF0000u));
}

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U32s b = U32s(row + uint64_t(ib) * QUANT_BLOCK_BYTES + uint64_t(16u * j));
    lo = vec4(bf16x2(b.v[0]), bf16x2(b.v[1]));
    hi = vec4(bf16x2(b.v[2]), bf16x2(b.v[3]));
}
