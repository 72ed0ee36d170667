//! `rocmforge doctor`: what the GPU stack on this machine looks like, and
//! which known problems of AMD's stack apply to it.
//!
//! # Files only
//! Everything is read from files (sysfs, procfs, `/dev` metadata, ROCm's
//! version file, Vulkan ICD manifests) and from the environment; nothing is
//! opened through a GPU driver. The cases doctor exists for are the ones
//! where the driver misbehaves: a HIP or Vulkan call into a hung GPU blocks
//! in the kernel and cannot be cancelled, so a diagnosis that made one could
//! hang exactly when it is needed. Even the device-node check asks the
//! kernel for permission (`faccessat`) instead of opening the node, because
//! opening `/dev/kfd` or a render node runs driver code (it creates a GPU
//! process context and wakes the GPU).
//!
//! # Fake roots
//! Every path is read through a [`SysRoot`], a directory standing for `/`,
//! and the environment and the build's code-object list are passed in. Tests
//! build a root in a temporary directory that looks like a machine with an
//! RX 7900 XTX or a Strix Halo, so each known issue is checked against the
//! machines it is about, on a machine with no GPU at all.
//!
//! The modules: [`system`] gathers what is there ([`gpu`] the GPUs,
//! [`stack`] the ROCm and Vulkan installations and device nodes),
//! [`known_issues`] is the table and [`conditions`] its tests of a system,
//! [`report`] renders the result.

pub mod conditions;
pub mod gpu;
pub mod known_issues;
pub mod report;
pub mod stack;
pub mod system;

use std::path::PathBuf;

use serde::Serialize;

pub use known_issues::{Finding, Severity};
pub use system::{Environment, SysRoot, System};

/// Why doctor could not look at all (anything it merely cannot read is
/// reported as such instead).
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error("cannot read the system root {}: {source}", path.display())]
    UnreadableRoot {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What was found and what it means.
#[derive(Debug, Serialize)]
pub struct Diagnosis {
    #[serde(flatten)]
    pub system: System,
    pub findings: Vec<Finding>,
}

/// Reads the system under `root` and matches it against the known issues.
/// `built_targets` are the gfx targets this binary has code objects for.
pub fn diagnose(root: &SysRoot, env: &Environment, built_targets: &[String]) -> Diagnosis {
    let system = System::gather(root, env, built_targets);
    let findings = known_issues::check(&system);
    Diagnosis { system, findings }
}
