//! AMD GPUs from sysfs: DRM cards (PCI vendor 0x1002) joined with the KFD
//! topology nodes that give their gfx target, and each GPU's MES firmware.
//!
//! Only attributes the driver answers from memory are read (ids, memory
//! totals, firmware versions it loaded): attributes such as
//! `gpu_busy_percent` or `pp_dpm_*` ask the SMU and can wake or hang on a
//! sick GPU.

use serde::{Serialize, Serializer};

use super::system::SysRoot;

const DRM: &str = "/sys/class/drm";
const KFD_NODES: &str = "/sys/class/kfd/kfd/topology/nodes";
const GIB: u64 = 1 << 30;

/// gfx targets of APUs (GPU and CPU share memory): Raven/Picasso,
/// Renoir/Cezanne, Van Gogh, Rembrandt, Raphael, Mendocino, Phoenix, Strix
/// Point, Strix Halo, Krackan.
const APU_TARGETS: &[&str] = &[
    "gfx801", "gfx810", "gfx902", "gfx909", "gfx90c", "gfx1033", "gfx1035", "gfx1036", "gfx1037",
    "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
];

#[derive(Debug, Clone, Default, Serialize)]
pub struct Gpu {
    /// `card1`; None for a KFD node without a DRM card.
    pub card: Option<String>,
    /// `0000:03:00.0`.
    pub pci_slot: Option<String>,
    /// PCI device id, `0x744c`.
    pub device_id: Option<String>,
    /// `gfx1100`, from the KFD topology.
    pub gfx: Option<String>,
    /// KFD's `gfx_target_version`, e.g. 110000.
    pub gfx_target_version: Option<u32>,
    /// KFD topology node number.
    pub kfd_node: Option<String>,
    /// `renderD128`, the card's render node.
    pub render_node: Option<String>,
    pub vram_total_bytes: Option<u64>,
    pub gtt_total_bytes: Option<u64>,
    pub apu: bool,
    /// The `type` of the card's IOMMU group: `identity`, `DMA`, `DMA-FQ`.
    pub iommu_group_type: Option<String>,
    /// Whether this binary has a HIP code object for `gfx` (None: gfx
    /// unknown).
    pub code_object: Option<bool>,
}

impl Gpu {
    /// `card1 (gfx1100, 0000:03:00.0)`, for messages.
    pub fn label(&self) -> String {
        let card = self.card.as_deref().unwrap_or("GPU");
        let node = self.kfd_node.as_ref().map(|n| format!("KFD node {n}"));
        let details: Vec<&str> = [
            self.gfx.as_deref(),
            self.pci_slot.as_deref(),
            node.as_deref(),
        ]
        .into_iter()
        .flatten()
        .take(2)
        .collect();
        format!("{card} ({})", details.join(", "))
    }

    /// Whether the gfx target starts with `prefix` (`gfx11`: RDNA3/3.5).
    pub fn gfx_is(&self, prefix: &str) -> bool {
        self.gfx.as_deref().is_some_and(|g| g.starts_with(prefix))
    }
}

/// A display device of another vendor.
#[derive(Debug, Clone, Serialize)]
pub struct OtherGpu {
    pub card: String,
    pub vendor: String,
}

/// Where the NVIDIA driver lists its GPUs.
const NVIDIA_GPUS: &str = "/proc/driver/nvidia/gpus";

pub struct Scan {
    pub amd: Vec<Gpu>,
    pub other: Vec<OtherGpu>,
    /// Whether `/sys/class/drm` and the KFD topology exist at all.
    pub drm_present: bool,
    pub kfd_present: bool,
}

/// KFD's `gfx_target_version` (major*10000 + minor*100 + stepping) as a gfx
/// name; minor and stepping are single hex digits: 90010 -> gfx90a.
pub fn gfx_name(target_version: u32) -> String {
    let major = target_version / 10000;
    let minor = (target_version / 100) % 100;
    let stepping = target_version % 100;
    format!("gfx{major}{minor:x}{stepping:x}")
}

/// `0000:03:00.0` -> (domain, KFD location_id = bus << 8 | device << 3 |
/// function).
pub fn pci_location(slot: &str) -> Option<(u64, u64)> {
    let (domain, rest) = slot.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    Some((hex(domain)?, hex(bus)? << 8 | hex(dev)? << 3 | hex(func)?))
}

struct KfdNode {
    id: String,
    gfx_target_version: u32,
    location: Option<(u64, u64)>,
}

fn kfd_gpu_nodes(root: &SysRoot) -> Vec<KfdNode> {
    let mut ids = root.list(KFD_NODES);
    ids.sort_by_key(|n| n.parse::<u64>().unwrap_or(u64::MAX));
    ids.into_iter()
        .filter_map(|id| {
            let text = root.read(format!("{KFD_NODES}/{id}/properties"))?;
            let prop = |key: &str| {
                text.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse::<u64>().ok())?
                })
            };
            // CPU nodes have target version 0.
            let gfx_target_version = prop("gfx_target_version").filter(|v| *v != 0)? as u32;
            let location = prop("location_id").map(|l| (prop("domain").unwrap_or(0), l));
            Some(KfdNode {
                id,
                gfx_target_version,
                location,
            })
        })
        .collect()
}

/// `card0`, `card1`, ... in index order (not connectors like `card0-DP-1`).
fn cards(root: &SysRoot) -> Vec<(u32, String)> {
    let mut cards: Vec<(u32, String)> = root
        .list(DRM)
        .into_iter()
        .filter_map(|name| Some((name.strip_prefix("card")?.parse().ok()?, name)))
        .collect();
    cards.sort();
    cards
}

fn pci_slot(root: &SysRoot, card: &str) -> Option<String> {
    let dev = format!("{DRM}/{card}/device");
    let from_uevent = root.read(format!("{dev}/uevent")).and_then(|u| {
        u.lines()
            .find_map(|l| l.strip_prefix("PCI_SLOT_NAME=").map(str::to_string))
    });
    // On a real system `device` links to the PCI device's directory, whose
    // name is the slot.
    from_uevent.or_else(|| {
        let target = std::fs::read_link(root.path(&dev)).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    })
}

fn is_apu(g: &Gpu) -> bool {
    let listed = g.gfx.as_deref().is_some_and(|t| APU_TARGETS.contains(&t));
    // A small carve-out next to a large GTT is how an APU's memory looks.
    let looks_unified = matches!((g.vram_total_bytes, g.gtt_total_bytes),
        (Some(v), Some(gtt)) if v <= GIB && gtt >= 4 * GIB);
    listed || looks_unified
}

/// The AMD GPUs and other display devices under `root`.
pub fn scan(root: &SysRoot) -> Scan {
    let mut amd = Vec::new();
    let mut other = Vec::new();
    for (_, card) in cards(root) {
        let dev = format!("{DRM}/{card}/device");
        let vendor = root.read(format!("{dev}/vendor"));
        if vendor.as_deref() != Some("0x1002") {
            if let Some(vendor) = vendor {
                other.push(OtherGpu { card, vendor });
            }
            continue;
        }
        let bytes = |file: &str| root.read(format!("{dev}/{file}"))?.parse().ok();
        amd.push(Gpu {
            pci_slot: pci_slot(root, &card),
            device_id: root.read(format!("{dev}/device")),
            render_node: root
                .list(format!("{dev}/drm"))
                .into_iter()
                .find(|n| n.starts_with("renderD")),
            vram_total_bytes: bytes("mem_info_vram_total"),
            gtt_total_bytes: bytes("mem_info_gtt_total"),
            iommu_group_type: root.read(format!("{dev}/iommu_group/type")),
            card: Some(card),
            ..Gpu::default()
        });
    }
    // Containers often show no DRM cards; NVIDIA's driver still lists its
    // GPUs under /proc (one directory per PCI slot, a "Model:" line each).
    for slot in root.list(NVIDIA_GPUS) {
        let model = root
            .read(format!("{NVIDIA_GPUS}/{slot}/information"))
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("Model:").map(|m| m.trim().to_string()))
            });
        let card = model.map_or(slot.clone(), |m| format!("{m} ({slot})"));
        if !other.iter().any(|o| o.vendor == "0x10de") {
            other.push(OtherGpu {
                card,
                vendor: "0x10de".to_string(),
            });
        }
    }
    join_kfd_nodes(&mut amd, kfd_gpu_nodes(root));
    for g in &mut amd {
        g.apu = is_apu(g);
    }
    Scan {
        amd,
        other,
        drm_present: root.exists(DRM),
        kfd_present: root.exists(KFD_NODES),
    }
}

/// Gives each card its KFD node: by PCI location where the node has one,
/// then the rest in order. Nodes left over (no DRM card readable) become
/// GPUs of their own.
fn join_kfd_nodes(gpus: &mut Vec<Gpu>, nodes: Vec<KfdNode>) {
    let mut nodes: Vec<Option<KfdNode>> = nodes.into_iter().map(Some).collect();
    let take = |g: &mut Gpu, n: KfdNode| {
        g.gfx = Some(gfx_name(n.gfx_target_version));
        g.gfx_target_version = Some(n.gfx_target_version);
        g.kfd_node = Some(n.id);
    };
    for g in gpus.iter_mut() {
        let Some(loc) = g.pci_slot.as_deref().and_then(pci_location) else {
            continue;
        };
        let hit = nodes
            .iter_mut()
            .find(|n| n.as_ref().is_some_and(|n| n.location == Some(loc)));
        if let Some(n) = hit.and_then(Option::take) {
            take(g, n);
        }
    }
    let mut rest = nodes.into_iter().flatten();
    for g in gpus.iter_mut().filter(|g| g.kfd_node.is_none()) {
        match rest.next() {
            Some(n) => take(g, n),
            None => break,
        }
    }
    for n in rest {
        let mut g = Gpu::default();
        take(&mut g, n);
        gpus.push(g);
    }
}

/// The MES (micro engine scheduler) firmware a GPU runs, and where that was
/// read.
#[derive(Debug, Clone, Serialize)]
pub struct MesFirmware {
    pub card: String,
    #[serde(serialize_with = "hex")]
    pub mes: Option<u32>,
    /// The file it came from, or why it could not be read.
    pub from: String,
}

fn hex<S: Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&format!("{v:#010x}")),
        None => s.serialize_none(),
    }
}

fn parse_hex(s: &str) -> Option<u32> {
    let s = s.trim();
    u32::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

/// `MES feature version: 1, firmware version: 0x00000080` (not the
/// `MES_KIQ` line) from debugfs' `amdgpu_firmware_info`.
pub fn mes_from_firmware_info(text: &str) -> Option<u32> {
    text.lines()
        .find(|l| l.starts_with("MES feature version:"))
        .and_then(|l| l.split_once("firmware version:"))
        .and_then(|(_, v)| parse_hex(v))
}

/// Each card's MES firmware: sysfs `fw_version/mes_fw_version` (readable by
/// anyone on recent kernels), else debugfs (root only).
pub fn mes_firmware(root: &SysRoot, gpus: &[Gpu]) -> Vec<MesFirmware> {
    let debugfs = "/sys/kernel/debug/dri";
    let only_one = gpus.iter().filter(|g| g.card.is_some()).count() == 1;
    gpus.iter()
        .filter_map(|g| {
            let card = g.card.clone()?;
            let sysfs = format!("{DRM}/{card}/device/fw_version/mes_fw_version");
            if let Some(v) = root.read(&sysfs).as_deref().and_then(parse_hex) {
                return Some(MesFirmware {
                    card,
                    mes: Some(v),
                    from: sysfs,
                });
            }
            // debugfs names a GPU's directory by DRM minor or PCI slot; with
            // one GPU any directory is it.
            let mut dirs: Vec<String> = vec![card.trim_start_matches("card").to_string()];
            dirs.extend(g.pci_slot.clone());
            if only_one {
                dirs.extend(root.list(debugfs));
            }
            let found = dirs.iter().find_map(|d| {
                let path = format!("{debugfs}/{d}/amdgpu_firmware_info");
                let v = mes_from_firmware_info(&root.read(&path)?)?;
                Some((v, path))
            });
            Some(match found {
                Some((v, path)) => MesFirmware {
                    card,
                    mes: Some(v),
                    from: path,
                },
                None => MesFirmware {
                    card,
                    mes: None,
                    from: "not readable (needs root/debugfs)".to_string(),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_names_from_target_versions() {
        assert_eq!(gfx_name(110000), "gfx1100");
        assert_eq!(gfx_name(110501), "gfx1151");
        assert_eq!(gfx_name(100300), "gfx1030");
        assert_eq!(gfx_name(100100), "gfx1010");
        // Minor 10 is the hex digit a, not "10".
        assert_eq!(gfx_name(101000), "gfx10a0");
        assert_eq!(gfx_name(120001), "gfx1201");
        assert_eq!(gfx_name(90010), "gfx90a");
        assert_eq!(gfx_name(90012), "gfx90c");
    }

    #[test]
    fn pci_slots_give_kfd_locations() {
        assert_eq!(pci_location("0000:03:00.0"), Some((0, 0x300)));
        assert_eq!(pci_location("0001:c5:00.1"), Some((1, 0xc501)));
        assert_eq!(pci_location("0000:00:02.3"), Some((0, 0x13)));
        assert_eq!(pci_location("nonsense"), None);
    }

    #[test]
    fn mes_line_not_kiq_line() {
        let info = "MES_KIQ feature version: 6, firmware version: 0x0000006f\n\
                    MES feature version: 1, firmware version: 0x00000083\n";
        assert_eq!(mes_from_firmware_info(info), Some(0x83));
        assert_eq!(mes_from_firmware_info("VCN feature version: 0"), None);
    }

    #[test]
    fn apus_by_target_or_memory_shape() {
        let mut g = Gpu {
            gfx: Some("gfx1151".into()),
            ..Gpu::default()
        };
        assert!(is_apu(&g));
        g.gfx = Some("gfx1100".into());
        g.vram_total_bytes = Some(24 * GIB);
        g.gtt_total_bytes = Some(32 * GIB);
        assert!(!is_apu(&g));
        g.gfx = Some("gfx9999".into());
        g.vram_total_bytes = Some(GIB / 2);
        assert!(is_apu(&g));
    }
}
