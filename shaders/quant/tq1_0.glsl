// TQ1_0: 54-byte super-blocks of 256: qs[48], qh[4], d: f16. Five trits per
// byte, stored as ceil(t * 256 / 243) of their base-3 number t (first trit
// most significant), so trit n is ((byte * 3^n mod 256) * 3) >> 8. Elements
// 0..159: trit n of qs[m] at 32n + m; 160..239: trit n of qs[32 + m] at
// 160 + 16n + m; 240..255: trit n of qh[m] at 240 + 4n + m;
// value = (trit - 1) * d. 2-byte aligned: d is half 26.
#include "iq_common.glsl"

#define QUANT_K 256
#define QUANT_BLOCK_BYTES 54

// Trit n of each of the four bytes of `w` (bytes unsigned), as -1, 0, 1.
vec4 tq1_trits4(uint w, uint n) {
    uint pow3 = n == 0u ? 1u : n == 1u ? 3u : n == 2u ? 9u : n == 3u ? 27u : 81u;
    uvec4 q = ((uvec4(w, w >> 8, w >> 16, w >> 24) & 0xFFu) * pow3) & 0xFFu;
    return vec4(ivec4((q * 3u) >> 8) - 1);
}

void dequant8(uint64_t row, uint ib, uint j, out vec4 lo, out vec4 hi) {
    U16s b = U16s(row + uint64_t(ib) * QUANT_BLOCK_BYTES);
    float d = unpackHalf2x16(uint(b.v[26])).x;
    if (j < 20u) {
        // qs[8(j % 4)..+8], trit j / 4.
        uint k = 4u * (j & 3u);
        lo = tq1_trits4(iq_word(b, k), j >> 2) * d;
        hi = tq1_trits4(iq_word(b, k + 2u), j >> 2) * d;
    } else if (j < 30u) {
        // qs[32 + 8((j - 20) % 2)..+8], trit (j - 20) / 2.
        uint k = 16u + 4u * ((j - 20u) & 1u);
        lo = tq1_trits4(iq_word(b, k), (j - 20u) >> 1) * d;
        hi = tq1_trits4(iq_word(b, k + 2u), (j - 20u) >> 1) * d;
    } else {
        // qh[0..4], trits 2(j - 30) and 2(j - 30) + 1.
        uint w = iq_word(b, 24u);
        lo = tq1_trits4(w, 2u * (j - 30u)) * d;
        hi = tq1_trits4(w, 2u * (j - 30u) + 1u) * d;
    }
}
