//! What doctor reads: the [`SysRoot`] every path goes through, the
//! environment, and the [`System`] gathered from both.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::gpu::{self, Gpu, MesFirmware, OtherGpu};
use super::stack::{self, DeviceNodes, Rocm, VulkanDriver};
use super::DoctorError;

/// Environment variables by name; unset ones are absent.
pub type Environment = BTreeMap<String, String>;

/// The variables that change how the GPU stack behaves, so the report shows
/// them set or not.
pub const ENV_VARS: &[&str] = &[
    "HSA_ENABLE_SDMA",
    "HSA_OVERRIDE_GFX_VERSION",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ROCM_PATH",
    "ROCMFORGE_HIP_RUNTIME",
    "VK_DRIVER_FILES",
    "VK_ICD_FILENAMES",
];

/// This process's values of [`ENV_VARS`].
pub fn process_environment() -> Environment {
    ENV_VARS
        .iter()
        .filter_map(|k| {
            let v = std::env::var_os(k)?;
            Some((k.to_string(), v.to_string_lossy().into_owned()))
        })
        .collect()
}

/// A directory standing for `/`: the real root, or a fake one in tests.
#[derive(Debug, Clone)]
pub struct SysRoot {
    dir: PathBuf,
}

impl SysRoot {
    /// Fails only when `dir` itself cannot be listed; anything missing
    /// inside it is reported as missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, DoctorError> {
        let dir = dir.into();
        match std::fs::read_dir(&dir) {
            Ok(_) => Ok(Self { dir }),
            Err(source) => Err(DoctorError::UnreadableRoot { path: dir, source }),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `/sys/class/drm` -> `<root>/sys/class/drm`.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let p = abs.as_ref();
        self.dir.join(p.strip_prefix("/").unwrap_or(p))
    }

    /// A file's text, trimmed; None when missing or unreadable.
    pub fn read(&self, abs: impl AsRef<Path>) -> Option<String> {
        let text = std::fs::read_to_string(self.path(abs)).ok()?;
        Some(text.trim().to_string())
    }

    pub fn exists(&self, abs: impl AsRef<Path>) -> bool {
        self.path(abs).exists()
    }

    /// The names in a directory, sorted; empty when it cannot be listed.
    pub fn list(&self, abs: impl AsRef<Path>) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(abs))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Kernel {
    /// `/proc/sys/kernel/osrelease`, e.g. `6.8.0-45-generic`.
    pub release: Option<String>,
    /// (major, minor) of the release.
    pub version: Option<(u32, u32)>,
}

impl Kernel {
    /// Whether the kernel is known to be older than `major.minor`.
    pub fn before(&self, major: u32, minor: u32) -> bool {
        self.version.is_some_and(|v| v < (major, minor))
    }
}

/// `6.18.44-fc-v669` -> (6, 18).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// `amdgpu.cwsr_enable` from both places it can be set.
#[derive(Debug, Clone, Serialize)]
pub struct Cwsr {
    /// `/sys/module/amdgpu/parameters/cwsr_enable`: the value the loaded
    /// driver uses, whether it came from the command line or modprobe.d.
    pub module_parameter: Option<i64>,
    /// `amdgpu.cwsr_enable=` on `/proc/cmdline`.
    pub cmdline: Option<i64>,
}

impl Cwsr {
    /// The value in force: the module parameter when the driver is loaded,
    /// else what the command line asks for. None: not set (driver default,
    /// on).
    pub fn live(&self) -> Option<i64> {
        self.module_parameter.or(self.cmdline)
    }

    pub fn describe(&self) -> String {
        match (self.module_parameter, self.cmdline) {
            // A command line the driver disagrees with was not booted yet,
            // or modprobe.d overrides it.
            (Some(m), Some(c)) if m != c => format!(
                "amdgpu.cwsr_enable={m} (module parameter; the command line's {c} is not in force)"
            ),
            (Some(m), _) => format!("amdgpu.cwsr_enable={m} (module parameter)"),
            (None, Some(c)) => format!("amdgpu.cwsr_enable={c} (kernel command line)"),
            (None, None) => "amdgpu.cwsr_enable not set (driver default: on)".to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IommuMode {
    Off,
    /// Devices bypass translation (`identity` groups, `iommu=pt`).
    Passthrough,
    /// DMA goes through IOMMU page tables (`DMA`, `DMA-FQ` groups).
    Translated,
    /// Some groups of each kind.
    Mixed,
    Unknown,
}

#[derive(Debug, Clone, Serialize)]
pub struct Iommu {
    /// `iommu=`, `amd_iommu=` and `intel_iommu=` options on the command line.
    pub cmdline: Vec<String>,
    /// Entries of `/sys/class/iommu` (one per IOMMU unit).
    pub units: Vec<String>,
    /// `/sys/kernel/iommu_groups/*/type` values, counted.
    pub group_types: BTreeMap<String, usize>,
    pub mode: IommuMode,
}

fn iommu(root: &SysRoot, cmdline: &str) -> Iommu {
    let options: Vec<String> = cmdline
        .split_whitespace()
        .filter(|w| {
            ["iommu=", "amd_iommu=", "intel_iommu="]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(str::to_string)
        .collect();
    let mut group_types = BTreeMap::new();
    for g in root.list("/sys/kernel/iommu_groups") {
        if let Some(t) = root.read(format!("/sys/kernel/iommu_groups/{g}/type")) {
            *group_types.entry(t).or_insert(0) += 1;
        }
    }
    let translated = group_types.keys().filter(|t| t.starts_with("DMA")).count();
    let mode = if !group_types.is_empty() {
        match (translated, group_types.len() - translated) {
            (0, _) => IommuMode::Passthrough,
            (_, 0) => IommuMode::Translated,
            _ => IommuMode::Mixed,
        }
    } else if options.iter().any(|o| o.ends_with("=off")) {
        IommuMode::Off
    } else if root.exists("/sys/kernel/iommu_groups") {
        // The directory exists but no device sits behind an IOMMU.
        IommuMode::Off
    } else if options.iter().any(|o| o == "iommu=pt") {
        IommuMode::Passthrough
    } else {
        IommuMode::Unknown
    };
    Iommu {
        cmdline: options,
        units: root.list("/sys/class/iommu"),
        group_types,
        mode,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// `/proc/cmdline`.
    pub cmdline: Option<String>,
    pub cwsr: Cwsr,
    pub iommu: Iommu,
}

/// The last `name=value` of a command line (the kernel lets later ones win).
fn cmdline_option<'a>(cmdline: &'a str, name: &str) -> Option<&'a str> {
    cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix(name)?.strip_prefix('='))
        .next_back()
}

#[derive(Debug, Clone, Serialize)]
pub struct Build {
    /// The gfx targets this binary has HIP code objects for.
    pub code_object_targets: Vec<String>,
}

/// Everything doctor found; each item may be unknown.
#[derive(Debug, Clone, Serialize)]
pub struct System {
    /// The directory read as `/`.
    pub sysroot: String,
    pub gpus: Vec<Gpu>,
    /// Non-AMD display devices (for Vulkan on another GPU).
    pub other_gpus: Vec<OtherGpu>,
    /// Whether `/sys/class/drm` exists (a VM or container may have none).
    pub drm_present: bool,
    /// Whether the KFD topology exists (amdgpu loaded with KFD).
    pub kfd_topology_present: bool,
    pub device_nodes: DeviceNodes,
    pub rocm: Rocm,
    pub vulkan_drivers: Vec<VulkanDriver>,
    pub kernel: Kernel,
    /// MES firmware per AMD GPU.
    pub firmware: Vec<MesFirmware>,
    pub settings: Settings,
    /// [`ENV_VARS`], null when unset.
    pub environment: BTreeMap<String, Option<String>>,
    pub build: Build,
}

impl System {
    /// Reads everything; never fails (what cannot be read is unknown).
    pub fn gather(root: &SysRoot, env: &Environment, built_targets: &[String]) -> System {
        let mut gpus = gpu::scan(root);
        for g in &mut gpus.amd {
            g.code_object = g
                .gfx
                .as_deref()
                .map(|gfx| has_code_object(built_targets, gfx));
        }
        let firmware = gpu::mes_firmware(root, &gpus.amd);
        let release = root.read("/proc/sys/kernel/osrelease");
        let cmdline = root.read("/proc/cmdline");
        let line = cmdline.as_deref().unwrap_or("");
        let param = |v: &str| v.trim().parse::<i64>().ok();
        System {
            sysroot: root.dir().display().to_string(),
            device_nodes: stack::device_nodes(root),
            rocm: stack::rocm(root, env),
            vulkan_drivers: stack::vulkan_drivers(root, env),
            kernel: Kernel {
                version: release.as_deref().and_then(kernel_version),
                release,
            },
            firmware,
            settings: Settings {
                cwsr: Cwsr {
                    module_parameter: root
                        .read("/sys/module/amdgpu/parameters/cwsr_enable")
                        .and_then(|v| param(&v)),
                    cmdline: cmdline_option(line, "amdgpu.cwsr_enable").and_then(param),
                },
                iommu: iommu(root, line),
                cmdline,
            },
            environment: ENV_VARS
                .iter()
                .map(|k| (k.to_string(), env.get(*k).cloned()))
                .collect(),
            build: Build {
                code_object_targets: built_targets.to_vec(),
            },
            gpus: gpus.amd,
            other_gpus: gpus.other,
            drm_present: gpus.drm_present,
            kfd_topology_present: gpus.kfd_present,
        }
    }

    /// A variable of [`ENV_VARS`], None when unset.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.environment.get(name)?.as_deref()
    }
}

/// Whether the build has a code object for `gfx` (built names may carry
/// feature suffixes such as `:xnack-`).
pub fn has_code_object(built_targets: &[String], gfx: &str) -> bool {
    use rocmforge_hip::code_objects::base_arch;
    built_targets.iter().any(|t| base_arch(t) == base_arch(gfx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_parse() {
        assert_eq!(kernel_version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(kernel_version("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(kernel_version("7.0"), Some((7, 0)));
        assert_eq!(kernel_version("garbage"), None);
        let k = Kernel {
            release: None,
            version: Some((6, 17)),
        };
        assert!(k.before(6, 18) && !k.before(6, 17));
    }

    #[test]
    fn later_cmdline_options_win() {
        let line = "ro amdgpu.cwsr_enable=1 quiet amdgpu.cwsr_enable=0";
        assert_eq!(cmdline_option(line, "amdgpu.cwsr_enable"), Some("0"));
        assert_eq!(
            cmdline_option("amdgpu.cwsr_enable_x=1", "amdgpu.cwsr_enable"),
            None
        );
    }

    #[test]
    fn module_parameter_is_the_live_cwsr_value() {
        let both = Cwsr {
            module_parameter: Some(1),
            cmdline: Some(0),
        };
        assert_eq!(both.live(), Some(1));
        assert!(
            both.describe().contains("0 is not in force"),
            "{}",
            both.describe()
        );
        let cmdline_only = Cwsr {
            module_parameter: None,
            cmdline: Some(0),
        };
        assert_eq!(cmdline_only.live(), Some(0));
        assert!(cmdline_only.describe().contains("kernel command line"));
    }

    #[test]
    fn code_objects_match_by_base_arch() {
        let built = vec!["gfx1100".to_string(), "gfx1151:xnack-".to_string()];
        assert!(has_code_object(&built, "gfx1100"));
        assert!(has_code_object(&built, "gfx1151"));
        assert!(!has_code_object(&built, "gfx1030"));
    }
}
