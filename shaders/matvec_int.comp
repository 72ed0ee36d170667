// Decode matmul in integers (1..MV_MAX_TOKENS tokens) for the 32-element
// weight types: out[t][r] = x[t] . W[r] (+ bias[r]) (+ residual[t][r]),
// with x already quantized to Q8_0 / Q8_1 blocks (q8_packed.glsl):
// int8 quants at `x` (32 bytes per block) and per block (d, s) at
// `x_scales`. Per block, as ggml's CPU dot products:
//   (d_w * d_x) * sum(q_w * q_x)  [+ m_w * s_x for Q4_1 / Q5_1].
// The activations are a quarter of the f32 bytes and the products are exact,
// so the kernel is bound by reading the weights.
//
// A workgroup computes NR consecutive rows of one part; every invocation
// walks blocks tid, tid + WG_SIZE, ... of all NR rows, so each activation
// block is read once per NR rows and adjacent invocations read adjacent
// weight blocks. Partial sums are reduced with subgroupAdd and, when the
// workgroup holds several subgroups, through shared memory: correct for any
// subgroup size. INT_DOT uses GL_EXT_integer_dot_product (one instruction
// for four products where the hardware has it).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#include "quant.glsl"
#ifdef INT_DOT
#extension GL_EXT_integer_dot_product : require
#endif

layout(local_size_x = WG_SIZE) in;

#define MV_MAX_TOKENS 8

layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w[3];
    uint64_t out_[3];
    uint64_t bias[3];
    uint rows[3];
    uint k;
    uint n;
    uint n_parts;
    uint64_t x_scales;
    // Rows added to the output (a residual add fused into the projection),
    // laid out as the output; 0 = none.
    uint64_t residual;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer V2s { vec2 v[]; };

int dot4(uint a, uint b) {
#ifdef INT_DOT
    return dotPacked4x8EXT(int(a), int(b));
#else
    ivec4 x = ivec4(int(a << 24) >> 24, int(a << 16) >> 24, int(a << 8) >> 24, int(a) >> 24);
    ivec4 y = ivec4(int(b << 24) >> 24, int(b << 16) >> 24, int(b << 8) >> 24, int(b) >> 24);
    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
#endif
}

shared float part_sums[NR * MV_MAX_TOKENS][WG_SIZE];

// Adds block b of NR weight rows (q, dm) times block b of every token's
// activations to acc.
void accumulate(uint b, uint nb, uint q[NR][8], vec2 dm[NR], inout float acc[NR][MV_MAX_TOKENS]) {
    U4s xq = U4s(pc.x);
    V2s xs = V2s(pc.x_scales);
    for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
        if (t >= pc.n) {
            break;
        }
        uint xb = t * nb + b;
        uvec4 x0 = xq.v[2u * xb];
        uvec4 x1 = xq.v[2u * xb + 1u];
        vec2 s = xs.v[xb];
        for (uint r = 0u; r < NR; r++) {
            int sum = dot4(q[r][0], x0.x) + dot4(q[r][1], x0.y) + dot4(q[r][2], x0.z)
                + dot4(q[r][3], x0.w) + dot4(q[r][4], x1.x) + dot4(q[r][5], x1.y)
                + dot4(q[r][6], x1.z) + dot4(q[r][7], x1.w);
#ifdef QUANT_Q8_MIN
            acc[r][t] += (dm[r].x * s.x) * float(sum) + dm[r].y * s.y;
#else
            acc[r][t] += (dm[r].x * s.x) * float(sum);
#endif
        }
    }
}

void main() {
    uint g = wg_linear();
    uint p = 0u;
    while (p < pc.n_parts && g >= (pc.rows[p] + NR - 1u) / NR) {
        g -= (pc.rows[p] + NR - 1u) / NR;
        p++;
    }
    if (p >= pc.n_parts) {
        return;
    }
    uint m = pc.rows[p];
    uint r0 = g * NR;
    uint nb = pc.k / 32u;
    uint64_t row_bytes = uint64_t(nb) * QUANT_BLOCK_BYTES;
    float acc[NR][MV_MAX_TOKENS];
    for (uint r = 0u; r < NR; r++) {
        for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
            acc[r][t] = 0.0;
        }
    }
    for (uint b = gl_LocalInvocationID.x; b < nb; b += WG_SIZE) {
        uint q[NR][8];
        vec2 dm[NR];
        for (uint r = 0u; r < NR; r++) {
            // Rows past the end read row m - 1 again (never written out).
            uint rr = min(r0 + r, m - 1u);
            block_q8(pc.w[p] + uint64_t(rr) * row_bytes, b, q[r], dm[r]);
        }
        accumulate(b, nb, q, dm, acc);
    }
    // Subgroup sums, then one slot per subgroup in shared memory.
    // (Only the n sums in use: pc.n is uniform, so these branches are too.)
    for (uint r = 0u; r < NR; r++) {
        for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t < pc.n) {
                acc[r][t] = subgroupAdd(acc[r][t]);
            }
        }
    }
    uint i = gl_LocalInvocationID.x;
    if (gl_NumSubgroups > 1u) {
        if (subgroupElect()) {
            for (uint r = 0u; r < NR; r++) {
                for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
                    if (t < pc.n) {
                        part_sums[r * MV_MAX_TOKENS + t][gl_SubgroupID] = acc[r][t];
                    }
                }
            }
        }
        memoryBarrierShared();
        barrier();
        if (i < NR * pc.n) {
            uint r = i / pc.n;
            uint t = i % pc.n;
            float s = 0.0;
            for (uint j = 0u; j < gl_NumSubgroups; j++) {
                s += part_sums[r * MV_MAX_TOKENS + t][j];
            }
            acc[0][0] = s;
        }
    } else if (i < NR * pc.n) {
        // One subgroup: every invocation holds every sum; pick by index
        // (constant indices keep the array in registers).
        float s = 0.0;
        for (uint r = 0u; r < NR; r++) {
            for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
                if (r * pc.n + t == i && t < pc.n) {
                    s = acc[r][t];
                }
            }
        }
        acc[0][0] = s;
    }
    if (i < NR * pc.n) {
        uint r = r0 + i / pc.n;
        uint t = i % pc.n;
        if (r < m) {
            float s = acc[0][0];
            if (pc.bias[p] != 0ul) {
                s += F32s(pc.bias[p]).v[r];
            }
            if (pc.residual != 0ul) {
                s += F32s(pc.residual).v[t * m + r];
            }
            F32s(pc.out_[p]).v[t * m + r] = s;
        }
    }
}
