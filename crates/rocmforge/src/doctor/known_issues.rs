//! The table of known problems of AMD's GPU stack, matched against a
//! [`System`]. Each row has a stable id (scripts and bug reports quote it),
//! a severity, the condition in words, and a source; its check words the
//! message and advice for the machine at hand. `docs/doctor.md` repeats the
//! table.

use std::fmt;

use serde::Serialize;

use super::conditions::{
    apu_iommu_translated, gfx_override, kfd_missing, kfd_permissions, mes_0x83, no_amd_gpu,
    no_code_object, rdna1, rdna3_cwsr, render_node_unusable, rocm_7_0, rocm_not_found,
    rocm_too_old, strix_sdma, visible_devices, vulkan_no_amd_driver, Hit,
};
use super::system::System;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Error => "error",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub severity: Severity,
    pub message: String,
    pub advice: String,
    pub source: &'static str,
}

pub struct KnownIssue {
    pub id: &'static str,
    pub severity: Severity,
    /// When it applies, in words.
    pub condition: &'static str,
    pub source: &'static str,
    check: fn(&System) -> Vec<Hit>,
}

pub static KNOWN_ISSUES: &[KnownIssue] = &[
    KnownIssue {
        id: "mes-firmware-0x83",
        severity: Severity::Error,
        condition: "an RDNA3/3.5 GPU runs MES firmware 0x83",
        source: "ROCm issue #5724 (https://github.com/ROCm/legacy-rocm-build/issues/5724): \
                 MES 0x83 was reverted to 0x80 in linux-firmware",
        check: mes_0x83,
    },
    KnownIssue {
        id: "render-node-unusable",
        severity: Severity::Error,
        condition: "an AMD GPU's /dev/dri/renderD* node is missing or not openable read-write",
        source: "ROCm install prerequisites, GPU access permissions (https://rocm.docs.amd.com/\
                 projects/install-on-linux/en/latest/install/prerequisites.html)",
        check: render_node_unusable,
    },
    KnownIssue {
        id: "rdna3-cwsr-hang",
        severity: Severity::Warning,
        condition: "an RDNA3/3.5 GPU (gfx11xx), amdgpu.cwsr_enable not 0, kernel before 6.18",
        source:
            "ROCm issues #5590 and #5724 (https://github.com/ROCm/legacy-rocm-build/issues/5590, \
                 .../5724); AMD advises cwsr_enable=0 until kernel 6.18",
        check: rdna3_cwsr,
    },
    KnownIssue {
        id: "strix-sdma-stall",
        severity: Severity::Warning,
        condition: "a gfx1150/gfx1151 GPU and HSA_ENABLE_SDMA not 0",
        source: "community workaround for gfx1151 copy stalls (also in rocmforge-hip's timeout \
                 message); no AMD bug reference",
        check: strix_sdma,
    },
    KnownIssue {
        id: "rdna1-unsupported",
        severity: Severity::Warning,
        condition: "an RDNA1 GPU (gfx1010/gfx1011/gfx1012)",
        source: "ROCm system requirements list no RDNA1 GPU; reports such as \
                 https://github.com/ggml-org/llama.cpp/pull/1087",
        check: rdna1,
    },
    KnownIssue {
        id: "no-code-object",
        severity: Severity::Warning,
        condition: "a GPU's gfx target has no HIP code object in this binary",
        source:
            "rocmforge-hip code_objects (kernels are embedded at build time, never JIT-compiled)",
        check: no_code_object,
    },
    KnownIssue {
        id: "hsa-override-gfx-version",
        severity: Severity::Warning,
        condition: "HSA_OVERRIDE_GFX_VERSION set while a GPU's own target has a code object",
        source: "rocmforge-hip code_objects: code objects are chosen by the gfx name the runtime \
                 reports, which the override changes",
        check: gfx_override,
    },
    KnownIssue {
        id: "visible-devices-hide-all",
        severity: Severity::Warning,
        condition:
            "ROCR_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES (CUDA_VISIBLE_DEVICES) leaves no GPU",
        source: "HIP environment variables, GPU isolation (https://rocm.docs.amd.com/projects/HIP/\
                 en/latest/reference/env_variables.html)",
        check: visible_devices,
    },
    KnownIssue {
        id: "kfd-missing",
        severity: Severity::Warning,
        condition: "an AMD GPU and no /dev/kfd",
        source: "ROCm needs the KFD device (amdgpu built with CONFIG_HSA_AMD)",
        check: kfd_missing,
    },
    KnownIssue {
        id: "kfd-permissions",
        severity: Severity::Warning,
        condition: "/dev/kfd not openable read-write by this user",
        source: "ROCm install prerequisites, GPU access permissions (https://rocm.docs.amd.com/\
                 projects/install-on-linux/en/latest/install/prerequisites.html)",
        check: kfd_permissions,
    },
    KnownIssue {
        id: "vulkan-no-amd-driver",
        severity: Severity::Warning,
        condition: "an AMD GPU and no RADV/AMDVLK/AMD proprietary ICD manifest",
        source: "Vulkan loader ICD discovery (https://github.com/KhronosGroup/Vulkan-Loader/blob/\
                 main/docs/LoaderDriverInterface.md)",
        check: vulkan_no_amd_driver,
    },
    KnownIssue {
        id: "rocm-7.0-regressions",
        severity: Severity::Info,
        condition: "ROCm 7.0.x installed",
        source: "reports: https://github.com/ggml-org/llama.cpp/issues/17917, \
                 https://github.com/ROCm/rocm-systems/issues/2865",
        check: rocm_7_0,
    },
    KnownIssue {
        id: "rocm-too-old",
        severity: Severity::Warning,
        condition: "only a ROCm 5 or older HIP runtime installed (version file < 6, or only libamdhip64.so.5)",
        source: "rocmforge-hip binds the ROCm 6/7 ABI (hipDeviceProp_tR0600) and looks for \
                 libamdhip64.so, .so.6 and .so.7 only",
        check: rocm_too_old,
    },
    KnownIssue {
        id: "rocm-not-found",
        severity: Severity::Info,
        condition: "an AMD GPU and no ROCm version file or libamdhip64",
        source:
            "rocmforge-hip looks for libamdhip64 in $ROCM_PATH/lib, the loader path, /opt/rocm/lib",
        check: rocm_not_found,
    },
    KnownIssue {
        id: "apu-iommu-translated",
        severity: Severity::Info,
        condition: "an APU whose IOMMU group translates DMA (DMA, DMA-FQ)",
        source: "common advice (iommu=pt); Linux kernel-parameters documentation",
        check: apu_iommu_translated,
    },
    KnownIssue {
        id: "no-amd-gpu",
        severity: Severity::Info,
        condition: "no DRM card with PCI vendor 0x1002 and no KFD GPU node",
        source: "sysfs: /sys/class/drm/card*/device/vendor, /sys/class/kfd/kfd/topology/nodes",
        check: no_amd_gpu,
    },
];

/// Every finding for `system`, errors first.
pub fn check(system: &System) -> Vec<Finding> {
    let mut findings: Vec<Finding> = KNOWN_ISSUES
        .iter()
        .flat_map(|issue| {
            (issue.check)(system).into_iter().map(|h| Finding {
                id: issue.id,
                severity: issue.severity,
                message: h.message,
                advice: h.advice,
                source: issue.source,
            })
        })
        .collect();
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<&str> = KNOWN_ISSUES.iter().map(|i| i.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), KNOWN_ISSUES.len());
    }
}
