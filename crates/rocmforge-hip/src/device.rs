//! Which GPU, what it is, and the kernels for it.
//!
//! The runtime is the one `ROCMFORGE_HIP_RUNTIME` picks (HIP, or the CUDA
//! driver standing in for it on the NVIDIA verification GPU). The device is
//! `--device N` or the first. Its kernels are the embedded code object for
//! its `gcnArchName` or, in CUDA-driver mode, the PTX for its `sm_NN`: a
//! device without kernels is one clear error here, naming its target and
//! the targets built, never "invalid device function" at the first launch.

use hip_sys::{DeviceProps, Flavor, Runtime};
use rocmforge_core::backend::BackendError;

use crate::code_objects;
use crate::error::Hip;

/// The chosen device.
pub(crate) struct Device {
    /// Ordinal in the runtime's list.
    pub index: u32,
    pub flavor: Flavor,
    pub props: DeviceProps,
    /// The kernels for it: an AMDGPU code object, or NUL-terminated PTX.
    pub image: &'static [u8],
    /// The target `image` was built for (`gfx1100`, `sm_90`).
    pub target: String,
    /// One line for `BackendInfo::device`: the device and, plainly, the mode.
    pub summary: String,
}

impl Device {
    /// Picks device `index` (or the first) of `rt` and finds its kernels.
    pub fn open(rt: &Runtime, index: Option<usize>) -> Result<Device, BackendError> {
        let flavor = rt.flavor();
        let count = rt.device_count().map_err(Hip)?;
        if count == 0 {
            return Err(BackendError::unavailable(format!(
                "{flavor} from {}: no device",
                rt.library_path()
            )));
        }
        let index = match index {
            None => 0,
            Some(i) if i < count as usize => i as u32,
            Some(i) => {
                return Err(BackendError::bad_option(
                    "--device",
                    i,
                    format!(
                        "{flavor} from {} has {count} device(s), numbered from 0",
                        rt.library_path()
                    ),
                ))
            }
        };
        let props = rt.device_properties(index).map_err(Hip)?;
        let found = match flavor {
            Flavor::Hip => code_objects::for_arch(&props.arch),
            Flavor::CudaDriver => code_objects::ptx_for(&props.arch),
        };
        let image = found.map_err(|e| {
            BackendError::unavailable_from(&format!("{} ({})", props.name, props.arch), e)
        })?;
        let target = match flavor {
            Flavor::Hip => code_objects::base_arch(&props.arch).to_string(),
            // ptx_for picks the newest PTX not newer than the device.
            Flavor::CudaDriver => code_objects::ptx_modules()
                .iter()
                .find(|(_, bytes)| std::ptr::eq(*bytes, image))
                .map_or_else(|| props.arch.clone(), |(t, _)| t.to_string()),
        };
        let summary = summary(rt, &props, &target);
        Ok(Device {
            index,
            flavor,
            props,
            image,
            target,
            summary,
        })
    }
}

/// "AMD Radeon RX 7900 XTX (gfx1100, HIP 6.4.43482) | 48 CUs | 24.0 GiB", or
/// "NVIDIA H100 80GB HBM3 (hip via CUDA driver: verifies logic, not AMD
/// speed) | sm_90 | 132 SMs | 79.1 GiB | driver 12.8 | PTX sm_90".
fn summary(rt: &Runtime, p: &DeviceProps, target: &str) -> String {
    let gib = p.total_mem as f64 / (1u64 << 30) as f64;
    match rt.flavor() {
        Flavor::Hip => {
            let version = rt
                .runtime_version()
                .map_or_else(|_| "version unknown".to_string(), |v| v.to_string());
            let apu = if p.integrated { " | APU" } else { "" };
            format!(
                "{} ({}, HIP {version}) | {} CUs | {gib:.1} GiB{apu} | warp {}",
                p.name, p.arch, p.compute_units, p.warp_size
            )
        }
        Flavor::CudaDriver => {
            let driver = rt
                .driver_version()
                .map_or_else(|_| "unknown".to_string(), |v| v.to_string());
            format!(
                "{} (hip via CUDA driver: verifies logic, not AMD speed) | {} | {} SMs | \
                 {gib:.1} GiB | driver {driver} | PTX {target}",
                p.name, p.arch, p.compute_units
            )
        }
    }
}
