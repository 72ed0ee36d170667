//! Builds the HIP kernels in the top-level `kernels/` folder with clang and
//! embeds them: one AMDGPU code object per gfx target and one PTX module per
//! NVIDIA target, listed in `OUT_DIR/code_objects.rs` (included by
//! `src/code_objects.rs`).
//!
//! All `kernels/*.hip` files are compiled as ONE translation unit per target
//! (a generated file that `#include`s them). A HIP device-only compile
//! already links its code object (an ELF shared object, like hipcc's), and
//! shared objects cannot be linked together again without relocatable
//! `-fgpu-rdc` builds plus an `ld.lld` step; PTX modules cannot be linked
//! without the CUDA driver's linker at all. One translation unit gives one
//! loadable module per target on both paths with one clang call, and the
//! kernels already share one prelude. The cost: any kernel change rebuilds
//! every kernel of that target (a few seconds).
//!
//! The compiler: `ROCMFORGE_HIP_CLANG` (a path; must work), else
//! `$ROCM_PATH/llvm/bin/clang`, `/opt/rocm/llvm/bin/clang`, the newest
//! `clang-N` (N >= 19) on PATH, or `clang` if it is version 19 or newer.
//! None found: the build succeeds without kernels (a cargo warning), and
//! the crate says so at run time. A target this clang cannot build for (an
//! older ROCm clang and gfx12, a clang without NVPTX) is left out with a
//! warning; a kernel that fails to compile fails the build with clang's
//! message. Warnings are errors (`-Werror`): the kernels build clean.
//!
//! `ROCMFORGE_GPU_TARGETS=gfx1100,gfx1036,...` replaces the default gfx
//! list (any gfx clang knows); `sm_NN` entries replace the PTX list, which
//! otherwise stays sm_90, the verification GPU's.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::thread;

/// RDNA targets built by default: RDNA3 (gfx1100-1102), RDNA3.5 (gfx1150,
/// gfx1151 Strix Halo), RDNA4 (gfx1200, gfx1201), RDNA2 (gfx1030), RDNA1
/// (gfx1010, the RX 5600/5700).
const DEFAULT_GFX: &[&str] = &[
    "gfx1100", "gfx1151", "gfx1030", "gfx1101", "gfx1102", "gfx1150", "gfx1200", "gfx1201",
    "gfx1010",
];
/// PTX targets: the verification GPU (H100/H200), run through the CUDA
/// driver API. PTX for sm_90 also JIT-compiles for newer NVIDIA GPUs.
const DEFAULT_PTX: &[&str] = &["sm_90"];
/// Oldest plain clang accepted from PATH (the one the kernels are tested
/// with is Debian's clang-19).
const MIN_CLANG_MAJOR: u32 = 19;

/// Flags for every target. -ffp-contract=off: no silent fma contraction,
/// since the CPU reference rounds every product; kernels call fma where
/// they want one.
const COMMON_FLAGS: &[&str] = &[
    "-std=c++17",
    "-O3",
    "-ffp-contract=off",
    "-fno-strict-aliasing",
    "-Wall",
    "-Wextra",
    "-Werror",
];

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let kernels_dir = manifest
        .join("../../kernels")
        .canonicalize()
        .expect("the kernels/ folder at the workspace root");
    println!("cargo:rerun-if-changed={}", kernels_dir.display());
    for var in ["ROCMFORGE_HIP_CLANG", "ROCM_PATH", "ROCMFORGE_GPU_TARGETS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let (gfx, ptx) = requested_targets();
    let sources = kernel_sources(&kernels_dir);
    let mut table = Table {
        requested_gfx: gfx.clone(),
        requested_ptx: ptx.clone(),
        sources: sources.clone(),
        ..Table::default()
    };
    match find_clang() {
        Ok(clang) => {
            println!("cargo:rerun-if-changed={}", clang.path.display());
            build_all(
                &clang,
                &kernels_dir,
                &out_dir,
                &sources,
                &gfx,
                &ptx,
                &mut table,
            );
            table.compiler = Some(format!("{} ({})", clang.version, clang.path.display()));
        }
        Err(looked) => {
            // Rerun on every build until a compiler turns up: these paths do
            // not exist, which cargo treats as changed.
            for path in ["/usr/bin/clang-19", "/opt/rocm/llvm/bin/clang"] {
                println!("cargo:rerun-if-changed={path}");
            }
            println!("cargo:rerun-if-env-changed=PATH");
            let reason = format!("no clang with the AMDGPU target found; looked at {looked}");
            println!(
                "cargo:warning=rocmforge-hip: building without GPU kernels: {reason}; \
                 install clang-19 and lld-19 or set ROCMFORGE_HIP_CLANG, then rebuild"
            );
            table.no_kernels = Some(reason);
        }
    }
    fs::write(out_dir.join("code_objects.rs"), table.render()).expect("write code_objects.rs");
}

/// The gfx and PTX targets to build, from `ROCMFORGE_GPU_TARGETS` or the
/// defaults.
fn requested_targets() -> (Vec<String>, Vec<String>) {
    let Ok(list) = env::var("ROCMFORGE_GPU_TARGETS") else {
        return (to_strings(DEFAULT_GFX), to_strings(DEFAULT_PTX));
    };
    let mut gfx = Vec::new();
    let mut ptx = Vec::new();
    for entry in list.split(',').map(|e| e.trim().to_ascii_lowercase()) {
        if entry.is_empty() {
            continue;
        }
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric());
        if entry.strip_prefix("gfx").is_some_and(digits) {
            gfx.push(entry);
        } else if entry.strip_prefix("sm_").is_some_and(digits) {
            ptx.push(entry);
        } else {
            panic!(
                "ROCMFORGE_GPU_TARGETS: `{entry}` is not a target; expected a comma list of \
                 gfx targets (gfx1100) and/or NVIDIA ones (sm_90)"
            );
        }
    }
    let mut seen = Vec::new();
    gfx.retain(|t| {
        let new = !seen.contains(t);
        seen.push(t.clone());
        new
    });
    if ptx.is_empty() {
        ptx = to_strings(DEFAULT_PTX);
    }
    (gfx, ptx)
}

fn to_strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `kernels/*.hip`, sorted (the headers are included by them).
fn kernel_sources(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read kernels/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".hip"))
        .collect();
    names.sort();
    names
}

struct Clang {
    path: PathBuf,
    /// First line of `--version`.
    version: String,
}

/// The compiler, or the list of places looked at.
fn find_clang() -> Result<Clang, String> {
    if let Some(path) = env::var_os("ROCMFORGE_HIP_CLANG") {
        let mut path = PathBuf::from(path);
        if path.components().count() == 1 {
            // A bare name: the PATH entry (an absolute path for rerun-if-changed).
            path = on_path(&path.to_string_lossy()).unwrap_or(path);
        }
        return Ok(clang_at(&path).unwrap_or_else(|| {
            panic!(
                "ROCMFORGE_HIP_CLANG={} does not run as a clang (`--version` failed)",
                path.display()
            )
        }));
    }
    let mut looked = Vec::new();
    let mut rocm = Vec::new();
    if let Some(root) = env::var_os("ROCM_PATH") {
        rocm.push(PathBuf::from(root).join("llvm/bin/clang"));
    }
    rocm.push(PathBuf::from("/opt/rocm/llvm/bin/clang"));
    for path in rocm {
        looked.push(path.display().to_string());
        if let Some(clang) = clang_at(&path) {
            return Ok(clang);
        }
    }
    // clang-N on PATH, newest first.
    looked.push(format!("clang-N (N >= {MIN_CLANG_MAJOR}) on PATH"));
    let mut versioned: Vec<(u32, PathBuf)> = env::var_os("PATH")
        .map(|p| env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|dir| fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let major: u32 = name.strip_prefix("clang-")?.parse().ok()?;
            (major >= MIN_CLANG_MAJOR).then(|| (major, e.path()))
        })
        .collect();
    versioned.sort_by_key(|v| std::cmp::Reverse(v.0));
    for (_, path) in versioned {
        if let Some(clang) = clang_at(&path) {
            return Ok(clang);
        }
    }
    looked.push(format!("clang >= {MIN_CLANG_MAJOR} on PATH"));
    if let Some(clang) = on_path("clang").and_then(|p| clang_at(&p)) {
        if major_version(&clang.version).is_some_and(|m| m >= MIN_CLANG_MAJOR) {
            return Ok(clang);
        }
    }
    Err(looked.join(", "))
}

/// The first `name` in PATH's folders.
fn on_path(name: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn clang_at(path: &Path) -> Option<Clang> {
    let out = Command::new(path).arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .trim()
        .to_string();
    Some(Clang {
        path: path.to_path_buf(),
        version,
    })
}

/// "Debian clang version 19.1.7 (...)" -> 19.
fn major_version(version: &str) -> Option<u32> {
    let rest = &version[version.find("version ")? + "version ".len()..];
    rest.split('.').next()?.parse().ok()
}

/// One compile: a target and what to produce.
#[derive(Clone)]
struct Job {
    target: String,
    ptx: bool,
}

fn build_all(
    clang: &Clang,
    kernels_dir: &Path,
    out_dir: &Path,
    sources: &[String],
    gfx: &[String],
    ptx: &[String],
    table: &mut Table,
) {
    let work = out_dir.join("kernels");
    fs::create_dir_all(&work).expect("create OUT_DIR/kernels");
    // The one translation unit per target.
    let mut unit =
        String::from("// Generated by rocmforge-hip's build.rs: every kernel, one unit.\n");
    for s in sources {
        writeln!(unit, "#include \"{s}\"").unwrap();
    }
    let unit_path = work.join("all_kernels.hip");
    fs::write(&unit_path, unit).expect("write all_kernels.hip");
    let probe_path = work.join("probe.hip");
    fs::write(
        &probe_path,
        "extern \"C\" __attribute__((global)) void rocmforge_probe() {}\n",
    )
    .expect("write probe.hip");

    let jobs: Vec<Job> = gfx
        .iter()
        .map(|t| Job {
            target: t.clone(),
            ptx: false,
        })
        .chain(ptx.iter().map(|t| Job {
            target: t.clone(),
            ptx: true,
        }))
        .collect();
    let threads = env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .or_else(|| thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .clamp(1, jobs.len().max(1));
    let queue = Mutex::new(jobs.clone());
    let results = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let Some(job) = queue.lock().unwrap().pop() else {
                    break;
                };
                let result = build_one(clang, kernels_dir, &work, &probe_path, &unit_path, &job);
                results.lock().unwrap().push((job, result));
            });
        }
    });

    let mut failures = Vec::new();
    let mut results = results.into_inner().unwrap();
    // Table order = requested order.
    results.sort_by_key(|(job, _)| jobs.iter().position(|j| j.target == job.target));
    for (job, result) in results {
        match result {
            Built::Ok(path) if job.ptx => table.ptx.push((job.target, path)),
            Built::Ok(path) => table.code_objects.push((job.target, path)),
            Built::Unsupported(why) => {
                println!(
                    "cargo:warning=rocmforge-hip: {} left out: {} cannot build for it ({why})",
                    job.target, clang.version
                );
                table.skipped.push((job.target, why));
            }
            Built::Failed(message) => failures.push(format!("--- {} ---\n{message}", job.target)),
        }
    }
    if !failures.is_empty() {
        panic!(
            "HIP kernels failed to compile with {} ({}):\n{}",
            clang.version,
            clang.path.display(),
            failures.join("\n")
        );
    }
}

enum Built {
    Ok(PathBuf),
    /// The compiler cannot build this target at all (the probe failed).
    Unsupported(String),
    /// A kernel did not compile: clang's message.
    Failed(String),
}

fn build_one(
    clang: &Clang,
    kernels_dir: &Path,
    work: &Path,
    probe: &Path,
    unit: &Path,
    job: &Job,
) -> Built {
    // First an empty kernel: tells "this clang cannot build for the target
    // (unknown gfx, no NVPTX backend, no ld.lld)" from "a kernel is wrong".
    let probe_out = work.join(format!("probe-{}.o", job.target));
    if let Err(message) = run_clang(clang, kernels_dir, job, probe, &probe_out) {
        let first = message
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("the compiler failed")
            .trim()
            .to_string();
        return Built::Unsupported(first);
    }
    let ext = if job.ptx { "ptx" } else { "co" };
    let out = work.join(format!("{}.{ext}", job.target));
    if let Err(message) = run_clang(clang, kernels_dir, job, unit, &out) {
        return Built::Failed(message);
    }
    if job.ptx {
        // cuModuleLoadData takes PTX as a NUL-terminated string: store it so.
        let mut text = fs::read(&out).expect("read PTX");
        text.push(0);
        fs::write(&out, text).expect("write PTX");
    }
    Built::Ok(out)
}

fn run_clang(
    clang: &Clang,
    include: &Path,
    job: &Job,
    src: &Path,
    out: &Path,
) -> Result<(), String> {
    let mut cmd = Command::new(&clang.path);
    if job.ptx {
        cmd.args([
            "-x",
            "cuda",
            "--cuda-device-only",
            "-nocudalib",
            "-nocudainc",
        ])
        .arg(format!("--cuda-gpu-arch={}", job.target))
        // Without a CUDA installation clang assumes an old PTX ISA and
        // refuses the sync shuffles; sm_90 needs PTX 7.8 anyway.
        .arg("--cuda-feature=+ptx78")
        .arg("-S");
    } else {
        cmd.args(["-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc"])
            .arg(format!("--offload-arch={}", job.target))
            // An ELF code object, not a clang-offload-bundle; wave32 even
            // where a clang would default to wave64.
            .args(["--no-gpu-bundle-output", "-mno-wavefrontsize64", "-c"]);
    }
    cmd.args(COMMON_FLAGS)
        .arg("-I")
        .arg(include)
        .arg(src)
        .arg("-o")
        .arg(out);
    let output = cmd
        .output()
        .map_err(|e| format!("could not run {}: {e}", clang.path.display()))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stderr).trim_end(),
        String::from_utf8_lossy(&output.stdout).trim_end()
    ))
}

/// What the generated file lists.
#[derive(Default)]
struct Table {
    compiler: Option<String>,
    no_kernels: Option<String>,
    requested_gfx: Vec<String>,
    requested_ptx: Vec<String>,
    sources: Vec<String>,
    code_objects: Vec<(String, PathBuf)>,
    ptx: Vec<(String, PathBuf)>,
    skipped: Vec<(String, String)>,
}

impl Table {
    fn render(&self) -> String {
        let opt = |v: &Option<String>| match v {
            Some(s) => format!("Some({s:?})"),
            None => "None".to_string(),
        };
        let list = |v: &[String]| {
            v.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        // Each file as a 16-byte aligned static (ELF readers want the
        // header aligned; include_bytes! alone is byte-aligned).
        let mut statics = String::new();
        let mut files = |v: &[(String, PathBuf)], prefix: &str| {
            let mut refs = String::new();
            for (i, (t, p)) in v.iter().enumerate() {
                let len = fs::metadata(p).expect("built file").len();
                writeln!(
                    statics,
                    "static {prefix}_{i}: Aligned<[u8; {len}]> = Aligned(*include_bytes!({:?}));",
                    p.display().to_string()
                )
                .unwrap();
                write!(refs, "({t:?}, &{prefix}_{i}.0), ").unwrap();
            }
            refs
        };
        let code_objects = files(&self.code_objects, "CODE_OBJECT");
        let ptx = files(&self.ptx, "PTX");
        let skipped: String = self
            .skipped
            .iter()
            .map(|(t, why)| format!("({t:?}, {why:?}), "))
            .collect();
        format!(
            "// Generated by rocmforge-hip's build.rs.\n\
             {statics}\
             pub(crate) static BUILD: BuildInfo = BuildInfo {{\n\
             \x20   compiler: {},\n\
             \x20   no_kernels: {},\n\
             \x20   requested_gfx: &[{}],\n\
             \x20   requested_ptx: &[{}],\n\
             \x20   targets_from_env: {},\n\
             \x20   sources: &[{}],\n\
             \x20   code_objects: &[{}],\n\
             \x20   ptx: &[{}],\n\
             \x20   skipped: &[{}],\n\
             }};\n",
            opt(&self.compiler),
            opt(&self.no_kernels),
            list(&self.requested_gfx),
            list(&self.requested_ptx),
            env::var_os("ROCMFORGE_GPU_TARGETS").is_some(),
            list(&self.sources),
            code_objects,
            ptx,
            skipped,
        )
    }
}
