//! The kernels embedded at build time: one AMDGPU code object per gfx
//! target and one PTX module per NVIDIA target (see `build.rs`), and the
//! lookup by the device's architecture name. Nothing is compiled at run
//! time.

use std::fmt;

/// What build.rs produced (generated into `OUT_DIR/code_objects.rs`).
pub(crate) struct BuildInfo {
    /// The compiler's `--version` line and path; None without one.
    pub compiler: Option<&'static str>,
    /// Why the crate has no kernels at all (no compiler found).
    pub no_kernels: Option<&'static str>,
    pub requested_gfx: &'static [&'static str],
    pub requested_ptx: &'static [&'static str],
    /// `ROCMFORGE_GPU_TARGETS` chose the targets (else the defaults).
    pub targets_from_env: bool,
    /// The kernel sources (`kernels/*.hip`).
    pub sources: &'static [&'static str],
    pub code_objects: &'static [(&'static str, &'static [u8])],
    /// PTX text, NUL-terminated (as `cuModuleLoadData` takes it).
    pub ptx: &'static [(&'static str, &'static [u8])],
    /// Requested targets the compiler could not build for, and why.
    pub skipped: &'static [(&'static str, &'static str)],
}

/// Gives an embedded file 16-byte alignment (unused in a build without
/// kernels).
#[allow(dead_code)]
#[repr(C, align(16))]
struct Aligned<T: ?Sized>(T);

include!(concat!(env!("OUT_DIR"), "/code_objects.rs"));

/// Why no kernels can be had for a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelsError {
    /// The crate was built without a kernel compiler.
    #[error(
        "rocmforge was built without HIP kernels ({reason}); install clang-19 and lld-19 \
         (apt-get install clang-19 lld-19) or set ROCMFORGE_HIP_CLANG to a clang with the \
         AMDGPU target, then rebuild"
    )]
    BuiltWithoutKernels { reason: String },
    /// No code object for the device's architecture.
    #[error("no kernels for {arch} in this build (built: {}); {hint}", list(built))]
    NoCodeObject {
        arch: String,
        built: Vec<String>,
        hint: String,
    },
}

fn list(targets: &[String]) -> String {
    if targets.is_empty() {
        "none".to_string()
    } else {
        targets.join(", ")
    }
}

/// The code object for a device, by its `hipDeviceProp_t::gcnArchName`
/// (`gfx1100`, or with feature flags: `gfx1100:sramecc-:xnack-`).
pub fn for_arch(gcn_arch_name: &str) -> Result<&'static [u8], KernelsError> {
    lookup_gfx(&BUILD, gcn_arch_name)
}

/// The PTX module (NUL-terminated text) for an NVIDIA device of compute
/// capability `sm` (`sm_90`; `sm_90a` reads as sm_90): the newest built
/// target not newer than the device, since PTX JIT-compiles forward.
pub fn ptx_for(sm: &str) -> Result<&'static [u8], KernelsError> {
    lookup_ptx(&BUILD, sm)
}

/// The gfx targets with a code object in this build.
pub fn built_targets() -> Vec<&'static str> {
    BUILD.code_objects.iter().map(|(t, _)| *t).collect()
}

/// Every embedded code object, as (gfx target, bytes).
pub fn code_objects() -> &'static [(&'static str, &'static [u8])] {
    BUILD.code_objects
}

/// Every embedded PTX module, as (sm target, NUL-terminated text).
pub fn ptx_modules() -> &'static [(&'static str, &'static [u8])] {
    BUILD.ptx
}

/// Why this build has no kernels, or None when it has them.
pub fn built_without_kernels() -> Option<KernelsError> {
    BUILD
        .no_kernels
        .map(|reason| KernelsError::BuiltWithoutKernels {
            reason: reason.to_string(),
        })
}

/// How the kernels were built, for logs and `--version`-style output.
#[derive(Debug, Clone, Copy)]
pub struct BuildSummary {
    pub compiler: Option<&'static str>,
    pub requested_gfx: &'static [&'static str],
    pub requested_ptx: &'static [&'static str],
    pub targets_from_env: bool,
    pub sources: &'static [&'static str],
    pub skipped: &'static [(&'static str, &'static str)],
}

pub fn build_summary() -> BuildSummary {
    BuildSummary {
        compiler: BUILD.compiler,
        requested_gfx: BUILD.requested_gfx,
        requested_ptx: BUILD.requested_ptx,
        targets_from_env: BUILD.targets_from_env,
        sources: BUILD.sources,
        skipped: BUILD.skipped,
    }
}

impl fmt::Display for BuildSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.compiler {
            Some(c) => write!(f, "HIP kernels built by {c}")?,
            None => write!(f, "no HIP kernels (no compiler)")?,
        }
        write!(f, " for {}", self.requested_gfx.join(", "))?;
        if !self.requested_ptx.is_empty() {
            write!(f, " + PTX {}", self.requested_ptx.join(", "))?;
        }
        for (t, why) in self.skipped {
            write!(f, "; {t} left out: {why}")?;
        }
        Ok(())
    }
}

/// `gfx1100:sramecc-:xnack-` -> `gfx1100` (also trims NULs and spaces of a
/// C string buffer).
pub fn base_arch(gcn_arch_name: &str) -> &str {
    let name = gcn_arch_name.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    name.split(':').next().unwrap_or(name)
}

fn lookup_gfx(build: &BuildInfo, gcn_arch_name: &str) -> Result<&'static [u8], KernelsError> {
    if let Some(reason) = build.no_kernels {
        return Err(KernelsError::BuiltWithoutKernels {
            reason: reason.to_string(),
        });
    }
    let arch = base_arch(gcn_arch_name);
    if let Some((_, bytes)) = build.code_objects.iter().find(|(t, _)| *t == arch) {
        return Ok(bytes);
    }
    let built = build
        .code_objects
        .iter()
        .map(|(t, _)| t.to_string())
        .collect();
    let hint = match build.skipped.iter().find(|(t, _)| *t == arch) {
        Some((_, why)) => format!(
            "it was requested but the compiler could not build it ({why}); rebuild with a newer \
             clang (ROCMFORGE_HIP_CLANG)"
        ),
        None => format!("rebuild with ROCMFORGE_GPU_TARGETS={arch}"),
    };
    Err(KernelsError::NoCodeObject {
        arch: arch.to_string(),
        built,
        hint,
    })
}

/// `sm_90` / `sm_90a` / `90` -> 90.
fn sm_number(sm: &str) -> Option<u32> {
    let s = sm.trim().to_ascii_lowercase();
    let s = s.strip_prefix("sm_").unwrap_or(&s);
    let s = s.strip_suffix('a').unwrap_or(s);
    s.parse().ok()
}

fn lookup_ptx(build: &BuildInfo, sm: &str) -> Result<&'static [u8], KernelsError> {
    if let Some(reason) = build.no_kernels {
        return Err(KernelsError::BuiltWithoutKernels {
            reason: reason.to_string(),
        });
    }
    let want = sm_number(sm);
    let best = build
        .ptx
        .iter()
        .filter_map(|(t, bytes)| Some((sm_number(t)?, *bytes)))
        .filter(|(n, _)| want.is_some_and(|w| *n <= w))
        .max_by_key(|(n, _)| *n);
    if let Some((_, bytes)) = best {
        return Ok(bytes);
    }
    let arch = sm.trim().to_string();
    Err(KernelsError::NoCodeObject {
        built: build.ptx.iter().map(|(t, _)| t.to_string()).collect(),
        hint: format!("rebuild with ROCMFORGE_GPU_TARGETS={arch}"),
        arch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CO: &[u8] = &[1, 2, 3];
    const PTX90: &[u8] = &[b'9', 0];

    fn fake(no_kernels: Option<&'static str>) -> BuildInfo {
        BuildInfo {
            compiler: Some("clang version 19.1.7"),
            no_kernels,
            requested_gfx: &["gfx1100", "gfx1151", "gfx1200"],
            requested_ptx: &["sm_90"],
            targets_from_env: false,
            sources: &["rmsnorm.hip"],
            code_objects: &[("gfx1100", CO), ("gfx1151", CO)],
            ptx: &[("sm_90", PTX90)],
            skipped: &[(
                "gfx1200",
                "error: unsupported CUDA gpu architecture: gfx1200",
            )],
        }
    }

    #[test]
    fn feature_suffixes_are_stripped() {
        assert_eq!(base_arch("gfx1100:sramecc-:xnack-"), "gfx1100");
        assert_eq!(base_arch("gfx1151\0\0\0"), "gfx1151");
        assert_eq!(base_arch(" gfx1030 "), "gfx1030");
        assert!(lookup_gfx(&fake(None), "gfx1151:xnack-").is_ok());
    }

    #[test]
    fn missing_target_names_device_and_build() {
        let err = lookup_gfx(&fake(None), "gfx1036:xnack-").unwrap_err();
        assert_eq!(
            err.to_string(),
            "no kernels for gfx1036 in this build (built: gfx1100, gfx1151); \
             rebuild with ROCMFORGE_GPU_TARGETS=gfx1036"
        );
        let err = lookup_gfx(&fake(None), "gfx1200").unwrap_err().to_string();
        assert!(err.starts_with("no kernels for gfx1200 in this build (built: gfx1100, gfx1151)"));
        assert!(err.contains("unsupported CUDA gpu architecture"), "{err}");
    }

    #[test]
    fn no_compiler_says_how_to_fix() {
        let err = lookup_gfx(&fake(Some("no clang found")), "gfx1100")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("built without HIP kernels (no clang found)"),
            "{err}"
        );
        assert!(
            err.contains("clang-19") && err.contains("ROCMFORGE_HIP_CLANG"),
            "{err}"
        );
        assert!(lookup_ptx(&fake(Some("x")), "sm_90").is_err());
    }

    #[test]
    fn ptx_is_chosen_forward() {
        let b = fake(None);
        assert_eq!(lookup_ptx(&b, "sm_90").unwrap(), PTX90);
        assert_eq!(lookup_ptx(&b, "sm_90a").unwrap(), PTX90);
        assert_eq!(lookup_ptx(&b, "sm_100").unwrap(), PTX90);
        let err = lookup_ptx(&b, "sm_80").unwrap_err().to_string();
        assert_eq!(
            err,
            "no kernels for sm_80 in this build (built: sm_90); rebuild with ROCMFORGE_GPU_TARGETS=sm_80"
        );
    }
}
