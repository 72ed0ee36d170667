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
// weight blocks. Rows of fewer blocks than that (the tiny test models')
// split the workgroup into teams of NR rows each (team_rows, the TEAMS
// variant); a real model's rows are one team, the kernel without TEAMS.
// Partial sums are reduced with subgroupAdd and, when the
// workgroup holds several subgroups, through shared memory: correct for any
// subgroup size. INT_DOT uses GL_EXT_integer_dot_product (one instruction
// for four products where the hardware has it).
//
// MAT_ID (matvec_id_int*): the expert mat-vec of a mixture-of-experts
// layer in the same arithmetic, for every (token, choice) pair p:
//   out[p][r] = x[p / x_div] . W_e[r] (+ bias[e][r]),  e = ids[p],
// the ids read on the device (as matvec_id.comp); a workgroup is
// WG_SIZE / 32 teams of 32 invocations, each on NR rows of one pair
// (team_sums). With up_w set, a second stack of the same shape read
// with the same input and ids (up beside gate): the grid doubles and its
// second half computes it.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// The weight types' integer forms (block_q8), with their tables.
#define QUANT_INT 1
#include "quant.glsl"
#ifdef INT_DOT
#extension GL_EXT_integer_dot_product : require
#endif

layout(local_size_x = WG_SIZE) in;

#define MV_MAX_TOKENS 8

#ifdef MAT_ID
layout(push_constant, std430) uniform Push {
    uint64_t x;
    uint64_t w;
    uint64_t ids;
    uint64_t out_;
    uint64_t expert_bytes;
    uint rows;
    uint k;
    uint n_pairs;
    uint x_div;
    uint64_t bias; // per-expert rows of f32; 0: none
    uint64_t x_scales;
    uint64_t up_w; // 0: none
    uint64_t up_out;
    uint64_t up_bias;
} pc;
#else
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
    // Teams a workgroup is split into, NR rows each (a power of two;
    // team_rows).
    uint teams;
} pc;
#endif

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

#ifndef MAT_ID
shared float part_sums[NR * MV_MAX_TOKENS][WG_SIZE];
#endif

// The exact integer dot of a weight block's quants with an activation
// block's.
int block_dot(uint q[8], uvec4 x0, uvec4 x1) {
    return dot4(q[0], x0.x) + dot4(q[1], x0.y) + dot4(q[2], x0.z) + dot4(q[3], x0.w)
        + dot4(q[4], x1.x) + dot4(q[5], x1.y) + dot4(q[6], x1.z) + dot4(q[7], x1.w);
}

// Weight block (q, dm) times an activation block (quants x0, x1 and its
// (d, s)), as ggml's CPU dot products round.
float block_term(uint q[8], vec2 dm, uvec4 x0, uvec4 x1, vec2 s) {
    int sum = block_dot(q, x0, x1);
#ifdef QUANT_Q8_MIN
    return (dm.x * s.x) * float(sum) + dm.y * s.y;
#else
    return (dm.x * s.x) * float(sum);
#endif
}

#ifdef QUANT_Q8_PAIRED
// A block's activation words in the order block_q8 leaves a paired type's
// weight words (quant/mxfp4.glsl): word 2i holds elements 4i, 4i + 1,
// 4i + 16, 4i + 17 and word 2i + 1 elements 4i + 2, 4i + 3, 4i + 18,
// 4i + 19. Once per block, for all NR rows.
void pair_activations(inout uvec4 x0, inout uvec4 x1) {
    uvec4 a = (x0 & 0xFFFFu) | (x1 << 16);
    uvec4 c = (x0 >> 16) | (x1 & 0xFFFF0000u);
    x0 = uvec4(a.x, c.x, a.y, c.y);
    x1 = uvec4(a.z, c.z, a.w, c.w);
}
#else
void pair_activations(inout uvec4 x0, inout uvec4 x1) {}
#endif

// Tables a type's block_q8 reads from shared memory, filled by the whole
// workgroup before any row (from uniform control flow).
void init_tables() {
#ifdef QUANT_TABLES
    quant_tables_init();
    memoryBarrierShared();
    barrier();
#endif
}

#ifndef MAT_ID
// The workgroup's sums of acc[r][t] (r < NR, t < n): invocation i < NR * n
// returns sum (i / n, i % n). Subgroup sums, then one slot per subgroup in
// shared memory (only the n sums in use: n is uniform, so these branches
// are too).
float workgroup_sums(float acc[NR][MV_MAX_TOKENS], uint n) {
    for (uint r = 0u; r < NR; r++) {
        for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t < n) {
                acc[r][t] = subgroupAdd(acc[r][t]);
            }
        }
    }
    uint i = gl_LocalInvocationID.x;
    float s = 0.0;
    if (gl_NumSubgroups > 1u) {
        if (subgroupElect()) {
            for (uint r = 0u; r < NR; r++) {
                for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
                    if (t < n) {
                        part_sums[r * MV_MAX_TOKENS + t][gl_SubgroupID] = acc[r][t];
                    }
                }
            }
        }
        memoryBarrierShared();
        barrier();
        if (i < NR * n) {
            uint r = i / n;
            uint t = i % n;
            for (uint j = 0u; j < gl_NumSubgroups; j++) {
                s += part_sums[r * MV_MAX_TOKENS + t][j];
            }
        }
    } else if (i < NR * n) {
        // One subgroup: every invocation holds every sum; pick by index
        // (constant indices keep the array in registers).
        for (uint r = 0u; r < NR; r++) {
            for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
                if (r * n + t == i && t < n) {
                    s = acc[r][t];
                }
            }
        }
    }
    return s;
}

#endif

#ifdef MAT_ID
// Teams of ID_LANES invocations, NR rows each: a workgroup computes
// NR * ID_TEAMS rows of one pair and fills the tables once for all of
// them (each team a subgroup where subgroups have ID_LANES lanes).
#define ID_LANES 32
#define ID_TEAMS (WG_SIZE / ID_LANES)
#if (WG_SIZE % ID_LANES) != 0
#error "the expert mat-vec's workgroup is whole teams of 32"
#endif

// Per team, row and subgroup, the subgroup's part of the team's row sum.
shared float team_parts[ID_TEAMS][NR][WG_SIZE];

// Whether each subgroup is a team: ID_TEAMS subgroups of ID_LANES
// invocations (32-lane subgroups: NVIDIA, RDNA's wave32). Uniform. The
// other path costs the H200 4% of a gpt-oss-20b decode step (a barrier
// and twice the subgroup sums). lavapipe takes it even at 32 lanes (it
// reported one subgroup for a workgroup of 64), so this path's checks are
// the lent GPU's conformance runs (op_shapes, expert_types, weight_types).
bool subgroup_teams() {
    return gl_SubgroupSize == ID_LANES && gl_NumSubgroups == ID_TEAMS;
}

// Invocation `lane` < NR of team `team` gets the team's sum of acc[lane].
// Where subgroups are teams, their sums. Otherwise each subgroup sums
// every team's rows (zeros from invocations of other teams) and leaves
// them in shared memory, which the team's row lanes add up over the
// subgroups, whatever the subgroups' size and the order of invocations
// in them, as workgroup_sums does for one team.
float team_sums(float acc[NR], uint team, uint lane) {
    float s = 0.0;
    if (subgroup_teams()) {
        for (uint r = 0u; r < NR; r++) {
            float v = subgroupAdd(acc[r]);
            if (r == lane) {
                s = v;
            }
        }
        return s;
    }
    for (uint t = 0u; t < ID_TEAMS; t++) {
        for (uint r = 0u; r < NR; r++) {
            float v = subgroupAdd(team == t ? acc[r] : 0.0);
            if (subgroupElect()) {
                team_parts[t][r][gl_SubgroupID] = v;
            }
        }
    }
    memoryBarrierShared();
    barrier();
    if (lane < NR) {
        for (uint j = 0u; j < gl_NumSubgroups; j++) {
            s += team_parts[team][lane][j];
        }
    }
    return s;
}

void main() {
    init_tables();
    uint per_group = NR * ID_TEAMS;
    uint groups = (pc.rows + per_group - 1u) / per_group;
    uint g = wg_linear();
    uint per_stack = pc.n_pairs * groups;
    bool second = g >= per_stack;
    if (second && (pc.up_w == 0ul || g >= 2u * per_stack)) {
        return;
    }
    g -= second ? per_stack : 0u;
    uint64_t out_ = second ? pc.up_out : pc.out_;
    uint64_t bias = second ? pc.up_bias : pc.bias;
    uint p = g / groups;
    // A team is a subgroup where subgroups are teams (whatever the order of
    // invocations in them), else a run of ID_LANES invocations.
    bool sg = subgroup_teams();
    uint lane = sg ? gl_SubgroupInvocationID : gl_LocalInvocationID.x % ID_LANES;
    uint team = sg ? gl_SubgroupID : gl_LocalInvocationID.x / ID_LANES;
    uint r0 = (g % groups) * per_group + team * NR;
    // Ids are exact small integers stored as f32 (graph::Op::TopKGate).
    uint e = uint(F32s(pc.ids).v[p]);
    uint nb = pc.k / 32u;
    uint64_t row_bytes = uint64_t(nb) * QUANT_BLOCK_BYTES;
    uint64_t w = (second ? pc.up_w : pc.w) + uint64_t(e) * pc.expert_bytes;
    uint xb0 = (p / pc.x_div) * nb;
    U4s xq = U4s(pc.x);
    V2s xs = V2s(pc.x_scales);
    float acc[NR];
    for (uint r = 0u; r < NR; r++) {
        acc[r] = 0.0;
    }
    for (uint b = lane; b < nb; b += ID_LANES) {
        uint xb = xb0 + b;
        uvec4 x0 = xq.v[2u * xb];
        uvec4 x1 = xq.v[2u * xb + 1u];
        pair_activations(x0, x1);
        vec2 xsc = xs.v[xb];
        for (uint r = 0u; r < NR; r++) {
            uint q[8];
            vec2 dm;
            // Rows past the end read the last row again (never written out).
            uint rr = min(r0 + r, pc.rows - 1u);
            block_q8(w + uint64_t(rr) * row_bytes, b, q, dm);
            acc[r] += block_term(q, dm, x0, x1, xsc);
        }
    }
    float s = team_sums(acc, team, lane);
    uint r = r0 + lane;
    if (lane < NR && r < pc.rows) {
        if (bias != 0ul) {
            s += F32s(bias).v[e * pc.rows + r];
        }
        F32s(out_).v[p * pc.rows + r] = s;
    }
}
#else

// A workgroup split into pc.teams teams of `lanes` invocations, NR rows
// each (r0 + team * NR + r): each invocation walks blocks lane, lane +
// lanes, ... of its team's rows, leaves its sums in shared memory, and sum
// (team * NR + r) * n + t (the team's lanes for row r and token t, with
// the bias and residual added) is taken by invocation (that index) %
// WG_SIZE. Rows from the part's end on are read (the last row again) but
// not written.
void team_rows() {
    uint teams = pc.teams;
    uint per_group = NR * teams;
    uint g = wg_linear();
    uint p = 0u;
    while (p < pc.n_parts && g >= (pc.rows[p] + per_group - 1u) / per_group) {
        g -= (pc.rows[p] + per_group - 1u) / per_group;
        p++;
    }
    if (p >= pc.n_parts) {
        return;
    }
    uint m = pc.rows[p];
    uint n = pc.n;
    uint lanes = WG_SIZE / teams;
    uint i = gl_LocalInvocationID.x;
    uint r0 = g * per_group;
    uint team_r0 = r0 + (i / lanes) * NR;
    uint nb = pc.k / 32u;
    uint64_t row_bytes = uint64_t(nb) * QUANT_BLOCK_BYTES;
    float acc[NR][MV_MAX_TOKENS];
    for (uint r = 0u; r < NR; r++) {
        for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
            acc[r][t] = 0.0;
        }
    }
    U4s xq = U4s(pc.x);
    V2s xs = V2s(pc.x_scales);
    for (uint b = i % lanes; b < nb; b += lanes) {
        uint q[NR][8];
        vec2 dm[NR];
        for (uint r = 0u; r < NR; r++) {
            uint rr = min(team_r0 + r, m - 1u);
            block_q8(pc.w[p] + uint64_t(rr) * row_bytes, b, q[r], dm[r]);
        }
        for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t >= n) {
                break;
            }
            uint xb = t * nb + b;
            uvec4 x0 = xq.v[2u * xb];
            uvec4 x1 = xq.v[2u * xb + 1u];
            pair_activations(x0, x1);
            vec2 xsc = xs.v[xb];
            for (uint r = 0u; r < NR; r++) {
                acc[r][t] += block_term(q[r], dm[r], x0, x1, xsc);
            }
        }
    }
    for (uint r = 0u; r < NR; r++) {
        for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t < n) {
                part_sums[r * MV_MAX_TOKENS + t][i] = acc[r][t];
            }
        }
    }
    memoryBarrierShared();
    barrier();
    // Up to WG_SIZE * NR * n sums: an invocation may take several.
    for (uint o = i; o < teams * NR * n; o += WG_SIZE) {
        uint team = o / (NR * n);
        uint rt = (o / n) % NR;
        uint t = o % n;
        uint r = r0 + team * NR + rt;
        if (r < m) {
            float s = 0.0;
            for (uint j = 0u; j < lanes; j++) {
                s += part_sums[rt * MV_MAX_TOKENS + t][team * lanes + j];
            }
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

void main() {
    init_tables();
#ifdef TEAMS
    team_rows();
    return;
#endif
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
        // Each activation block read once for the NR rows.
        U4s xq = U4s(pc.x);
        V2s xs = V2s(pc.x_scales);
        for (uint t = 0u; t < MV_MAX_TOKENS; t++) {
            if (t >= pc.n) {
                break;
            }
            uint xb = t * nb + b;
            uvec4 x0 = xq.v[2u * xb];
            uvec4 x1 = xq.v[2u * xb + 1u];
            pair_activations(x0, x1);
            vec2 xsc = xs.v[xb];
            for (uint r = 0u; r < NR; r++) {
                acc[r][t] += block_term(q[r], dm[r], x0, x1, xsc);
            }
        }
    }
    float s = workgroup_sums(acc, pc.n);
    uint i = gl_LocalInvocationID.x;
    if (i < NR * pc.n) {
        uint r = r0 + i / pc.n;
        uint t = i % pc.n;
        if (r < m) {
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
#endif
