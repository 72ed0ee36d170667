//! The conditions of the known-issue table ([`super::known_issues`]): each
//! looks at a [`System`] and words what it found for this machine.

use super::gpu::{gfx_name, Gpu};
use super::stack::DriverKind;
use super::system::{has_code_object, IommuMode, System};

const GROUPS_ADVICE: &str = "add the user to the render and video groups \
    (sudo usermod -aG render,video $USER), then log in again";

/// The machine-specific wording of one match.
pub struct Hit {
    pub message: String,
    pub advice: String,
}

fn hit(message: impl Into<String>, advice: impl Into<String>) -> Vec<Hit> {
    vec![Hit {
        message: message.into(),
        advice: advice.into(),
    }]
}

fn labels<'a>(gpus: impl IntoIterator<Item = &'a Gpu>) -> String {
    gpus.into_iter()
        .map(Gpu::label)
        .collect::<Vec<_>>()
        .join(", ")
}

fn gpus_where(s: &System, f: impl Fn(&Gpu) -> bool) -> Vec<&Gpu> {
    s.gpus.iter().filter(|g| f(g)).collect()
}

pub(super) fn mes_0x83(s: &System) -> Vec<Hit> {
    s.firmware
        .iter()
        .filter(|f| f.mes == Some(0x83))
        .filter_map(|f| s.gpus.iter().find(|g| g.card.as_ref() == Some(&f.card)))
        .filter(|g| g.gfx_is("gfx11"))
        .flat_map(|g| {
            hit(
                format!(
                    "{} runs MES firmware 0x00000083, reverted to 0x80 after reports of GPU \
                     hangs and memory access faults",
                    g.label()
                ),
                "update linux-firmware (and remove amdgpu-dkms-firmware if installed) so MES \
                 0x80 loads, then reboot; meanwhile use --backend vulkan",
            )
        })
        .collect()
}

pub(super) fn rdna3_cwsr(s: &System) -> Vec<Hit> {
    let rdna3 = gpus_where(s, |g| g.gfx_is("gfx11"));
    let cwsr_on = s.settings.cwsr.live().is_none_or(|v| v != 0);
    if rdna3.is_empty() || !cwsr_on || !s.kernel.before(6, 18) {
        return vec![];
    }
    hit(
        format!(
            "RDNA3 GPU {} with CWSR on, {}, on kernel {}: MES/CWSR hangs are reported when \
             allocating many buffers or under compute load",
            labels(rdna3),
            s.settings.cwsr.describe(),
            s.kernel.release.as_deref().unwrap_or("?")
        ),
        "boot with amdgpu.cwsr_enable=0 (or update to kernel 6.18+ with MES firmware 0x80), \
         or use --backend vulkan",
    )
}

pub(super) fn strix_sdma(s: &System) -> Vec<Hit> {
    let sdma = s.env("HSA_ENABLE_SDMA");
    let strix = gpus_where(s, |g| {
        matches!(g.gfx.as_deref(), Some("gfx1150" | "gfx1151"))
    });
    if strix.is_empty() || sdma.map(str::trim) == Some("0") {
        return vec![];
    }
    let setting = sdma.map_or("unset".to_string(), |v| format!("={v}"));
    hit(
        format!(
            "{} with HSA_ENABLE_SDMA {setting}: uploads through the SDMA engine can stall on \
             Strix Halo/Point",
            labels(strix)
        ),
        "export HSA_ENABLE_SDMA=0 (copies then run as shader blits)",
    )
}

pub(super) fn rdna1(s: &System) -> Vec<Hit> {
    let old = gpus_where(s, |g| {
        matches!(g.gfx.as_deref(), Some("gfx1010" | "gfx1011" | "gfx1012"))
    });
    if old.is_empty() {
        return vec![];
    }
    hit(
        format!(
            "{} is RDNA1: ROCm 6+ does not support it, runs it only with \
             HSA_OVERRIDE_GFX_VERSION=10.3.0, and hangs at some buffer sizes are known",
            labels(old)
        ),
        "prefer --backend vulkan (RADV)",
    )
}

/// `HSA_OVERRIDE_GFX_VERSION=10.3.0` -> `gfx1030`.
pub fn override_target(value: &str) -> Option<String> {
    let parts: Vec<u32> = value
        .trim()
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match parts[..] {
        [major, minor, stepping] if minor < 16 && stepping < 16 => {
            Some(gfx_name(major * 10000 + minor * 100 + stepping))
        }
        _ => None,
    }
}

pub(super) fn no_code_object(s: &System) -> Vec<Hit> {
    let built = &s.build.code_object_targets;
    let rescued = s
        .env("HSA_OVERRIDE_GFX_VERSION")
        .and_then(override_target)
        .is_some_and(|t| has_code_object(built, &t));
    if rescued {
        // The runtime reports the override's target, which is built.
        return vec![];
    }
    let list = if built.is_empty() {
        "none: built without a HIP compiler".to_string()
    } else {
        built.join(", ")
    };
    s.gpus
        .iter()
        .filter(|g| g.code_object == Some(false))
        .flat_map(|g| {
            hit(
                format!(
                    "no HIP code object for {} in this build (built: {list}): the rocm backend \
                     cannot run on it",
                    g.label()
                ),
                format!(
                    "use --backend vulkan, or rebuild with ROCMFORGE_GPU_TARGETS={}",
                    g.gfx.as_deref().unwrap_or("?")
                ),
            )
        })
        .collect()
}

pub(super) fn gfx_override(s: &System) -> Vec<Hit> {
    let Some(value) = s
        .env("HSA_OVERRIDE_GFX_VERSION")
        .filter(|v| !v.trim().is_empty())
    else {
        return vec![];
    };
    let target = override_target(value);
    // Overriding a GPU to its own target changes nothing.
    let own = gpus_where(s, |g| g.code_object == Some(true) && g.gfx != target);
    if own.is_empty() {
        return vec![];
    }
    let reported = target.unwrap_or_else(|| format!("{value:?}"));
    hit(
        format!(
            "HSA_OVERRIDE_GFX_VERSION={value} is set although this build has code objects for \
             {}: the runtime then reports {reported} and rocmforge may load the wrong code object",
            labels(own)
        ),
        "unset HSA_OVERRIDE_GFX_VERSION",
    )
}

/// How many of `n` devices a visible-devices list leaves; None when it
/// names devices by UUID (which files cannot map to indices). Invalid
/// indices are skipped: runtimes differ on whether they end the list, and a
/// false alarm is worse than a missed one here.
pub fn visible_after(list: &str, n: usize) -> Option<usize> {
    let mut seen: Vec<usize> = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.parse::<i64>() {
            Ok(i) if i >= 0 && (i as usize) < n => {
                if !seen.contains(&(i as usize)) {
                    seen.push(i as usize);
                }
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    Some(seen.len())
}

pub(super) fn visible_devices(s: &System) -> Vec<Hit> {
    let n = s.gpus.len();
    if n == 0 {
        return vec![];
    }
    // ROCr filters first; HIP (which falls back to CUDA_VISIBLE_DEVICES)
    // indexes what is left.
    let hip = ["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]
        .into_iter()
        .find(|k| s.env(k).is_some());
    let mut left = n;
    for name in std::iter::once("ROCR_VISIBLE_DEVICES").chain(hip) {
        let Some(value) = s.env(name) else { continue };
        match visible_after(value, left) {
            None => return vec![],
            Some(0) => {
                return hit(
                    format!(
                        "{name}={value:?} hides every GPU from ROCm ({left} visible before it, \
                         numbered from 0)"
                    ),
                    format!("unset {name}, or list indices below {left}"),
                )
            }
            Some(k) => left = k,
        }
    }
    vec![]
}

pub(super) fn kfd_missing(s: &System) -> Vec<Hit> {
    if s.gpus.is_empty() || s.device_nodes.kfd.present {
        return vec![];
    }
    hit(
        "an AMD GPU is present but /dev/kfd is missing (kernel without CONFIG_HSA_AMD, or a \
         container without --device /dev/kfd): ROCm cannot run",
        "use --backend vulkan, or a kernel with CONFIG_HSA_AMD=y (containers: --device /dev/kfd)",
    )
}

pub(super) fn kfd_permissions(s: &System) -> Vec<Hit> {
    if s.gpus.is_empty() || s.device_nodes.kfd.read_write != Some(false) {
        return vec![];
    }
    hit(
        "/dev/kfd exists but this user cannot open it read-write: ROCm cannot run",
        GROUPS_ADVICE,
    )
}

pub(super) fn render_node_unusable(s: &System) -> Vec<Hit> {
    if s.gpus.is_empty() {
        return vec![];
    }
    let nodes = &s.device_nodes.render;
    let mut hits = Vec::new();
    let missing: Vec<String> = s
        .gpus
        .iter()
        .filter_map(|g| g.render_node.as_ref())
        .map(|n| format!("/dev/dri/{n}"))
        .filter(|p| !nodes.iter().any(|d| &d.path == p))
        .collect();
    if nodes.is_empty() || !missing.is_empty() {
        let which = if missing.is_empty() {
            "/dev/dri/renderD*".to_string()
        } else {
            missing.join(", ")
        };
        hits.extend(hit(
            format!("{which} missing: neither Vulkan nor ROCm can reach the AMD GPU"),
            "check that amdgpu loaded (dmesg | grep amdgpu); containers need --device /dev/dri",
        ));
    }
    // Only the AMD GPUs' nodes matter when sysfs says which they are.
    let amd: Vec<&str> = s
        .gpus
        .iter()
        .filter_map(|g| g.render_node.as_deref())
        .collect();
    let denied: Vec<&str> = nodes
        .iter()
        .filter(|d| d.read_write == Some(false))
        .filter(|d| amd.is_empty() || amd.iter().any(|n| d.path.ends_with(n)))
        .map(|d| d.path.as_str())
        .collect();
    if !denied.is_empty() {
        hits.extend(hit(
            format!(
                "this user cannot open {} read-write: neither Vulkan nor ROCm can use the GPU",
                denied.join(", ")
            ),
            GROUPS_ADVICE,
        ));
    }
    hits
}

pub(super) fn vulkan_no_amd_driver(s: &System) -> Vec<Hit> {
    if s.gpus.is_empty() || s.vulkan_drivers.iter().any(|d| d.kind.drives_amd()) {
        return vec![];
    }
    hit(
        format!(
            "no Vulkan driver for AMD GPUs ({} manifest(s) found): the vulkan backend cannot use {}",
            s.vulkan_drivers.len(),
            labels(&s.gpus)
        ),
        "install mesa-vulkan-drivers (RADV)",
    )
}

pub(super) fn rocm_7_0(s: &System) -> Vec<Hit> {
    if s.rocm.major_minor() != Some((7, 0)) {
        return vec![];
    }
    hit(
        format!(
            "ROCm {} is installed: regressions against 6.4.4 are reported on RDNA3 and Strix \
             Halo (slower prompt processing, hangs at graph reservation on gfx1151)",
            s.rocm.version.as_deref().unwrap_or("7.0")
        ),
        "if the rocm backend hangs or is slow, try ROCm 6.4.4, or --backend vulkan",
    )
}

pub(super) fn rocm_too_old(s: &System) -> Vec<Hit> {
    let libs = &s.rocm.hip_runtime_libraries;
    let usable = |path: &String| {
        let name = path.rsplit('/').next().unwrap_or(path);
        name == "libamdhip64.so"
            || name.starts_with("libamdhip64.so.6")
            || name.starts_with("libamdhip64.so.7")
    };
    let old_version = s.rocm.major_minor().is_some_and(|(major, _)| major < 6);
    let only_old_libraries = !libs.is_empty() && !libs.iter().any(usable);
    if !old_version && !only_old_libraries {
        return vec![];
    }
    let found = match &s.rocm.version {
        Some(v) if old_version => format!("ROCm {v}"),
        _ => libs.join(", "),
    };
    hit(
        format!("only an old HIP runtime is installed ({found}): the rocm backend needs ROCm 6.0 or newer"),
        "install ROCm 6.4+ (it can sit beside the old one; point ROCM_PATH at it), or use --backend vulkan",
    )
}

pub(super) fn rocm_not_found(s: &System) -> Vec<Hit> {
    if s.gpus.is_empty() || s.rocm.found() {
        return vec![];
    }
    hit(
        format!(
            "no ROCm runtime found (no {}/.info/version, no libamdhip64): the rocm backend \
             cannot run",
            s.rocm.path
        ),
        "install ROCm 6.4+ (or set ROCM_PATH), or use --backend vulkan (RADV)",
    )
}

pub(super) fn apu_iommu_translated(s: &System) -> Vec<Hit> {
    s.gpus
        .iter()
        .filter(|g| g.apu)
        .filter_map(|g| {
            let kind = match g.iommu_group_type.as_deref() {
                Some(t) if t.starts_with("DMA") => t.to_string(),
                None if s.settings.iommu.mode == IommuMode::Translated => "DMA".to_string(),
                _ => return None,
            };
            Some(Hit {
                message: format!(
                    "{} is an APU behind a translating IOMMU (group type {kind}): its access to \
                     system memory goes through IOMMU page tables, which can slow uploads",
                    g.label()
                ),
                advice: "if uploads are slow, boot with iommu=pt".to_string(),
            })
        })
        .collect()
}

pub(super) fn no_amd_gpu(s: &System) -> Vec<Hit> {
    if !s.gpus.is_empty() {
        return vec![];
    }
    let lavapipe = s
        .vulkan_drivers
        .iter()
        .any(|d| d.kind == DriverKind::Lavapipe);
    // An installed ICD says nothing about hardware; the DRM cards do.
    let vulkan = if !s.other_gpus.is_empty() {
        let cards: Vec<String> = s
            .other_gpus
            .iter()
            .map(|g| format!("{} (vendor {})", g.card, g.vendor))
            .collect();
        format!(
            "--backend vulkan may run on {} with its vendor's driver",
            cards.join(", ")
        )
    } else if lavapipe {
        "no other GPU either: --backend vulkan would find only lavapipe, a CPU driver (used \
         only with ROCMFORGE_VULKAN_ALLOW_CPU=1 or --device N, and slower than --backend cpu)"
            .to_string()
    } else {
        "no other GPU either, so --backend vulkan has nothing to run on".to_string()
    };
    hit(
        "no AMD GPU found: rocmforge will use the CPU backend (or Vulkan on another GPU)",
        format!(
            "--backend cpu runs here, and --backend auto (the default) falls back to it; {vulkan}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_name_targets() {
        assert_eq!(override_target("10.3.0").as_deref(), Some("gfx1030"));
        assert_eq!(override_target("11.0.0").as_deref(), Some("gfx1100"));
        assert_eq!(override_target("9.0.10").as_deref(), Some("gfx90a"));
        assert_eq!(override_target("gfx1100"), None);
        assert_eq!(override_target("11.0"), None);
    }

    #[test]
    fn visible_device_lists() {
        assert_eq!(visible_after("", 2), Some(0));
        assert_eq!(visible_after("0", 2), Some(1));
        assert_eq!(visible_after("0,1,1", 2), Some(2));
        assert_eq!(visible_after("2", 2), Some(0));
        assert_eq!(visible_after("-1", 1), Some(0));
        assert_eq!(visible_after("GPU-4b2c1a9f", 1), None);
    }
}
