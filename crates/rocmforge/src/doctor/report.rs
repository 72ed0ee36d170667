//! Rendering a [`Diagnosis`]: a short text section per area, then the
//! findings; or the same content as one JSON object.

use std::fmt::Write as _;

use super::gpu::Gpu;
use super::stack::DeviceNode;
use super::system::IommuMode;
use super::Diagnosis;

const GIB: f64 = (1u64 << 30) as f64;

/// The diagnosis as one pretty-printed JSON object (keys: see
/// `docs/doctor.md`).
pub fn json(d: &Diagnosis) -> String {
    let mut s =
        serde_json::to_string_pretty(d).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

fn or_unknown(v: Option<&str>) -> &str {
    v.unwrap_or("unknown")
}

fn gib(bytes: Option<u64>) -> String {
    bytes.map_or("unknown".to_string(), |b| {
        format!("{:.1} GiB", b as f64 / GIB)
    })
}

fn gpu_line(g: &Gpu) -> String {
    let mut parts = vec![format!(
        "{} {} {}",
        g.card.as_deref().unwrap_or("(no DRM card)"),
        or_unknown(g.pci_slot.as_deref()),
        g.gfx.as_deref().unwrap_or("gfx unknown (no KFD node)"),
    )];
    if let Some(id) = &g.device_id {
        parts[0].push_str(&format!(" device {id}"));
    }
    if g.apu {
        parts[0].push_str(" APU");
    }
    parts.push(format!("VRAM {}", gib(g.vram_total_bytes)));
    parts.push(format!("GTT {}", gib(g.gtt_total_bytes)));
    parts.extend(g.kfd_node.as_ref().map(|n| format!("KFD node {n}")));
    parts.extend(g.render_node.clone());
    parts.extend(
        g.iommu_group_type
            .as_ref()
            .map(|t| format!("IOMMU group {t}")),
    );
    parts.join(", ")
}

fn node_line(n: &DeviceNode) -> String {
    let access = match (n.present, n.read_write) {
        (false, _) => "missing",
        (true, Some(true)) => "present, read-write ok",
        (true, _) => "present, NOT openable read-write by this user",
    };
    format!("{}: {access}", n.path)
}

/// The diagnosis as text for a terminal.
pub fn text(d: &Diagnosis) -> String {
    let mut o = String::new();
    // Writing to a String cannot fail.
    let _ = write_text(d, &mut o);
    o
}

fn write_text(d: &Diagnosis, w: &mut String) -> std::fmt::Result {
    let s = &d.system;
    writeln!(
        w,
        "rocmforge doctor: read from {} (files and environment only; no GPU driver calls)",
        s.sysroot
    )?;

    writeln!(w, "\nGPUs")?;
    if s.gpus.is_empty() {
        let drm = match (s.drm_present, s.other_gpus.len()) {
            (false, _) => "missing".to_string(),
            (true, 0) => "no cards".to_string(),
            (true, n) => format!("{n} card(s), none AMD"),
        };
        let kfd = if s.kfd_topology_present {
            "no GPU nodes"
        } else {
            "missing"
        };
        writeln!(
            w,
            "  no AMD GPU: /sys/class/drm (PCI vendor 0x1002 wanted): {drm}; \
             /sys/class/kfd/kfd/topology: {kfd}"
        )?;
    }
    for g in &s.gpus {
        writeln!(w, "  {}", gpu_line(g))?;
    }
    for g in &s.other_gpus {
        writeln!(w, "  {} vendor {} (not AMD)", g.card, g.vendor)?;
    }
    writeln!(w, "  {}", node_line(&s.device_nodes.kfd))?;
    if s.device_nodes.render.is_empty() {
        writeln!(w, "  /dev/dri/renderD*: none")?;
    }
    for n in &s.device_nodes.render {
        writeln!(w, "  {}", node_line(n))?;
    }

    let r = &s.rocm;
    writeln!(w, "\nROCm")?;
    let from = if r.path_from_env {
        "ROCM_PATH"
    } else {
        "default"
    };
    writeln!(
        w,
        "  {} ({from}): version {}",
        r.path,
        r.version
            .as_deref()
            .unwrap_or("not found (no .info/version)")
    )?;
    if !r.installs.is_empty() {
        writeln!(w, "  installs: {}", r.installs.join(", "))?;
    }
    let libs = if r.hip_runtime_libraries.is_empty() {
        "none found".to_string()
    } else {
        r.hip_runtime_libraries.join(", ")
    };
    writeln!(w, "  HIP runtime: {libs}")?;

    writeln!(w, "\nVulkan drivers")?;
    if s.vulkan_drivers.is_empty() {
        writeln!(
            w,
            "  none (no ICD manifests in /etc/vulkan/icd.d, /usr/share/vulkan/icd.d)"
        )?;
    }
    for v in &s.vulkan_drivers {
        writeln!(
            w,
            "  {}: {} (api {}, {})",
            v.kind.describe(),
            v.manifest,
            or_unknown(v.api_version.as_deref()),
            or_unknown(v.library_path.as_deref())
        )?;
    }

    writeln!(w, "\nKernel & firmware")?;
    writeln!(w, "  kernel: {}", or_unknown(s.kernel.release.as_deref()))?;
    if s.firmware.is_empty() {
        writeln!(w, "  MES firmware: no AMD GPU")?;
    }
    for f in &s.firmware {
        match f.mes {
            Some(v) => writeln!(w, "  MES firmware {}: {v:#010x} ({})", f.card, f.from)?,
            None => writeln!(w, "  MES firmware {}: {}", f.card, f.from)?,
        }
    }

    let set = &s.settings;
    writeln!(w, "\nSettings")?;
    let param = set
        .cwsr
        .module_parameter
        .map_or("not readable (amdgpu not loaded)".to_string(), |v| {
            v.to_string()
        });
    let cmdline = set
        .cwsr
        .cmdline
        .map_or("not set".to_string(), |v| v.to_string());
    writeln!(
        w,
        "  CWSR: {} [module parameter: {param}; command line: {cmdline}]",
        set.cwsr.describe()
    )?;
    let mode = match set.iommu.mode {
        IommuMode::Off => "off",
        IommuMode::Passthrough => "passthrough",
        IommuMode::Translated => "translated (DMA)",
        IommuMode::Mixed => "mixed",
        IommuMode::Unknown => "unknown",
    };
    let options = if set.iommu.cmdline.is_empty() {
        "no iommu options on the command line".to_string()
    } else {
        set.iommu.cmdline.join(" ")
    };
    writeln!(w, "  IOMMU: {mode} ({options})")?;
    for (k, v) in &s.environment {
        writeln!(
            w,
            "  {k}: {}",
            v.as_deref()
                .map_or("unset".to_string(), |v| format!("{v:?}"))
        )?;
    }

    writeln!(w, "\nThis build")?;
    let built = &s.build.code_object_targets;
    let list = if built.is_empty() {
        "none".to_string()
    } else {
        built.join(", ")
    };
    writeln!(w, "  HIP code objects: {list}")?;
    for g in &s.gpus {
        let has = match g.code_object {
            Some(true) => "has a code object",
            Some(false) => "NO code object",
            None => "gfx target unknown",
        };
        writeln!(w, "  {}: {has}", g.label())?;
    }

    writeln!(w, "\nFindings:")?;
    if d.findings.is_empty() {
        writeln!(w, "  none: no known issue matches")?;
    }
    for f in &d.findings {
        writeln!(w, "  [{}] {} ({})", f.severity, f.message, f.id)?;
        writeln!(w, "      advice: {}", f.advice)?;
        writeln!(w, "      source: {}", f.source)?;
    }
    Ok(())
}
