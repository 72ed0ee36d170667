// Rotary embedding in place, angle for angle as ggml: pair i of the token at
// position pos turns by freq_scale * (pos * theta_scale^i / freq_factor[i]),
// where pos * theta_scale^i is the chain of i f32 products ggml computes.
// cos/sin use an explicit range reduction and polynomials (Cephes sinf/cosf)
// instead of the device's sin/cos, whose precision Vulkan leaves undefined
// outside [-pi, pi]. One invocation per (token, head, pair); the position
// comes from the step-input region.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t step;
    uint64_t freq_factors; // 0 = none
    uint rows;
    uint n_heads;
    uint head_dim;
    uint n_rot;
    uint neox;
    float theta_scale;
    float freq_scale;
} pc;

// sin and cos of x, accurate to a few ulp for |x| < 8192 * pi/4 and
// degrading gracefully beyond.
vec2 sincos_(float x) {
    float ax = abs(x);
    float j = floor(ax * 1.27323954473516); // 4/pi
    uint q = uint(j);
    if ((q & 1u) != 0u) {
        q += 1u;
        j += 1.0;
    }
    q &= 7u;
    // Extended-precision pi/4 in three parts (Cody-Waite).
    precise float z = ((ax - j * 0.78515625) - j * 2.4187564849853515625e-4) - j * 3.77489497744594108e-8;
    float zz = z * z;
    float s = ((-1.9515295891e-4 * zz + 8.3321608736e-3) * zz - 1.6666654611e-1) * zz * z + z;
    float c = ((2.443315711809948e-5 * zz - 1.388731625493765e-3) * zz + 4.166664568298827e-2) * zz * zz - 0.5 * zz + 1.0;
    float sin_sign = 1.0;
    float cos_sign = 1.0;
    if (q > 3u) {
        q -= 4u;
        sin_sign = -1.0;
        cos_sign = -1.0;
    }
    if (q > 1u) {
        cos_sign = -cos_sign;
    }
    float sn = (q == 1u || q == 2u) ? c : s;
    float cs = (q == 1u || q == 2u) ? s : c;
    if (x < 0.0) {
        sin_sign = -sin_sign;
    }
    return vec2(sn * sin_sign, cs * cos_sign);
}

void main() {
    uint half_rot = pc.n_rot / 2u;
    uint idx = wg_linear() * 64u + gl_LocalInvocationID.x;
    uint per_row = pc.n_heads * half_rot;
    if (idx >= pc.rows * per_row) {
        return;
    }
    uint r = idx / per_row;
    uint head = (idx % per_row) / half_rot;
    uint i = idx % half_rot;
    float theta = float(step_pos0(pc.step) + r);
    for (uint q = 0u; q < i; q++) {
        theta *= pc.theta_scale;
    }
    float ff = pc.freq_factors != 0ul ? F32s(pc.freq_factors).v[i] : 1.0;
    vec2 sc = sincos_(pc.freq_scale * (theta / ff));
    uint a = pc.neox != 0u ? i : 2u * i;
    uint b = pc.neox != 0u ? i + half_rot : 2u * i + 1u;
    F32s x = F32s(pc.x + (uint64_t(r) * pc.n_heads + head) * pc.head_dim * 4u);
    float x0 = x.v[a];
    float x1 = x.v[b];
    x.v[a] = x0 * sc.y - x1 * sc.x;
    x.v[b] = x0 * sc.x + x1 * sc.y;
}
