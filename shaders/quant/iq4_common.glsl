// Shared by the IQ4_NL and IQ4_XS dequantizers: ggml's kvalues_iq4nl,
// {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113},
// packed four signed bytes to a word (level q in byte q & 3 of word q >> 2),
// so a lookup is a 4-way vector select plus a bit-field extract rather than
// an indexed array that some compilers spill to scratch memory.
#ifndef QUANT_IQ4_COMMON_GLSL
#define QUANT_IQ4_COMMON_GLSL

const uvec4 IQ4NL_PACKED = uvec4(0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);

float iq4nl_level(uint q) {
    return float(bitfieldExtract(int(IQ4NL_PACKED[q >> 2]), int(8u * (q & 3u)), 8));
}

// The four levels whose indices are the nibbles of `w` at bits
// shift, shift + 8, shift + 16, shift + 24 (shift 0 or 4).
vec4 iq4nl_levels4(uint w, uint shift) {
    uvec4 q = (uvec4(w, w >> 8, w >> 16, w >> 24) >> shift) & 0x0Fu;
    return vec4(iq4nl_level(q.x), iq4nl_level(q.y), iq4nl_level(q.z), iq4nl_level(q.w));
}

#endif
