// Prefill attention on matrix cores (VK_KHR_cooperative_matrix, subgroups
// of 32), FlashAttention-2 style: a workgroup takes BQ = 32 consecutive
// tokens of one head (grid ceil(n_tokens / 32) * n_head), two subgroups of
// 16 query rows each, and walks the cache in tiles of BK = 32 positions.
//
// Per tile: the workgroup stages the tile's K and V rows (f16, straight from
// the cache; positions outside the tile's range zero) in shared memory.
// Each subgroup then
//   1. multiplies its Q rows (f16 fragments, loaded once) by K^T: 16 x 32
//      scores in f32 accumulators, staged in shared memory;
//   2. runs the online softmax on them, two lanes per query row: scale,
//      mask (causal, the window of a sliding layer, tokens past the graph),
//      the new maximum, the rescale factor of what is accumulated, and the
//      weights e^(s - max) rounded to f16 for the next product;
//   3. multiplies the weights by V (16 x HD, f32 accumulators) and adds the
//      result into its rows' outputs, held in f32 registers (each lane half
//      a row), after rescaling them.
// At the end each row folds in the sink (gpt-oss) as attention_combine.comp
// does, and is written normalised, in f32.
//
// HD (64 or 128) is the head size; the host picks this kernel only for
// those, for tiles whose cache rows are 16-byte aligned. With KV_Q8_0 or
// KV_Q4_0 the cache is ggml's blocks (kv_cache.glsl), dequantized to f16
// as the tile is staged.
#version 460
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#include "kv_cache.glsl"

#ifndef HD
#define HD 128
#endif
#define BQ 32
#define BK 32
#define NT 64
#define HF (HD / 16)
#define HALF (HD / 2)

layout(local_size_x = NT) in;

#include "attention_push.glsl"

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>

// Row strides in f16vec4 (rows of HD or BK f16 plus 8: 16-byte aligned,
// spread over the banks) and in floats.
#define SK4 ((HD + 8) / 4)
#define SP4 ((BK + 8) / 4)
#define SS (BK + 4)
#define SO (HD + 4)

shared f16vec4 ks_[BK * SK4];
shared f16vec4 vs_[BK * SK4];
shared float ss_[2 * 16 * SS];
shared f16vec4 ps_[2 * 16 * SP4];
// Each subgroup's P x V product, before it joins the outputs.
shared float os_[2 * 16 * SO];

f16vec4 half4(uint a, uint b) {
    return f16vec4(unpackFloat2x16(a), unpackFloat2x16(b));
}

void main() {
    uint g = wg_linear();
    uint n_blocks = (pc.n_tokens + BQ - 1u) / BQ;
    if (g >= n_blocks * pc.n_head) {
        return;
    }
    uint t0 = (g / pc.n_head) * BQ;
    uint h = g % pc.n_head;
    uint kvh = h / (pc.n_head / pc.n_head_kv);
    uint q_dim = pc.n_head * HD;
    uint pos0 = step_pos0(pc.step);
    uint tid = gl_LocalInvocationID.x;
    uint sg = tid / 32u;
    uint lane = tid % 32u;
    // Lane's query row (of the subgroup's 16) and half of it.
    uint r = lane / 2u;
    uint half_ = lane % 2u;
    uint tok = t0 + sg * 16u + r;
    bool real = tok < pc.n_tokens;
    uint hi = real ? pos0 + tok + 1u : 0u;
    uint lo = real && pc.window != 0u && hi > pc.window ? hi - pc.window : 0u;
    // The workgroup's positions: from its first token's window start to
    // its last token.
    uint last = min(t0 + BQ, pc.n_tokens) - 1u;
    uint end = pos0 + last + 1u;
    uint begin = pc.window != 0u && pos0 + t0 + 1u > pc.window ? pos0 + t0 + 1u - pc.window : 0u;

    // Q tile -> shared f16 (in ks_, free until the first tile) -> fragments.
    {
        F32s qv = F32s(pc.q);
        for (uint e = tid; e < BQ * (HD / 4u); e += NT) {
            uint row = e / (HD / 4u);
            uint c4 = e % (HD / 4u);
            uint t = min(t0 + row, pc.n_tokens - 1u);
            uint at = t * q_dim + h * HD + 4u * c4;
            vec4 x = vec4(qv.v[at], qv.v[at + 1u], qv.v[at + 2u], qv.v[at + 3u]);
            ks_[row * SK4 + c4] = f16vec4(x);
        }
    }
    memoryBarrierShared();
    barrier();
    MA qf[HF];
    for (uint c = 0u; c < HF; c++) {
        coopMatLoad(qf[c], ks_, (sg * 16u) * SK4 + c * 4u, SK4, gl_CooperativeMatrixLayoutRowMajor);
    }
    barrier();

    float o[HALF];
    for (uint i = 0u; i < HALF; i++) {
        o[i] = 0.0;
    }
    float m = -1.0 / 0.0;
    float l = 0.0;
    U4s kc = U4s(pc.k_cache);
    U4s vc = U4s(pc.v_cache);
    // 16-byte units of a cache row, and of this head in it.
    uint row_units = pc.kv_dim / 8u;
    uint head_unit = kvh * (HD / 8u);
    uint ss0 = sg * 16u * SS;
    uint ps0 = sg * 16u * SP4;
    uint os0 = sg * 16u * SO;

    for (uint p0 = begin; p0 < end; p0 += BK) {
        // Stage the tile's K and V rows.
        for (uint e = tid; e < BK * (HD / 8u); e += NT) {
            uint j = e / (HD / 8u);
            uint u = e % (HD / 8u);
            uint p = p0 + j;
#ifdef KV_QUANTIZED
            // The unit's 8 values of K and of V (a head is whole blocks).
            vec4 k0 = vec4(0.0), k1 = vec4(0.0), v0 = vec4(0.0), v1 = vec4(0.0);
            if (p < end) {
                uint first = kvh * HD + 8u * u;
                uint bw = ((p % pc.ring) * (pc.kv_dim / 32u) + first / 32u) * KV_BLOCK_WORDS;
                uint i = (first % 32u) / 4u;
                U16s kq = U16s(pc.k_cache);
                U16s vq = U16s(pc.v_cache);
#ifdef KV_Q4_0
                const float zero = 8.0;
#else
                const float zero = 0.0;
#endif
                float dk = kv_scale(kq, bw);
                float dv = kv_scale(vq, bw);
                k0 = (kv_quants4(kq, bw, i) - zero) * dk;
                k1 = (kv_quants4(kq, bw, i + 1u) - zero) * dk;
                v0 = (kv_quants4(vq, bw, i) - zero) * dv;
                v1 = (kv_quants4(vq, bw, i + 1u) - zero) * dv;
            }
            ks_[j * SK4 + 2u * u] = f16vec4(k0);
            ks_[j * SK4 + 2u * u + 1u] = f16vec4(k1);
            vs_[j * SK4 + 2u * u] = f16vec4(v0);
            vs_[j * SK4 + 2u * u + 1u] = f16vec4(v1);
#else
            uvec4 kw = uvec4(0u);
            uvec4 vw = uvec4(0u);
            if (p < end) {
                uint at = (p % pc.ring) * row_units + head_unit + u;
                kw = kc.v[at];
                vw = vc.v[at];
            }
            ks_[j * SK4 + 2u * u] = half4(kw.x, kw.y);
            ks_[j * SK4 + 2u * u + 1u] = half4(kw.z, kw.w);
            vs_[j * SK4 + 2u * u] = half4(vw.x, vw.y);
            vs_[j * SK4 + 2u * u + 1u] = half4(vw.z, vw.w);
#endif
        }
        memoryBarrierShared();
        barrier();

        // 1. Scores: Q (16 x HD) x K^T (HD x BK).
        for (uint j = 0u; j < BK / 16u; j++) {
            ACC s = ACC(0.0);
            for (uint c = 0u; c < HF; c++) {
                MB kf;
                coopMatLoad(kf, ks_, (j * 16u) * SK4 + c * 4u, SK4, gl_CooperativeMatrixLayoutColumnMajor);
                s = coopMatMulAdd(qf[c], kf, s);
            }
            coopMatStore(s, ss_, ss0 + j * 16u, SS, gl_CooperativeMatrixLayoutRowMajor);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // 2. Online softmax, two lanes per row, BK / 2 scores each.
        float sc[BK / 2];
        float mx = -1.0 / 0.0;
        for (uint i = 0u; i < BK / 2u; i++) {
            uint col = half_ * (BK / 2u) + i;
            uint p = p0 + col;
            bool seen = p >= lo && p < hi;
            sc[i] = seen ? ss_[ss0 + r * SS + col] * pc.scale : -1.0 / 0.0;
            mx = max(mx, sc[i]);
        }
        mx = max(mx, subgroupShuffleXor(mx, 1u));
        float m_new = max(m, mx);
        float alpha = 1.0;
        float sum = 0.0;
        if (!isinf(m_new)) {
            alpha = exp(m - m_new); // 0 while m = -inf
            for (uint i = 0u; i < BK / 2u; i++) {
                sc[i] = exp(sc[i] - m_new); // 0 where unseen
                sum += sc[i];
            }
        } else {
            for (uint i = 0u; i < BK / 2u; i++) {
                sc[i] = 0.0;
            }
        }
        sum += subgroupShuffleXor(sum, 1u);
        l = l * alpha + sum;
        m = m_new;
        for (uint i = 0u; i < BK / 8u; i++) {
            ps_[ps0 + r * SP4 + half_ * (BK / 8u) + i] =
                f16vec4(sc[4u * i], sc[4u * i + 1u], sc[4u * i + 2u], sc[4u * i + 3u]);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // 3. P (16 x BK) x V (BK x HD), then into the outputs.
        MA pf[BK / 16];
        for (uint kk = 0u; kk < BK / 16u; kk++) {
            coopMatLoad(pf[kk], ps_, ps0 + kk * 4u, SP4, gl_CooperativeMatrixLayoutRowMajor);
        }
        for (uint c = 0u; c < HF; c++) {
            ACC pv = ACC(0.0);
            for (uint kk = 0u; kk < BK / 16u; kk++) {
                MB vf;
                coopMatLoad(vf, vs_, (kk * 16u) * SK4 + c * 4u, SK4, gl_CooperativeMatrixLayoutRowMajor);
                pv = coopMatMulAdd(pf[kk], vf, pv);
            }
            coopMatStore(pv, os_, os0 + c * 16u, SO, gl_CooperativeMatrixLayoutRowMajor);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint i = 0u; i < HALF; i++) {
            o[i] = fma(o[i], alpha, os_[os0 + r * SO + half_ * HALF + i]);
        }
        memoryBarrierShared();
        barrier();
    }

    if (!real) {
        return;
    }
    if (pc.sinks != 0ul) {
        float sink = F32s(pc.sinks).v[h];
        if (sink > m) {
            float ms = isinf(m) ? 0.0 : exp(m - sink);
            for (uint i = 0u; i < HALF; i++) {
                o[i] *= ms;
            }
            l = l * ms + 1.0;
        } else {
            l += exp(sink - m);
        }
    }
    float inv = l == 0.0 ? 0.0 : 1.0 / l;
    F32s out_row = F32s(pc.out_ + (uint64_t(tok) * q_dim + h * HD + half_ * HALF) * 4u);
    for (uint i = 0u; i < HALF; i++) {
        out_row.v[i] = o[i] * inv;
    }
}
