// MXFP4: 17-byte blocks of 32: e: E8M0 exponent, qs[16] in Q4_0's nibble
// order (byte i: element i low, i + 16 high); value = 2^(e - 128) *
// kvalues_mxfp4[q], ggml's E2M1 levels doubled to integers
// {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12} under half
// the E8M0 scale. 17 bytes keeps blocks byte-aligned only: blocks are
// read as the aligned words that hold them (every word read holds a byte
// of the block, so none lies outside the weight's allocation), shifted
// into place.
//
// The scale is built from its bits as ggml's GGML_E8M0_TO_FP32_HALF does.
// Exponents 0 and 1 give the subnormals 2^-128 and 2^-127, which a device
// that flushes f32 denormals reads as 0 (blocks whose values are all below
// 2^-124; no real weights).
#define QUANT_K 32
#define QUANT_BLOCK_BYTES 17

// The levels, four signed bytes to a word (level q in byte q & 3 of word
// q >> 2): a vector select and a bit-field extract per lookup, as
// iq4_common.glsl does for IQ4_NL's levels.
const uvec4 MXFP4_PACKED = uvec4(0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);

float mxfp4_scale(uint e) {
    return uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
}

float mxfp4_level(uint q) {
    return float(bitfieldExtract(int(MXFP4_PACKED[q >> 2]), int(8u * (q & 3u)), 8));
}

// Bytes a..a+7 of memory as two little-endian words, from the two or
// three aligned words that hold them.
uvec2 mxfp4_bytes8(uint64_t a) {
    U32s w = U32s(a & ~3ul);
    uint sh = uint(a & 3ul) * 8u;
    uint w0 = w.v[0];
    uint w1 = w.v[1];
    if (sh == 0u) {
        return uvec2(w0, w1);
    }
    uint w2 = w.v[2];
    return uvec2((w0 >> sh) | (w1 << (32u - sh)), (w1 >> sh) | (w2 << (32u - sh)));
}

// Byte a of memory, from the aligned word that holds it.
uint mxfp4_byte(uint64_t a) {
    return (U32s(a & ~3ul).v[0] >> (uint(a & 3ul) * 8u)) & 0xFFu;
}

// The four levels whose indices are the nibbles of `w` at bits shift,
// shift + 8, shift + 16, shift + 24 (shift 0 or 4).
vec4 mxfp4_levels4(uint w, uint shift) {
    uvec4 q = (uvec4(w, w >> 8, w >> 16, w >> 24) >> shift) & 0x0Fu;
    return vec4(mxfp4_level(q.x), mxfp4_level(q.y), mxfp4_level(q.z), mxfp4_level(q.w));
}

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    uint64_t b = row + uint64_t(ib) * QUANT_BLOCK_BYTES;
    float d = mxfp4_scale(mxfp4_byte(b));
    // Elements 8j..8j+7: qs bytes 8(j & 1)..+8 (block bytes 1 + 8(j & 1)..),
    // low nibbles for j < 2.
    uvec2 w = mxfp4_bytes8(b + 1ul + 8ul * (j & 1u));
    uint shift = 4u * (j >> 1);
    lo = mxfp4_levels4(w.x, shift) * d;
    hi = mxfp4_levels4(w.y, shift) * d;
}

// Integer form for the decode mat-vec over Q8_0 activations (matvec_int.comp):
// the 32 doubled levels as signed bytes, in the paired word order below;
// the half scale in dm.x, so (dm.x * d_x) * sum(q_w * q_x) is ggml's
// per-block product.
#define QUANT_Q8_BLOCK 1
#ifdef QUANT_INT
// ALU-bound as arithmetic: the levels of a word's four nibbles worked out
// on all four bytes at once (~16 operations) made the gpt-oss-20b expert
// mat-vec 27% of a Vulkan decode step more than the same kernel with a
// plain nibble mask (H200), and a lookup per byte by vector select, shift,
// mask and merge 3.5x slower than HIP's byte permutes. So the levels come from a
// table in shared memory instead, one lookup per byte (two quants):
// mxfp4_pairs[b] holds the level of b's low nibble in byte 0 and of its
// high nibble in byte 2. Two lookups, the second shifted up a byte, make
// a word of four levels in the order [lo(b0), lo(b1), hi(b0), hi(b1)],
// without assembling the low and high levels apart: block_q8 leaves the
// weight words in that "paired" order (QUANT_Q8_PAIRED), and the kernel
// puts each activation block in the same order once for all its rows
// (matvec_int.comp's pair_activations). The products are the same
// integers, so the sums are too.
#define QUANT_Q8_PAIRED 1
#define QUANT_TABLES 1
shared uint mxfp4_pairs[256];

// Level q (0..15) as a signed byte in the low 8 bits (a vector select and
// a bit-field extract).
uint mxfp4_level_byte(uint q) {
    return bitfieldExtract(MXFP4_PACKED[q >> 2], int(8u * (q & 3u)), 8);
}

// Entry b = i + WG_SIZE j of invocation i: with WG_SIZE a multiple of 16,
// its low nibble is the same for every j, so an invocation works out one
// low level and a high level an entry. The nibble arithmetic twice an entry
// had made the fill a quarter of a 32-invocation expert workgroup's
// (gpt-oss-20b tg128 +1% on the H200, docs/measurements.md session 33).
#if (WG_SIZE % 16) != 0
#error "the MXFP4 table's fill needs WG_SIZE a multiple of 16"
#endif
void quant_tables_init() {
    uint i = gl_LocalInvocationID.x;
    uint lo = mxfp4_level_byte(i & 0x0Fu);
    for (uint b = i; b < 256u; b += WG_SIZE) {
        mxfp4_pairs[b] = lo | (mxfp4_level_byte(b >> 4) << 16);
    }
}

void block_q8(uint64_t row, uint ib, out uint q[8], out vec2 dm) {
    // The block's 17 bytes lie in the 5 aligned words from its start's
    // word: the scale at bit sh of the first, the quants from bit sh + 8.
    uint64_t b = row + uint64_t(ib) * QUANT_BLOCK_BYTES;
    U32s w = U32s(b & ~3ul);
    uint sh = uint(b & 3ul) * 8u;
    uint words[5];
    for (uint i = 0u; i < 5u; i++) {
        words[i] = w.v[i];
    }
    dm = vec2(mxfp4_scale((words[0] >> sh) & 0xFFu), 0.0);
    // Quant word i: bits sh + 8 .. of words i, i + 1 (a funnel shift);
    // its bytes are elements 4i..4i+3 (low nibbles) and 4i+16.. (high).
    uint s = sh + 8u;
    for (uint i = 0u; i < 4u; i++) {
        uint qw = s == 32u ? words[i + 1u] : (words[i] >> s) | (words[i + 1u] << (32u - s));
        q[2u * i] = mxfp4_pairs[qw & 0xFFu] | (mxfp4_pairs[(qw >> 8) & 0xFFu] << 8);
        q[2u * i + 1u] = mxfp4_pairs[(qw >> 16) & 0xFFu] | (mxfp4_pairs[qw >> 24] << 8);
    }
}
#endif
