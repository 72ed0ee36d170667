//! Static checks of the embedded kernels, for CI without an AMD GPU: every
//! default target was built, and on every target every kernel runs without
//! scratch (no spills), in wave32, at its launch bound, and within its VGPR
//! and LDS budget. A failure names the kernel and the target.
//!
//! Built without a compiler, these tests print a skip line and pass, unless
//! `ROCMFORGE_REQUIRE_HIP_KERNELS=1` (CI sets it), where they fail.

use rocmforge_core::gpu::{has_int_form, weight_suffix, workgroup_size};
use rocmforge_core::quant::QuantType;
use rocmforge_hip::code_objects::{self, build_summary};
use rocmforge_hip::metadata;

/// The targets issue 8 asks for; a default build must have all of them.
const REQUIRED_GFX: &[&str] = &[
    "gfx1100", "gfx1151", "gfx1030", "gfx1101", "gfx1102", "gfx1150", "gfx1200", "gfx1201",
    "gfx1010",
];
const REQUIRED_PTX: &[&str] = &["sm_90"];

/// What a kernel may use, the same on every target. Its launch bound must
/// be the workgroup size it is launched with, core's contract
/// (`rocmforge_core::gpu::workgroup_size`).
struct Budget {
    /// A kernel, or a family of per-weight-type variants (`matvec_`): the
    /// longest match applies.
    kernel: &'static str,
    /// VGPRs per lane (wave32). Occupancy they allow, in waves per SIMD:
    /// gfx1100/1101/1151 and gfx12 have 1536 VGPRs per lane, gfx1030,
    /// gfx1010, gfx1102 and gfx1150 1024 (allocation granules 24 / 16):
    ///   <= 32:  16 / 16 (the maximum)
    ///   <= 64:  16 / 16
    ///   <= 128: 10 / 8
    max_vgprs: u32,
    /// Static LDS bytes per workgroup (64 KiB per workgroup processor).
    max_lds: u32,
}

const BUDGETS: &[Budget] = &[
    // Non-weight ops (kernels/ops_*.hip), named and sized as the Vulkan
    // pipelines (rocmforge_core::gpu::workgroup_size). Measured with clang
    // 19.1.7 on every target. Row and element-wise ops: 4-25 VGPRs, full
    // occupancy; rmsnorm's LDS is one f64 per wave (16 x 8 bytes). It
    // holds up to 16 values and weights a thread between its two passes
    // (61-84 VGPRs; one workgroup per row, 12+ waves per SIMD still).
    Budget {
        kernel: "rmsnorm",
        max_vgprs: 96,
        max_lds: 256,
    },
    Budget {
        kernel: "rmsnorm_q8",
        max_vgprs: 96,
        max_lds: 256,
    },
    // A mixture-of-experts layer's sum, residual add and the next norm
    // in one launch: rmsnorm's budget (62-84 VGPRs).
    Budget {
        kernel: "moe_sum_rmsnorm",
        max_vgprs: 96,
        max_lds: 256,
    },
    Budget {
        kernel: "moe_sum_rmsnorm_q8",
        max_vgprs: 96,
        max_lds: 256,
    },
    Budget {
        kernel: "rope",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "rope_kv",
        max_vgprs: 32,
        max_lds: 0,
    },
    // Qwen3's Q/K norms before rope_kv: a workgroup per head, its sum of
    // squares in f64 through two doubles of shared memory.
    Budget {
        kernel: "norm_rope_kv",
        max_vgprs: 48,
        max_lds: 16,
    },
    Budget {
        kernel: "store_kv",
        max_vgprs: 32,
        max_lds: 0,
    },
    // A quantized cache's store: a thread quantizes a block of 32 values
    // (46-50 VGPRs), still 16 waves per SIMD everywhere.
    Budget {
        kernel: "store_kv_q8_0",
        max_vgprs: 64,
        max_lds: 0,
    },
    Budget {
        kernel: "store_kv_q4_0",
        max_vgprs: 64,
        max_lds: 0,
    },
    Budget {
        kernel: "add",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "swiglu",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "copy",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "scale",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "geglu",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "swiglu_oai",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "sigmoid_gate",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "attn_temp",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "quantize_q8_0",
        max_vgprs: 32,
        max_lds: 0,
    },
    // Q8_K: a lane holds 8 of the block's 256 values (45-47 VGPRs), still
    // 16 waves per SIMD everywhere.
    Budget {
        kernel: "quantize_q8_k",
        max_vgprs: 48,
        max_lds: 0,
    },
    Budget {
        kernel: "quantize_q8_packed",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "swiglu_q8",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "swiglu_oai_q8",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "quantize_f16",
        max_vgprs: 32,
        max_lds: 0,
    },
    Budget {
        kernel: "quantize_bf16",
        max_vgprs: 32,
        max_lds: 0,
    },
    // Decode attention read by waves: 8 positions' K and V words of 4
    // pairs a lane in flight (64 VGPRs), 4 KiB to merge the waves.
    Budget {
        kernel: "attention_decode",
        max_vgprs: 112,
        max_lds: 4608,
    },
    Budget {
        kernel: "attention_decode_wide",
        max_vgprs: 128,
        max_lds: 8704,
    },
    // Prefill read by waves: 4 tokens' Q, accumulators and softmax state,
    // 4 positions' K and V words in flight; 8 / 16 KiB to merge the waves.
    Budget {
        kernel: "attention_rows",
        max_vgprs: 128,
        max_lds: 8448,
    },
    Budget {
        kernel: "attention_rows_wide",
        max_vgprs: 192,
        max_lds: 16640,
    },
    // The same over a quantized cache (one template, Q8_0 / Q4_0 blocks
    // read in 16-bit units), within the f16 kernels' budgets: a lane holds
    // as many words as in f16, and decoding them costs decode 2-7 VGPRs
    // more (59-63, wide 103-108); prefill keeps its 4 positions' K and V
    // dequantized for its 4 tokens (95-97, wide 164-167).
    Budget {
        kernel: "attention_decode_q8_0",
        max_vgprs: 112,
        max_lds: 4608,
    },
    Budget {
        kernel: "attention_decode_q4_0",
        max_vgprs: 112,
        max_lds: 4608,
    },
    Budget {
        kernel: "attention_decode_wide_q8_0",
        max_vgprs: 128,
        max_lds: 8704,
    },
    Budget {
        kernel: "attention_decode_wide_q4_0",
        max_vgprs: 128,
        max_lds: 8704,
    },
    Budget {
        kernel: "attention_rows_q8_0",
        max_vgprs: 128,
        max_lds: 8448,
    },
    Budget {
        kernel: "attention_rows_q4_0",
        max_vgprs: 128,
        max_lds: 8448,
    },
    Budget {
        kernel: "attention_rows_wide_q8_0",
        max_vgprs: 192,
        max_lds: 16640,
    },
    Budget {
        kernel: "attention_rows_wide_q4_0",
        max_vgprs: 192,
        max_lds: 16640,
    },
    // Prefill on the matrix cores: the output's fragments (64 f32 a lane
    // at head size 128), Q, K, V and the weights staged as f16.
    Budget {
        kernel: "attention_cm",
        max_vgprs: 208,
        max_lds: 34944,
    },
    Budget {
        kernel: "attention_cm64",
        max_vgprs: 176,
        max_lds: 21632,
    },
    // The same over a quantized cache, its blocks dequantized as a tile
    // is staged (gfx1100: 208 / 174, Q4_0 210 / 176; 216 still leaves 7
    // waves a SIMD, as 208 does).
    Budget {
        kernel: "attention_cm_q8_0",
        max_vgprs: 208,
        max_lds: 34944,
    },
    Budget {
        kernel: "attention_cm64_q8_0",
        max_vgprs: 176,
        max_lds: 21632,
    },
    Budget {
        kernel: "attention_cm_q4_0",
        max_vgprs: 216,
        max_lds: 34944,
    },
    Budget {
        kernel: "attention_cm64_q4_0",
        max_vgprs: 176,
        max_lds: 21632,
    },
    Budget {
        kernel: "attention_combine",
        max_vgprs: 32,
        max_lds: 1024,
    },
    Budget {
        kernel: "attention_combine_q8",
        max_vgprs: 32,
        max_lds: 1024,
    },
    // Weight kernels (kernels/embed.hip, matvec*.hip, matmul*.hip): one
    // variant per weight type, named and sized as the Vulkan pipelines
    // (rocmforge_core::gpu::workgroup_size). Measured with clang 19.1.7.
    // Embedding rows: a dequantizer and two 16-byte stores per 8 values
    // (12-28 VGPRs): full occupancy.
    Budget {
        kernel: "embed_",
        max_vgprs: 32,
        max_lds: 0,
    },
    // The lattice i-quants: a point's coordinates, level words and signs
    // are live at once (23-37 VGPRs on the RDNA targets); <= 64 still
    // allows 16 waves per SIMD.
    Budget {
        kernel: "embed_iq1_",
        max_vgprs: 40,
        max_lds: 0,
    },
    Budget {
        kernel: "embed_iq2_",
        max_vgprs: 40,
        max_lds: 0,
    },
    Budget {
        kernel: "embed_iq3_",
        max_vgprs: 40,
        max_lds: 0,
    },
    // Decode mat-vec in f32 (matvec.comp): one weight row per workgroup,
    // 8 tokens' sums per lane (27-41 VGPRs); <= 64 keeps 16 waves per SIMD
    // for the many rows in flight. One shared float per wave and token.
    Budget {
        kernel: "matvec_",
        max_vgprs: 64,
        max_lds: 256,
    },
    // Decode mat-vec in integers (matvec_int.comp): bound by weight
    // bandwidth, so it needs many loads in flight: >= 8 waves per SIMD
    // everywhere. Up to 8 tokens' activations and 2 rows x 8 tokens of sums
    // sit in registers (75-80 VGPRs with dot instructions, 98-102 with
    // gfx1010's portable dot).
    Budget {
        kernel: "matvec_int_",
        max_vgprs: 128,
        max_lds: 1024,
    },
    // Portable prefill matmul (matmul.comp): 4 x 4 sums and the 16-byte
    // shared reads of a fully unrolled k step (63-68 VGPRs); <= 96 keeps
    // >= 10 waves per SIMD. 13 KiB of f32 tiles; <= 16 KiB keeps 4
    // workgroups per WGP.
    Budget {
        kernel: "matmul_",
        max_vgprs: 96,
        max_lds: 16384,
    },
    // Prefill on matrix cores (matmul_coopmat.comp, 64 x 64 tiles): 2 x 2
    // fragment accumulators (32 VGPRs) plus fragments and, on matrix cores,
    // the next k step's tile in registers (78-119 VGPRs; the kernels cap
    // themselves at 128); >= 8 waves per SIMD. 10 KiB of f16 tiles.
    Budget {
        kernel: "matmul_cmps_",
        max_vgprs: 128,
        max_lds: 16384,
    },
    // The same on 128 x 128 tiles (8 waves of 4 x 2 fragments, 64 VGPRs
    // of accumulators; the kernels cap themselves at 160, >= 9 waves per
    // SIMD): 20 KiB of f16 tiles.
    Budget {
        kernel: "matmul_cmp_",
        max_vgprs: 160,
        max_lds: 24576,
    },
    // The grouped expert matmul on the 64 x 64 matrix-core tiling
    // (matmul_coopmat.comp's MAT_ID): matmul_cmps_'s registers and the
    // gathered rows' addresses (capped at 160 like matmul_cmp_, >= 9 waves
    // per SIMD), and its tile's 64 pairs and x rows in shared memory.
    Budget {
        kernel: "matmul_id_cms_",
        max_vgprs: 160,
        max_lds: 16384,
    },
    // Grouping the expert choices by expert (one workgroup): a counter,
    // a first pair and a first tile per expert, up to 256 experts.
    Budget {
        kernel: "moe_group",
        max_vgprs: 32,
        max_lds: 3200,
    },
    // Mixture-of-experts routing: one wave per token, the probabilities
    // of up to 512 experts in shared memory (2 KiB) and e^x's table of 32
    // f64 (the register path of up to 128 experts); the weighted sum is
    // element-wise.
    Budget {
        kernel: "moe_route",
        max_vgprs: 32,
        max_lds: 2304,
    },
    // The f32 router mat-vec (one wave a row, its per-token sums; 8 units
    // of 8 floats a lane and a token's activations for all of them loaded
    // before any is summed, with no branch between: 145 VGPRs on every
    // target, where one wave per expert, 32 to 128 waves in all, leaves
    // occupancy moot) whose last workgroup routes as moe_route's register
    // path: e^x's table of 32 f64.
    Budget {
        kernel: "moe_router_f32",
        max_vgprs: 160,
        max_lds: 320,
    },
    // The same with the FFN norm in front (4 units a lane at a time, the
    // norm's weights for them, and the norm's squares 8 float4s a lane at
    // a time: 115-129 VGPRs) and each token's scale in shared memory.
    Budget {
        kernel: "moe_norm_router_f32",
        max_vgprs: 144,
        max_lds: 352,
    },
    Budget {
        kernel: "moe_sum",
        max_vgprs: 32,
        max_lds: 0,
    },
    // Expert mat-vec (matvec_id.comp): the f32 mat-vec for one token, the
    // weight row offset by the expert read on the device.
    Budget {
        kernel: "matvec_id_",
        max_vgprs: 64,
        max_lds: 256,
    },
    // The expert mat-vec in integers: one token, 4 rows a wave, no shared
    // memory (wave sums only).
    Budget {
        kernel: "matvec_id_int_",
        max_vgprs: 96,
        max_lds: 0,
    },
    // Q5_0 / Q5_1 unpack their fifth bits for the 4 rows' blocks at once
    // (the loads issued together): 169 VGPRs on gfx11 for Q5_0, still 9
    // waves a SIMD; the 32-element types the MoE presets use stay at 53-92.
    Budget {
        kernel: "matvec_id_int_q5_0",
        max_vgprs: 176,
        max_lds: 0,
    },
    Budget {
        kernel: "matvec_id_int_q5_1",
        max_vgprs: 144,
        max_lds: 0,
    },
    // Test-only spinner: one invocation, as the GLSL one.
    Budget {
        kernel: "spin",
        max_vgprs: 16,
        max_lds: 0,
    },
];

/// The budget of kernel `name`: its own entry, else its family's (the
/// longest family prefix).
fn budget(name: &str) -> Option<&'static Budget> {
    BUDGETS
        .iter()
        .filter(|b| b.kernel == name || (b.kernel.ends_with('_') && name.starts_with(b.kernel)))
        .max_by_key(|b| b.kernel.len())
}

/// Every kernel the HIP backend's lowering can name: the per-weight-type
/// families for every type core lowers (integer mat-vecs for the types
/// with an integer form), and the rest of the table.
fn expected_kernels() -> Vec<String> {
    let mut names = Vec::new();
    for ty in QuantType::supported() {
        let Some(suffix) = weight_suffix(ty) else {
            continue;
        };
        for family in [
            "embed_",
            "matvec_",
            "matvec_id_",
            "matmul_",
            "matmul_cmps_",
            "matmul_cmp_",
            "matmul_id_",
            "matmul_id_cms_",
        ] {
            names.push(format!("{family}{suffix}"));
        }
        if has_int_form(ty) {
            names.push(format!("matvec_int_{suffix}"));
            names.push(format!("matvec_id_int_{suffix}"));
        }
    }
    names.extend(
        BUDGETS
            .iter()
            .filter(|b| !b.kernel.ends_with('_'))
            .map(|b| b.kernel.to_string()),
    );
    names
}

/// True when the crate has kernels; otherwise a skip line, or a failure
/// when CI requires them.
fn have_kernels(test: &str) -> bool {
    let Some(err) = code_objects::built_without_kernels() else {
        return true;
    };
    if std::env::var("ROCMFORGE_REQUIRE_HIP_KERNELS").as_deref() == Ok("1") {
        panic!("{test}: {err} (ROCMFORGE_REQUIRE_HIP_KERNELS=1)");
    }
    println!("{test}: skipped: {err}");
    false
}

#[test]
fn every_required_target_is_built() {
    if !have_kernels("every_required_target_is_built") {
        return;
    }
    let summary = build_summary();
    println!("{summary}");
    let built = code_objects::built_targets();
    let ptx: Vec<&str> = code_objects::ptx_modules()
        .iter()
        .map(|(t, _)| *t)
        .collect();
    let mut missing = Vec::new();
    let (gfx_wanted, ptx_wanted): (Vec<&str>, Vec<&str>) = if summary.targets_from_env {
        // Narrowed on purpose: hold the build to what was asked for.
        println!("targets narrowed by ROCMFORGE_GPU_TARGETS");
        (
            summary.requested_gfx.to_vec(),
            summary.requested_ptx.to_vec(),
        )
    } else {
        (REQUIRED_GFX.to_vec(), REQUIRED_PTX.to_vec())
    };
    for t in gfx_wanted {
        if !built.contains(&t) {
            missing.push(t);
        }
    }
    for t in ptx_wanted {
        if !ptx.contains(&t) {
            missing.push(t);
        }
    }
    assert!(
        missing.is_empty(),
        "targets not built: {} ({summary})",
        missing.join(", ")
    );
}

#[test]
fn kernels_fit_their_budgets_on_every_target() {
    if !have_kernels("kernels_fit_their_budgets_on_every_target") {
        return;
    }
    let mut failures = Vec::new();
    let mut table = String::from("target   kernel           VGPR SGPR  LDS block\n");
    for (target, bytes) in code_objects::code_objects() {
        let meta = match metadata::parse(bytes) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{target}: {e}"));
                continue;
            }
        };
        if !meta.target.ends_with(target) && !meta.target.contains(&format!("{target}:")) {
            failures.push(format!("{target}: code object is for {}", meta.target));
        }
        for k in &meta.kernels {
            table += &format!(
                "{target:8} {:16} {:4} {:4} {:5} {:5}\n",
                k.name,
                k.vgpr_count,
                k.sgpr_count,
                k.group_segment_fixed_size,
                k.max_flat_workgroup_size
            );
            let Some(b) = budget(&k.name) else {
                failures.push(format!(
                    "{target} {}: no budget (add it to BUDGETS in tests/code_objects.rs)",
                    k.name
                ));
                continue;
            };
            let mut fail = |what: String| failures.push(format!("{target} {}: {what}", k.name));
            if k.private_segment_fixed_size != 0 {
                fail(format!(
                    "{} bytes of scratch per lane (spills or a stack array)",
                    k.private_segment_fixed_size
                ));
            }
            if k.vgpr_spill_count != 0 || k.sgpr_spill_count != 0 {
                fail(format!(
                    "spills {} VGPRs, {} SGPRs",
                    k.vgpr_spill_count, k.sgpr_spill_count
                ));
            }
            if k.wavefront_size != 32 {
                fail(format!("wavefront size {}, not 32", k.wavefront_size));
            }
            if k.vgpr_count > b.max_vgprs {
                fail(format!("{} VGPRs > budget {}", k.vgpr_count, b.max_vgprs));
            }
            if k.group_segment_fixed_size > b.max_lds {
                fail(format!(
                    "{} bytes of LDS > budget {}",
                    k.group_segment_fixed_size, b.max_lds
                ));
            }
            match workgroup_size(&k.name) {
                Some(block) if block == k.max_flat_workgroup_size => {}
                expected => fail(format!(
                    "launch bound {}, but rocmforge_core::gpu::workgroup_size says {expected:?}",
                    k.max_flat_workgroup_size
                )),
            }
        }
        for name in expected_kernels() {
            if meta.kernel(&name).is_none() {
                failures.push(format!("{target} {name}: kernel missing"));
            }
        }
    }
    println!("{table}");
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn ptx_has_every_kernel_and_no_stack() {
    if !have_kernels("ptx_has_every_kernel_and_no_stack") {
        return;
    }
    let mut failures = Vec::new();
    for (target, bytes) in code_objects::ptx_modules() {
        let Some((&0, text)) = bytes.split_last() else {
            failures.push(format!("{target}: PTX is not NUL-terminated"));
            continue;
        };
        let text = String::from_utf8_lossy(text);
        for name in expected_kernels() {
            if !text.contains(&format!(".entry {name}(")) {
                failures.push(format!("{target} {name}: kernel missing"));
            }
        }
        // Registers are assigned later (ptxas), but a local depot already
        // means an array the compiler could not keep in registers.
        if text.contains("__local_depot") {
            failures.push(format!(
                "{target}: a kernel uses local memory (__local_depot)"
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
