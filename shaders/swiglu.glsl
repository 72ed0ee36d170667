// SwiGLU of four gate values g and four up values u, component by
// component, as eltwise.comp's OP_SWIGLU and OP_SWIGLU_OAI compute one
// value: one function for every producer that fuses it (quantize_act.comp's
// swiglu_q8 and swiglu_oai_q8, matvec_int.comp's expert mat-vec with the
// SwiGLU after gate and up), so each rounds as the plain op does.
#ifndef SWIGLU_GLSL
#define SWIGLU_GLSL

// silu(g) * u.
vec4 swiglu4(vec4 g, vec4 u) {
    return g / (1.0 + exp(-g)) * u;
}

// gpt-oss's clamped SwiGLU: x = min(g, limit), y = clamp(u, -limit,
// limit), x / (1 + e^(alpha * -x)) * (y + 1).
vec4 swiglu_oai4(vec4 g, vec4 u, float alpha, float limit) {
    vec4 x = min(g, limit);
    vec4 y = clamp(u, -limit, limit);
    return x / (1.0 + exp(alpha * -x)) * (y + 1.0);
}

#endif
