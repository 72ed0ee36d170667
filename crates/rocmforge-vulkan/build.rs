//! Compiles the GLSL compute kernels in `shaders/` to SPIR-V with glslang
//! (built from source by the `glslang` crate, so nothing but the Rust
//! toolchain and a C++ compiler is needed) and writes `shaders.rs` into
//! OUT_DIR: one `(name, bytes)` entry per variant, embedded with
//! `include_bytes!`.
//!
//! A variant is a kernel file plus defines. Kernels that read weights are
//! compiled once per weight type (`-DWEIGHT_<TYPE>`); a type whose
//! `shaders/quant/<type>.glsl` does not exist yet is left out with a warning
//! (the backend then reports it as unsupported), while a file that exists
//! and fails to compile fails the build.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use glslang::include::{IncludeHandler, IncludeResult, IncludeType};
use glslang::{
    Compiler, CompilerOptions, ShaderInput, ShaderSource, ShaderStage, SourceLanguage,
    SpirvVersion, Target, VulkanVersion,
};

/// Weight types: (name used in variant names and quant/<name>.glsl, define).
const WEIGHT_TYPES: &[(&str, &str)] = &[
    ("f32", "WEIGHT_F32"),
    ("f16", "WEIGHT_F16"),
    ("bf16", "WEIGHT_BF16"),
    ("q4_0", "WEIGHT_Q4_0"),
    ("q4_1", "WEIGHT_Q4_1"),
    ("q5_0", "WEIGHT_Q5_0"),
    ("q5_1", "WEIGHT_Q5_1"),
    ("q8_0", "WEIGHT_Q8_0"),
    ("q2_k", "WEIGHT_Q2_K"),
    ("q3_k", "WEIGHT_Q3_K"),
    ("q4_k", "WEIGHT_Q4_K"),
    ("q5_k", "WEIGHT_Q5_K"),
    ("q6_k", "WEIGHT_Q6_K"),
    ("iq4_nl", "WEIGHT_IQ4_NL"),
    ("iq4_xs", "WEIGHT_IQ4_XS"),
    ("mxfp4", "WEIGHT_MXFP4"),
    ("iq2_xxs", "WEIGHT_IQ2_XXS"),
    ("iq2_xs", "WEIGHT_IQ2_XS"),
    ("iq2_s", "WEIGHT_IQ2_S"),
    ("iq3_xxs", "WEIGHT_IQ3_XXS"),
    ("iq3_s", "WEIGHT_IQ3_S"),
    ("iq1_s", "WEIGHT_IQ1_S"),
    ("iq1_m", "WEIGHT_IQ1_M"),
    ("tq1_0", "WEIGHT_TQ1_0"),
    ("tq2_0", "WEIGHT_TQ2_0"),
];

/// `-D` defines of one variant.
type Defines = &'static [(&'static str, &'static str)];

/// Kernel families compiled once per weight type: (variant prefix, file,
/// extra defines).
const WEIGHT_KERNELS: &[(&str, &str, Defines)] = &[
    ("embed", "embed.comp", &[("WG_SIZE", "64")]),
    ("matvec", "matvec.comp", &[("WG_SIZE", "64")]),
    // Short rows: the workgroup split into teams (MatPush.teams). Its own
    // variant: the split path in the one-team kernel, even untaken, cost
    // Qwen3-30B-A3B's decode 8% on the H200 (docs/measurements.md).
    (
        "matvec_teams",
        "matvec.comp",
        &[("WG_SIZE", "64"), ("TEAMS", "1")],
    ),
    ("matvec_id", "matvec_id.comp", &[("WG_SIZE", "64")]),
    ("matmul", "matmul.comp", &[]),
    // Matrix-core prefill (used only where the device has
    // VK_KHR_cooperative_matrix): 128x128 and 64x64 output tiles.
    ("matmul_cm", "matmul_coopmat.comp", &[]),
    (
        "matmul_cms",
        "matmul_coopmat.comp",
        &[("WARPS_R", "2"), ("FT", "2")],
    ),
    // The same with the next k step prefetched into registers.
    ("matmul_cmp", "matmul_coopmat.comp", &[("PREFETCH", "1")]),
    (
        "matmul_cmps",
        "matmul_coopmat.comp",
        &[("PREFETCH", "1"), ("WARPS_R", "2"), ("FT", "2")],
    ),
    // The grouped expert matmul (MAT_ID, over moe_group's table): portable
    // 64 rows x 32 pairs, and on matrix cores 64 x 64.
    ("matmul_id", "matmul.comp", &[("MAT_ID", "1")]),
    (
        "matmul_id_cms",
        "matmul_coopmat.comp",
        &[
            ("PREFETCH", "1"),
            ("WARPS_R", "2"),
            ("FT", "2"),
            ("MAT_ID", "1"),
        ],
    ),
];

/// Kernel families compiled for the weight types with an integer form
/// (`QUANT_Q8_BLOCK` in their quant/ file): the decode mat-vec over Q8
/// activations, as (variant prefix, file, defines): 64 invocations x 2 rows
/// per workgroup (measured best of 32x4, 64x2, 64x4, 128x1 on the H100);
/// `_dot` uses GL_EXT_integer_dot_product (picked where the device has it).
const INT_KERNELS: &[(&str, &str, Defines)] = &[
    (
        "matvec_int",
        "matvec_int.comp",
        &[("WG_SIZE", "64"), ("NR", "2")],
    ),
    (
        "matvec_int_dot",
        "matvec_int.comp",
        &[("WG_SIZE", "64"), ("NR", "2"), ("INT_DOT", "1")],
    ),
    // Short rows in teams, as `matvec_teams`.
    (
        "matvec_int_teams",
        "matvec_int.comp",
        &[("WG_SIZE", "64"), ("NR", "2"), ("TEAMS", "1")],
    ),
    (
        "matvec_int_dot_teams",
        "matvec_int.comp",
        &[
            ("WG_SIZE", "64"),
            ("NR", "2"),
            ("INT_DOT", "1"),
            ("TEAMS", "1"),
        ],
    ),
    // The expert mat-vec in the same arithmetic: two teams of 32
    // invocations, 4 rows of one pair each (a subgroup a team where
    // subgroups have 32 lanes, as HIP's wave per 4 rows; a Qwen3 down row
    // is 24 blocks, so wider teams leave lanes idle), the MXFP4 table
    // filled once for both. On the H200, gpt-oss-20b tg128 +4% over one
    // team of 32 (Qwen3 level); four teams were no faster
    // (docs/measurements.md, session 33).
    (
        "matvec_id_int",
        "matvec_int.comp",
        &[("WG_SIZE", "64"), ("NR", "4"), ("MAT_ID", "1")],
    ),
    (
        "matvec_id_int_dot",
        "matvec_int.comp",
        &[
            ("WG_SIZE", "64"),
            ("NR", "4"),
            ("MAT_ID", "1"),
            ("INT_DOT", "1"),
        ],
    ),
];

/// Kernels independent of the weight type: (variant name, file, defines).
const KERNELS: &[(&str, &str, Defines)] = &[
    // 512: a decode step normalises one row per workgroup, and 64
    // invocations walked 4096 values in a serial chain of loads (~10 µs per
    // norm on the H100; docs/vulkan.md).
    ("rmsnorm", "rmsnorm.comp", &[("WG_SIZE", "512")]),
    ("rope", "rope.comp", &[]),
    ("store_kv", "store_kv.comp", &[]),
    // A quantized cache (K and V of one type, kv_cache.glsl): an
    // invocation per block of 32 values.
    ("store_kv_q8_0", "store_kv.comp", &[("KV_Q8_0", "1")]),
    ("store_kv_q4_0", "store_kv.comp", &[("KV_Q4_0", "1")]),
    ("attn_temp", "attn_temp.comp", &[]),
    (
        "rmsnorm_q8",
        "rmsnorm.comp",
        &[("WG_SIZE", "512"), ("OUT_Q8", "1")],
    ),
    (
        "moe_sum_rmsnorm",
        "rmsnorm.comp",
        &[("WG_SIZE", "512"), ("MOE_SUM", "1")],
    ),
    (
        "moe_sum_rmsnorm_q8",
        "rmsnorm.comp",
        &[("WG_SIZE", "512"), ("MOE_SUM", "1"), ("OUT_Q8", "1")],
    ),
    ("rope_kv", "rope.comp", &[("STORE_KV", "1")]),
    ("norm_rope_kv", "rope.comp", &[("NORM", "1")]),
    ("attention", "attention.comp", &[("WG_SIZE", "64")]),
    // Over a quantized cache, where subgroups are narrower than 32 (every
    // step) or the device has no wide-subgroup kernel for the shape.
    (
        "attention_q8_0",
        "attention.comp",
        &[("WG_SIZE", "64"), ("KV_Q8_0", "1")],
    ),
    (
        "attention_q4_0",
        "attention.comp",
        &[("WG_SIZE", "64"), ("KV_Q4_0", "1")],
    ),
    // Prompt steps of at least 64 tokens: ggml's f32 tiles, as the CPU.
    (
        "attention_f32",
        "attention.comp",
        &[("WG_SIZE", "64"), ("F32_TILES", "1")],
    ),
    // Decode: 128 invocations, one head dimension each for 128-dim heads.
    (
        "attention_staged",
        "attention.comp",
        &[("WG_SIZE", "128"), ("ATT_DIMS", "2"), ("STAGE_KV", "1")],
    ),
    (
        "attention_staged_q8",
        "attention.comp",
        &[
            ("WG_SIZE", "128"),
            ("ATT_DIMS", "2"),
            ("STAGE_KV", "1"),
            ("OUT_Q8", "1"),
        ],
    ),
    // Decode at depth: runs of positions per workgroup, merged by the
    // combine (rocmforge_core::gpu::split).
    (
        "attention_split",
        "attention.comp",
        &[
            ("WG_SIZE", "128"),
            ("ATT_DIMS", "2"),
            ("STAGE_KV", "1"),
            ("SPLIT", "1"),
        ],
    ),
    // The same for subgroups of at least 32: rows read straight from the
    // cache by each subgroup, many workgroups in flight.
    (
        "attention_decode",
        "attention_decode.comp",
        &[("WG_SIZE", "128")],
    ),
    // Heads of up to 256 dimensions: 4 pairs per lane.
    (
        "attention_decode_wide",
        "attention_decode.comp",
        &[("WG_SIZE", "128"), ("KP", "4")],
    ),
    (
        "attention_decode_q8_0",
        "attention_decode.comp",
        &[("WG_SIZE", "128"), ("KV_Q8_0", "1")],
    ),
    (
        "attention_decode_q4_0",
        "attention_decode.comp",
        &[("WG_SIZE", "128"), ("KV_Q4_0", "1")],
    ),
    (
        "attention_decode_wide_q8_0",
        "attention_decode.comp",
        &[("WG_SIZE", "128"), ("KP", "4"), ("KV_Q8_0", "1")],
    ),
    (
        "attention_decode_wide_q4_0",
        "attention_decode.comp",
        &[("WG_SIZE", "128"), ("KP", "4"), ("KV_Q4_0", "1")],
    ),
    // Prefill on the same devices: 4 tokens of a head per workgroup.
    (
        "attention_rows",
        "attention_rows.comp",
        &[("WG_SIZE", "128")],
    ),
    (
        "attention_rows_wide",
        "attention_rows.comp",
        &[("WG_SIZE", "128"), ("KP", "4")],
    ),
    (
        "attention_rows_q8_0",
        "attention_rows.comp",
        &[("WG_SIZE", "128"), ("KV_Q8_0", "1")],
    ),
    (
        "attention_rows_q4_0",
        "attention_rows.comp",
        &[("WG_SIZE", "128"), ("KV_Q4_0", "1")],
    ),
    (
        "attention_rows_wide_q8_0",
        "attention_rows.comp",
        &[("WG_SIZE", "128"), ("KP", "4"), ("KV_Q8_0", "1")],
    ),
    (
        "attention_rows_wide_q4_0",
        "attention_rows.comp",
        &[("WG_SIZE", "128"), ("KP", "4"), ("KV_Q4_0", "1")],
    ),
    // Prefill on matrix cores (VK_KHR_cooperative_matrix devices only):
    // 32 tokens by 32 positions per tile, heads of 128 and 64.
    ("attention_cm", "attention_coopmat.comp", &[("HD", "128")]),
    ("attention_cm64", "attention_coopmat.comp", &[("HD", "64")]),
    (
        "attention_cm_q8_0",
        "attention_coopmat.comp",
        &[("HD", "128"), ("KV_Q8_0", "1")],
    ),
    (
        "attention_cm64_q8_0",
        "attention_coopmat.comp",
        &[("HD", "64"), ("KV_Q8_0", "1")],
    ),
    (
        "attention_cm_q4_0",
        "attention_coopmat.comp",
        &[("HD", "128"), ("KV_Q4_0", "1")],
    ),
    (
        "attention_cm64_q4_0",
        "attention_coopmat.comp",
        &[("HD", "64"), ("KV_Q4_0", "1")],
    ),
    (
        "attention_combine",
        "attention_combine.comp",
        &[("WG_SIZE", "128"), ("ATT_DIMS", "2")],
    ),
    (
        "attention_combine_q8",
        "attention_combine.comp",
        &[("WG_SIZE", "128"), ("ATT_DIMS", "2"), ("OUT_Q8", "1")],
    ),
    ("add", "eltwise.comp", &[("OP_ADD", "1")]),
    ("swiglu", "eltwise.comp", &[("OP_SWIGLU", "1")]),
    ("copy", "eltwise.comp", &[("OP_COPY", "1")]),
    ("scale", "eltwise.comp", &[("OP_SCALE", "1")]),
    ("geglu", "eltwise.comp", &[("OP_GEGLU", "1")]),
    ("swiglu_oai", "eltwise.comp", &[("OP_SWIGLU_OAI", "1")]),
    ("sigmoid_gate", "eltwise.comp", &[("OP_SIGMOID_GATE", "1")]),
    ("quantize_q8_0", "quantize_act.comp", &[("ACT_Q8_0", "1")]),
    ("quantize_q8_k", "quantize_act.comp", &[("ACT_Q8_K", "1")]),
    (
        "quantize_q8_packed",
        "quantize_act.comp",
        &[("ACT_Q8_PACKED", "1")],
    ),
    (
        "swiglu_q8",
        "quantize_act.comp",
        &[("ACT_Q8_PACKED", "1"), ("SWIGLU", "1")],
    ),
    (
        "swiglu_oai_q8",
        "quantize_act.comp",
        &[("ACT_Q8_PACKED", "1"), ("SWIGLU_OAI", "1")],
    ),
    ("quantize_f16", "quantize_act.comp", &[("ACT_F16", "1")]),
    ("quantize_bf16", "quantize_act.comp", &[("ACT_BF16", "1")]),
    (
        "moe_route",
        "moe.comp",
        &[("OP_ROUTE", "1"), ("WG_SIZE", "32"), ("NEEDS_REDUCE", "1")],
    ),
    // The f32 router of a decode step with the routing in its last
    // workgroup: 32 invocations, moe_route's team (one subgroup where
    // subgroups have 32 lanes).
    (
        "moe_router_f32",
        "matvec.comp",
        &[("WG_SIZE", "32"), ("ROUTE", "1"), ("WEIGHT_F32", "1")],
    ),
    // The same with the FFN norm in front.
    (
        "moe_norm_router_f32",
        "matvec.comp",
        &[
            ("WG_SIZE", "32"),
            ("ROUTE", "1"),
            ("WEIGHT_F32", "1"),
            ("NORM", "1"),
        ],
    ),
    ("moe_sum", "moe.comp", &[("OP_SUM", "1")]),
    ("moe_group", "moe.comp", &[("OP_GROUP", "1")]),
    ("spin", "spin.comp", &[]),
];

/// One SPIR-V module to build.
struct Variant {
    name: String,
    file: &'static str,
    defines: Vec<(&'static str, &'static str)>,
}

/// Resolves `#include "x"` relative to the including file, then to the
/// shader root.
struct Includes {
    root: PathBuf,
}

impl IncludeHandler for Includes {
    fn include(
        &mut self,
        _ty: IncludeType,
        header: &str,
        includer: &str,
        _depth: usize,
    ) -> Option<IncludeResult> {
        let beside = Path::new(includer)
            .parent()
            .map(|d| d.join(header))
            .filter(|p| p.is_file());
        let path = beside.unwrap_or_else(|| self.root.join(header));
        let data = std::fs::read_to_string(&path).ok()?;
        Some(IncludeResult {
            name: path.to_string_lossy().into_owned(),
            data,
        })
    }
}

fn compile(
    compiler: &Compiler,
    root: &Path,
    file: &str,
    defines: &[(&str, &str)],
) -> Result<Vec<u32>, String> {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let source = ShaderSource::from(text);
    let opts = CompilerOptions {
        source_language: SourceLanguage::GLSL,
        target: Target::Vulkan {
            version: VulkanVersion::Vulkan1_2,
            spirv_version: SpirvVersion::SPIRV1_5,
        },
        version_profile: None,
        ..CompilerOptions::default()
    };
    let defines: Vec<(&str, Option<&str>)> = defines.iter().map(|&(k, v)| (k, Some(v))).collect();
    let mut includes = Includes {
        root: root.to_path_buf(),
    };
    let input = ShaderInput::new(
        &source,
        ShaderStage::Compute,
        &opts,
        Some(&defines),
        Some(&mut includes),
    )
    .map_err(|e| format!("{file}: {e}"))?;
    let shader = compiler
        .create_shader(input)
        .map_err(|e| format!("{file} {defines:?}: {e}"))?;
    shader
        .compile()
        .map_err(|e| format!("{file} {defines:?}: {e}"))
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../../shaders").canonicalize().unwrap();
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", root.display());
    for entry in walk(&root) {
        println!("cargo:rerun-if-changed={}", entry.display());
    }

    let compiler = Compiler::acquire().expect("glslang initialises");
    let mut variants: Vec<Variant> = Vec::new();
    let mut types = Vec::new();
    let mut int_types = Vec::new();
    for &(ty, define) in WEIGHT_TYPES {
        let Ok(text) = std::fs::read_to_string(root.join("quant").join(format!("{ty}.glsl")))
        else {
            println!("cargo:warning=shaders/quant/{ty}.glsl is missing: {ty} weights will be unsupported");
            continue;
        };
        types.push(ty);
        let mut families = WEIGHT_KERNELS.to_vec();
        if text.contains("#define QUANT_Q8_BLOCK") {
            int_types.push(ty);
            families.extend_from_slice(INT_KERNELS);
        }
        for (prefix, file, defs) in families {
            let mut d = defs.to_vec();
            d.push((define, "1"));
            variants.push(Variant {
                name: format!("{prefix}_{ty}"),
                file,
                defines: d,
            });
        }
    }
    for &(name, file, defs) in KERNELS {
        variants.push(Variant {
            name: name.to_string(),
            file,
            defines: defs.to_vec(),
        });
    }

    let mut table = String::from(
        "/// Compiled kernels: (variant name, SPIR-V bytes).\npub static SHADERS: &[(&str, &[u8])] = &[\n",
    );
    let mut seen = HashMap::new();
    let mut errors = Vec::new();
    for Variant {
        name,
        file,
        defines,
    } in &variants
    {
        match compile(compiler, &root, file, defines) {
            Ok(words) => {
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                let path = out.join(format!("{name}.spv"));
                std::fs::write(&path, bytes).unwrap();
                seen.insert(name.clone(), ());
                let _ = writeln!(
                    table,
                    "    ({name:?}, include_bytes!({:?})),",
                    path.display().to_string()
                );
            }
            Err(e) => errors.push(e),
        }
    }
    table.push_str("];\n\n/// Weight types with dequantizers, by quant/ file name.\npub static WEIGHT_TYPES: &[&str] = &[\n");
    for ty in types {
        let _ = writeln!(table, "    {ty:?},");
    }
    table.push_str("];\n\n/// Weight types with an integer form (`matvec_int` kernels).\npub static INT_WEIGHT_TYPES: &[&str] = &[\n");
    for ty in int_types {
        let _ = writeln!(table, "    {ty:?},");
    }
    table.push_str("];\n");
    if !errors.is_empty() {
        panic!("shader compilation failed:\n{}", errors.join("\n"));
    }
    std::fs::write(out.join("shaders.rs"), table).unwrap();
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                files.extend(walk(&p));
            } else {
                files.push(p);
            }
        }
    }
    files
}
