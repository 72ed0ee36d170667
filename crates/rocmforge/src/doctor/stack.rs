//! The software between rocmforge and the GPU: the ROCm installation, the
//! Vulkan drivers (ICD manifests), and the device nodes both open.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::Serialize;

use super::system::{Environment, SysRoot};

/// Where distribution packages put `libamdhip64` (besides `<rocm>/lib`);
/// rocmforge-hip finds those through the loader's search path.
const SYSTEM_LIB_DIRS: &[&str] = &["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"];

#[derive(Debug, Clone, Serialize)]
pub struct Rocm {
    /// `$ROCM_PATH`, else `/opt/rocm`.
    pub path: String,
    pub path_from_env: bool,
    /// `<path>/.info/version`, e.g. `6.4.4-120`.
    pub version: Option<String>,
    /// `/opt/rocm-*` directories.
    pub installs: Vec<String>,
    /// `libamdhip64*` files found, as full paths.
    pub hip_runtime_libraries: Vec<String>,
}

impl Rocm {
    /// Whether a HIP runtime looks installed.
    pub fn found(&self) -> bool {
        self.version.is_some() || !self.hip_runtime_libraries.is_empty()
    }

    /// `6.4.4-120` -> (6, 4).
    pub fn major_minor(&self) -> Option<(u32, u32)> {
        let v = self.version.as_deref()?;
        let mut parts = v.split(|c: char| !c.is_ascii_digit());
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    }
}

pub fn rocm(root: &SysRoot, env: &Environment) -> Rocm {
    let from_env = env.get("ROCM_PATH").filter(|p| !p.is_empty());
    let path = from_env.cloned().unwrap_or_else(|| "/opt/rocm".to_string());
    let mut lib_dirs = vec![format!("{path}/lib"), "/opt/rocm/lib".to_string()];
    lib_dirs.extend(SYSTEM_LIB_DIRS.iter().map(|d| d.to_string()));
    lib_dirs.dedup();
    let hip_runtime_libraries = lib_dirs
        .iter()
        .flat_map(|dir| {
            root.list(dir)
                .into_iter()
                .filter(|n| n.starts_with("libamdhip64"))
                .map(move |n| format!("{dir}/{n}"))
        })
        .collect();
    Rocm {
        version: root.read(format!("{path}/.info/version")),
        installs: root
            .list("/opt")
            .into_iter()
            .filter(|n| n.starts_with("rocm-"))
            .map(|n| format!("/opt/{n}"))
            .collect(),
        hip_runtime_libraries,
        path_from_env: from_env.is_some(),
        path,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    Radv,
    Amdvlk,
    AmdProprietary,
    Lavapipe,
    Nvidia,
    Intel,
    Other,
}

impl DriverKind {
    /// Whether the driver runs AMD GPUs.
    pub fn drives_amd(self) -> bool {
        matches!(self, Self::Radv | Self::Amdvlk | Self::AmdProprietary)
    }

    /// Classifies a manifest by its file name, as distributions name them.
    pub fn from_manifest(file_name: &str) -> Self {
        let n = file_name.to_ascii_lowercase();
        if n.starts_with("radeon_icd") {
            Self::Radv
        } else if n.starts_with("amd_pro_icd") {
            Self::AmdProprietary
        } else if n.starts_with("amd_icd") {
            Self::Amdvlk
        } else if n.starts_with("lvp_icd") {
            Self::Lavapipe
        } else if n.starts_with("nvidia_icd") {
            Self::Nvidia
        } else if n.starts_with("intel_") {
            Self::Intel
        } else {
            Self::Other
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Radv => "RADV (Mesa, AMD)",
            Self::Amdvlk => "AMDVLK (AMD)",
            Self::AmdProprietary => "AMD proprietary (amdgpu-pro)",
            Self::Lavapipe => "lavapipe (Mesa, runs on the CPU)",
            Self::Nvidia => "NVIDIA",
            Self::Intel => "Intel (Mesa)",
            Self::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct VulkanDriver {
    /// The ICD manifest's path.
    pub manifest: String,
    pub kind: DriverKind,
    /// `ICD.library_path` of the manifest.
    pub library_path: Option<String>,
    /// `ICD.api_version` of the manifest.
    pub api_version: Option<String>,
}

/// The loader's system manifest directories, in its search order.
const ICD_DIRS: &[&str] = &[
    "/etc/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
    "/usr/share/vulkan/icd.d",
];

/// The ICD manifests the Vulkan loader would read: those named by
/// `VK_DRIVER_FILES` (or the older `VK_ICD_FILENAMES`) when set, since they
/// replace the search, else the system directories.
pub fn vulkan_drivers(root: &SysRoot, env: &Environment) -> Vec<VulkanDriver> {
    let chosen = ["VK_DRIVER_FILES", "VK_ICD_FILENAMES"]
        .iter()
        .find_map(|k| env.get(*k).filter(|v| !v.is_empty()));
    let entries: Vec<String> = match chosen {
        Some(list) => list
            .split(':')
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect(),
        None => ICD_DIRS.iter().map(|d| d.to_string()).collect(),
    };
    let mut manifests = Vec::new();
    for entry in entries {
        if root.path(&entry).is_dir() {
            manifests.extend(
                root.list(&entry)
                    .into_iter()
                    .filter(|n| n.ends_with(".json"))
                    .map(|n| format!("{}/{n}", entry.trim_end_matches('/'))),
            );
        } else if root.exists(&entry) {
            manifests.push(entry);
        }
    }
    manifests
        .into_iter()
        .map(|manifest| {
            let json: Option<serde_json::Value> = root
                .read(&manifest)
                .and_then(|t| serde_json::from_str(&t).ok());
            let field = |k: &str| Some(json.as_ref()?.get("ICD")?.get(k)?.as_str()?.to_string());
            let file_name = Path::new(&manifest)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            VulkanDriver {
                kind: DriverKind::from_manifest(&file_name),
                library_path: field("library_path"),
                api_version: field("api_version"),
                manifest,
            }
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceNode {
    pub path: String,
    pub present: bool,
    /// Whether this process may open it read-write (None when absent).
    pub read_write: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceNodes {
    /// `/dev/kfd`, which ROCm needs.
    pub kfd: DeviceNode,
    /// `/dev/dri/renderD*`, which ROCm and Vulkan need.
    pub render: Vec<DeviceNode>,
}

fn node(root: &SysRoot, path: String) -> DeviceNode {
    let present = root.exists(&path);
    DeviceNode {
        read_write: present.then(|| may_read_write(&root.path(&path))),
        present,
        path,
    }
}

pub fn device_nodes(root: &SysRoot) -> DeviceNodes {
    DeviceNodes {
        kfd: node(root, "/dev/kfd".to_string()),
        render: root
            .list("/dev/dri")
            .into_iter()
            .filter(|n| n.starts_with("renderD"))
            .map(|n| node(root, format!("/dev/dri/{n}")))
            .collect(),
    }
}

/// Asks the kernel whether this process's effective ids (with groups, ACLs
/// such as logind's `uaccess`, and capabilities) allow read-write access,
/// without opening the file: opening a GPU node runs driver code.
pub fn may_read_write(path: &Path) -> bool {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c_path` is a NUL-terminated string that lives across the
    // call; faccessat only reads it and keeps no reference.
    let rc = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            libc::R_OK | libc::W_OK,
            libc::AT_EACCESS,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_classified_by_name() {
        for (manifest, kind) in [
            ("radeon_icd.x86_64.json", DriverKind::Radv),
            ("amd_icd64.json", DriverKind::Amdvlk),
            ("amd_pro_icd64.json", DriverKind::AmdProprietary),
            ("lvp_icd.x86_64.json", DriverKind::Lavapipe),
            ("nvidia_icd.json", DriverKind::Nvidia),
            ("intel_hasvk_icd.x86_64.json", DriverKind::Intel),
            ("virtio_icd.x86_64.json", DriverKind::Other),
        ] {
            assert_eq!(DriverKind::from_manifest(manifest), kind, "{manifest}");
        }
        assert!(DriverKind::Radv.drives_amd() && !DriverKind::Lavapipe.drives_amd());
    }

    #[test]
    fn access_check_does_not_need_a_device() {
        let file = std::env::temp_dir().join(format!("rocmforge-doctor-rw-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        // A file this process just created is its own, so read-write.
        assert!(may_read_write(&file));
        std::fs::remove_file(&file).unwrap();
        assert!(!may_read_write(&file));
    }

    #[test]
    fn rocm_versions_parse() {
        let r = Rocm {
            path: "/opt/rocm".into(),
            path_from_env: false,
            version: Some("7.0.1-42".into()),
            installs: vec![],
            hip_runtime_libraries: vec![],
        };
        assert_eq!(r.major_minor(), Some((7, 0)));
        assert!(r.found());
    }
}
