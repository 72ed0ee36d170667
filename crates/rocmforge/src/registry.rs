//! The backends this build knows, by name.

use rocmforge_core::backend::{Backend, BackendError};
use rocmforge_core::expert_offload::ExpertOffload;
use rocmforge_core::model::Model;

use crate::fault::{FaultSpec, FaultyBackend};

/// Options every backend constructor accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendOptions {
    /// CPU threads (0 = one per core).
    pub threads: usize,
    /// Device index for GPU backends (`--device N`); None lets the backend
    /// choose (discrete GPUs first). Naming a software device selects it.
    pub device: Option<usize>,
    /// Let GPU backends pick software devices (lavapipe) on their own;
    /// otherwise only a `--device` index names one. Tests and CI set it.
    pub allow_software_devices: bool,
    /// Bound on every wait for the device (None: the backend's default,
    /// 60 s).
    pub gpu_timeout: Option<std::time::Duration>,
}

pub struct BackendEntry {
    /// The name users type (`--backend NAME`).
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub description: &'static str,
    /// Creates the backend, or says in one line why it can't run here.
    pub create: fn(&BackendOptions) -> Result<Box<dyn Backend>, BackendError>,
}

fn create_cpu(opts: &BackendOptions) -> Result<Box<dyn Backend>, BackendError> {
    // The host is one device. Silently ignoring `--device 5` would run on
    // the CPU while the user believes a GPU was chosen.
    if let Some(d) = opts.device.filter(|&d| d != 0) {
        return Err(BackendError::bad_option(
            "--device",
            d,
            "the cpu backend has one device (0); --device picks among the GPUs of the vulkan and rocm backends",
        ));
    }
    Ok(Box::new(rocmforge_cpu::CpuBackend::try_new(opts.threads)?))
}

/// A warning when `threads` is more than this machine's cores: it runs,
/// but the threads take turns on the cores and every step waits for the
/// slowest (llama.cpp's advice is the physical core count).
pub fn threads_warning(threads: usize) -> Option<String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Above the backend's maximum the count is refused anyway.
    (threads > cores && threads <= rocmforge_cpu::MAX_THREADS).then(|| {
        format!("warning: {threads} threads on {cores} cores oversubscribes them and is slower; 0 picks one per core")
    })
}

/// The switches every GPU backend shares, with `--gpu-timeout` over the
/// environment's.
fn gpu_options(opts: &BackendOptions) -> rocmforge_core::gpu::GpuOptions {
    let env = rocmforge_core::gpu::GpuOptions::from_env();
    rocmforge_core::gpu::GpuOptions {
        timeout: opts.gpu_timeout.unwrap_or(env.timeout),
        ..env
    }
}

fn create_vulkan(opts: &BackendOptions) -> Result<Box<dyn Backend>, BackendError> {
    let env = rocmforge_vulkan::VulkanOptions::from_env();
    let device = rocmforge_vulkan::VulkanOptions {
        device: opts.device,
        allow_cpu: opts.allow_software_devices || env.allow_cpu,
        ..env
    };
    Ok(Box::new(rocmforge_vulkan::open(device, gpu_options(opts))?))
}

fn create_rocm(opts: &BackendOptions) -> Result<Box<dyn Backend>, BackendError> {
    let device = rocmforge_hip::HipOptions {
        device: opts.device,
        ..rocmforge_hip::HipOptions::from_env()
    };
    Ok(Box::new(rocmforge_hip::open(device, gpu_options(opts))?))
}

const BACKENDS: &[BackendEntry] = &[
    BackendEntry {
        name: "cpu",
        aliases: &[],
        description: "reference CPU backend (AVX2/portable)",
        create: create_cpu,
    },
    BackendEntry {
        name: "vulkan",
        aliases: &["vk"],
        description: "Vulkan compute (buffer device addresses, recorded command buffers)",
        create: create_vulkan,
    },
    BackendEntry {
        name: "rocm",
        aliases: &["hip"],
        description: "HIP on AMD GPUs (ROCm 6/7; recorded launches replayed as hipGraphs); \
                      ROCMFORGE_HIP_RUNTIME=cuda runs it on the CUDA driver, to verify logic only",
        create: create_rocm,
    },
];

/// Every backend compiled into this build, available here or not.
pub fn backends() -> &'static [BackendEntry] {
    BACKENDS
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("unknown backend '{name}' (known: {known})")]
    Unknown { name: String, known: String },
    #[error("backend '{name}' cannot run here: {}", unavailable_reason(source))]
    Unavailable {
        name: &'static str,
        source: BackendError,
    },
}

/// A backend's reason for not running, without the variant's own "backend
/// not available" prefix, which the registry's message already says.
pub fn unavailable_reason(e: &BackendError) -> String {
    match e {
        BackendError::Unavailable { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// `--n-cpu-moe N`, llama.cpp's flag: `device` with the expert weights of
/// the first `n` layers of `model` left in host memory and computed by the
/// cpu backend (see `rocmforge_core::expert_offload`). `n` = 0, or the cpu
/// backend itself (whose weights are all in host memory already), leaves
/// `device` as it is.
pub fn with_cpu_experts(
    device: Box<dyn Backend>,
    model: &Model,
    n: usize,
    opts: &BackendOptions,
) -> Result<Box<dyn Backend>, BackendError> {
    if n == 0 || device.info().name == "cpu" {
        return Ok(device);
    }
    let host = create_cpu(&BackendOptions {
        device: None,
        ..*opts
    })?;
    Ok(Box::new(ExpertOffload::new(device, host, model, n)?))
}

pub fn find(name: &str) -> Option<&'static BackendEntry> {
    let name = name.to_ascii_lowercase();
    BACKENDS
        .iter()
        .find(|b| b.name == name || b.aliases.contains(&name.as_str()))
}

/// Creates a backend by name.
pub fn create(name: &str, opts: &BackendOptions) -> Result<Box<dyn Backend>, RegistryError> {
    let entry = find(name).ok_or_else(|| RegistryError::Unknown {
        name: name.to_string(),
        known: BACKENDS
            .iter()
            .map(|b| b.name)
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    let unavailable = |source| RegistryError::Unavailable {
        name: entry.name,
        source,
    };
    let backend = (entry.create)(opts).map_err(unavailable)?;
    Ok(
        match FaultSpec::from_env(entry.name).map_err(unavailable)? {
            Some(spec) => FaultyBackend::wrap(backend, spec),
            None => backend,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cpu_and_rejects_unknown() {
        assert!(create("cpu", &BackendOptions::default()).is_ok());
        let err = create("cuda-but-not-really", &BackendOptions::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("known: cpu"), "{err}");
    }

    #[test]
    fn rocm_is_registered_as_hip_too() {
        assert_eq!(find("hip").unwrap().name, "rocm");
        assert_eq!(find("ROCm").unwrap().name, "rocm");
        // Without a HIP or CUDA runtime (CI) it is one line saying why.
        if let Err(e) = create("rocm", &BackendOptions::default()) {
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }
}
