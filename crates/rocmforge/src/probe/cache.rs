//! The verdicts of `--backend auto`'s probes, kept between runs so a later
//! run starts at once.
//!
//! A verdict is valid for one device, driver and build. Finding out which
//! device and driver are present by asking the driver is exactly what can
//! hang, so the key is a fingerprint of what the system shows without
//! driver calls: the GPUs' PCI ids and revisions from sysfs, the amdgpu and
//! NVIDIA kernel module versions, the kernel release, the identity (size and
//! modification time) of every runtime library and Vulkan driver manifest a
//! backend could load, the environment variables that change what those
//! runtimes do, and this binary's own identity (a rebuild reprobes). The
//! child's report of the device it ran on is stored for display.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Where verdicts live: `$ROCMFORGE_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/rocmforge`, else `~/.cache/rocmforge`.
pub fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("ROCMFORGE_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("rocmforge")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/rocmforge")))
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CachedVerdict {
    pub ok: bool,
    /// The device the probe ran on, when it got that far.
    pub device: Option<String>,
    /// Why it failed.
    pub reason: Option<String>,
    /// Seconds since the Unix epoch.
    pub probed_at: u64,
}

impl CachedVerdict {
    pub fn new(ok: bool, device: Option<String>, reason: Option<String>) -> CachedVerdict {
        CachedVerdict {
            ok,
            device,
            reason,
            probed_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

/// The verdict file: a JSON object from key to verdict. Unreadable or
/// corrupt files count as empty (the probe runs again), and a failure to
/// write is not an error: the cache only saves time.
pub struct VerdictCache {
    path: Option<PathBuf>,
    entries: BTreeMap<String, CachedVerdict>,
}

impl VerdictCache {
    pub fn open(dir: Option<&Path>) -> VerdictCache {
        let path = dir.map(|d| d.join("backend-probes.json"));
        let entries = path
            .as_deref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        VerdictCache { path, entries }
    }

    pub fn get(&self, key: &str) -> Option<&CachedVerdict> {
        self.entries.get(key)
    }

    /// Records a verdict and writes the file (through a temporary name, so
    /// a concurrent reader sees the old file or the new one).
    pub fn put(&mut self, key: String, verdict: CachedVerdict) {
        self.entries.insert(key, verdict);
        let Some(path) = &self.path else { return };
        let Some(dir) = path.parent() else { return };
        let tmp = path.with_extension(format!("json.{}", std::process::id()));
        let bytes = serde_json::to_vec_pretty(&self.entries).expect("verdicts serialize");
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// The cache key of `backend` on `device` on this system and build.
pub fn key(backend: &str, device: Option<usize>) -> String {
    let device = device.map_or("default".to_string(), |d| d.to_string());
    format!(
        "{backend}/{device}/{}-{:016x}",
        env!("CARGO_PKG_VERSION"),
        fingerprint(Path::new("/"))
    )
}

/// Environment variables that change which runtime or device a backend
/// gets, or how it behaves.
const ENV_KEYS: &[&str] = &[
    "ROCMFORGE_HIP_RUNTIME",
    "ROCMFORGE_VULKAN_ALLOW_CPU",
    "ROCM_PATH",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "HSA_ENABLE_SDMA",
    "HSA_OVERRIDE_GFX_VERSION",
    "VK_ICD_FILENAMES",
    "VK_DRIVER_FILES",
    "LD_LIBRARY_PATH",
];

/// Files whose contents identify the kernel, drivers and firmware.
const CONTENT_FILES: &[&str] = &[
    "proc/sys/kernel/osrelease",
    "sys/module/amdgpu/version",
    "proc/driver/nvidia/version",
    "opt/rocm/.info/version",
];

/// Directories whose files' identities (name, size, mtime) stand for the
/// installed runtimes: the HIP runtime, the CUDA driver, the Vulkan loader
/// and its driver manifests.
const LIBRARY_DIRS: &[&str] = &[
    "opt/rocm/lib",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/share/vulkan/icd.d",
    "etc/vulkan/icd.d",
];

/// Prefixes of the library files that matter in [`LIBRARY_DIRS`].
const LIBRARY_PREFIXES: &[&str] = &["libamdhip64", "libcuda.so", "libvulkan.so"];

/// A hash of everything listed in the module doc, read under `root` (`/`
/// in use; a fake tree in tests).
pub fn fingerprint(root: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for k in ENV_KEYS {
        (k, std::env::var_os(k)).hash(&mut h);
    }
    for f in CONTENT_FILES {
        (f, std::fs::read(root.join(f)).ok()).hash(&mut h);
    }
    for card in sorted_entries(&root.join("sys/class/drm")) {
        let name = card.file_name().map(|n| n.to_string_lossy().into_owned());
        if !name
            .as_deref()
            .is_some_and(|n| n.starts_with("card") && !n.contains('-'))
        {
            continue;
        }
        for f in ["vendor", "device", "revision", "fw_version/mes_fw_version"] {
            (f, std::fs::read(card.join("device").join(f)).ok()).hash(&mut h);
        }
    }
    for dir in LIBRARY_DIRS {
        let icd = dir.ends_with("icd.d");
        for f in sorted_entries(&root.join(dir)) {
            let name = f
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            let wanted = if icd {
                name.ends_with(".json")
            } else {
                LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p))
            };
            if wanted {
                identity(&f).hash(&mut h);
            }
        }
    }
    std::env::current_exe()
        .ok()
        .map(|exe| identity(&exe))
        .hash(&mut h);
    h.finish()
}

/// A file's name, size and modification time (following links, so a
/// library upgraded behind its soname link counts as changed).
fn identity(path: &Path) -> (String, Option<(u64, u128)>) {
    let meta = std::fs::metadata(path).ok().map(|m| {
        let mtime = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        (m.len(), mtime)
    });
    (path.display().to_string(), meta)
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rocmforge-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn verdicts_survive_a_reopen_and_corruption_is_empty() {
        let dir = scratch("reopen");
        let mut c = VerdictCache::open(Some(&dir));
        assert!(c.get("k").is_none());
        let v = CachedVerdict::new(false, None, Some("hung".into()));
        c.put("k".into(), v.clone());
        assert_eq!(VerdictCache::open(Some(&dir)).get("k"), Some(&v));
        std::fs::write(dir.join("backend-probes.json"), b"{not json").unwrap();
        assert!(VerdictCache::open(Some(&dir)).get("k").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_fingerprint_follows_devices_drivers_and_libraries() {
        let root = scratch("fp");
        let base = fingerprint(&root);
        assert_eq!(fingerprint(&root), base, "stable");
        let card = root.join("sys/class/drm/card0/device");
        std::fs::create_dir_all(&card).unwrap();
        std::fs::write(card.join("vendor"), "0x1002\n").unwrap();
        std::fs::write(card.join("device"), "0x744c\n").unwrap();
        let with_gpu = fingerprint(&root);
        assert_ne!(with_gpu, base, "a new GPU");
        std::fs::create_dir_all(root.join("sys/module/amdgpu")).unwrap();
        std::fs::write(root.join("sys/module/amdgpu/version"), "6.10.5\n").unwrap();
        let with_driver = fingerprint(&root);
        assert_ne!(with_driver, with_gpu, "a driver version");
        std::fs::create_dir_all(root.join("opt/rocm/lib")).unwrap();
        std::fs::write(root.join("opt/rocm/lib/libamdhip64.so.6"), b"x").unwrap();
        let with_rocm = fingerprint(&root);
        assert_ne!(with_rocm, with_driver, "a runtime library");
        std::fs::write(root.join("opt/rocm/lib/libamdhip64.so.6"), b"xy").unwrap();
        assert_ne!(fingerprint(&root), with_rocm, "an upgraded runtime");
        std::fs::write(root.join("opt/rocm/lib/unrelated.txt"), b"x").unwrap();
        let before = fingerprint(&root);
        std::fs::write(root.join("opt/rocm/lib/unrelated.txt"), b"xyz").unwrap();
        assert_eq!(fingerprint(&root), before, "unrelated files do not count");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
