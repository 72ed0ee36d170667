//! Shader modules and compute pipelines: one pipeline layout (push
//! constants only, no descriptor sets), one pipeline cache, and a pipeline
//! per kernel variant, created the first time a graph needs it (at load or
//! prepare, never per token).

use std::collections::HashMap;

use ash::vk;
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::push::PUSH_BYTES;

use crate::device::Subgroup;
use crate::error::Check;

// The weight-type tables are read by the tests only: the lowering in core
// decides which kernels a graph needs, and a missing one is an error naming
// it at `prepare`.
#[cfg_attr(not(test), allow(dead_code))]
mod compiled {
    include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
}

fn spirv(name: &str) -> Option<Vec<u32>> {
    let bytes = compiled::SHADERS.iter().find(|(n, _)| *n == name)?.1;
    ash::util::read_spv(&mut std::io::Cursor::new(bytes)).ok()
}

/// The workgroup size a compute module declares with
/// `OpExecutionMode LocalSize` (every kernel here: `local_size_x` is a
/// literal or a build define), or None where it has none (e.g.
/// `LocalSizeId`, set by specialization constants).
fn local_size(words: &[u32]) -> Option<[u32; 3]> {
    const MAGIC: u32 = 0x0723_0203;
    const OP_EXECUTION_MODE: u32 = 16;
    const OP_FUNCTION: u32 = 54;
    const LOCAL_SIZE: u32 = 17;
    if words.first() != Some(&MAGIC) {
        return None;
    }
    // The header is 5 words; each instruction starts with its word count
    // (high half) and opcode (low half). Execution modes come before any
    // function.
    let mut at = 5;
    while let Some(&head) = words.get(at) {
        let (count, op) = ((head >> 16) as usize, head & 0xffff);
        if count == 0 || op == OP_FUNCTION {
            return None;
        }
        let inst = words.get(at..at + count)?;
        if op == OP_EXECUTION_MODE && count >= 6 && inst[2] == LOCAL_SIZE {
            return Some([inst[3], inst[4], inst[5]]);
        }
        at += count;
    }
    None
}

/// Invocations in the largest workgroup of any kernel of this build (a
/// required subgroup size must fit it in `maxComputeWorkgroupSubgroups`
/// subgroups).
pub fn largest_workgroup() -> u32 {
    static LARGEST: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *LARGEST.get_or_init(|| {
        compiled::SHADERS
            .iter()
            .filter_map(|(_, bytes)| {
                let words: Vec<u32> = bytes
                    .chunks_exact(4)
                    .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                    .collect();
                local_size(&words)
            })
            .map(|[x, y, z]| x.saturating_mul(y).saturating_mul(z))
            .max()
            .unwrap_or(1)
    })
}

pub struct Pipelines {
    pub layout: vk::PipelineLayout,
    /// The device runs the matrix-core prefill matmul (`matmul_cm*`
    /// kernels; see `DeviceProps::coopmat`).
    pub coopmat: bool,
    /// The device takes `dotPacked4x8EXT` (see `DeviceProps::int_dot`).
    pub int_dot: bool,
    /// The subgroup size every pipeline is created with (see
    /// `DeviceProps::subgroup`).
    pub subgroup: Subgroup,
    /// Print each kernel variant's name as its pipeline is created
    /// (`ROCMFORGE_VULKAN_LOG_PIPELINES=1`): which kernels a model runs.
    log: bool,
    cache: vk::PipelineCache,
    map: HashMap<String, (vk::ShaderModule, vk::Pipeline)>,
}

impl Pipelines {
    pub fn new(device: &ash::Device) -> Result<Pipelines, BackendError> {
        let ranges = [vk::PushConstantRange {
            stage_flags: vk::ShaderStageFlags::COMPUTE,
            offset: 0,
            size: PUSH_BYTES as u32,
        }];
        let ci = vk::PipelineLayoutCreateInfo::default().push_constant_ranges(&ranges);
        // SAFETY: valid device and create info.
        let layout =
            unsafe { device.create_pipeline_layout(&ci, None) }.check("vkCreatePipelineLayout")?;
        // SAFETY: empty initial cache.
        let cache = match unsafe {
            device.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
        } {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: the layout is unused.
                unsafe { device.destroy_pipeline_layout(layout, None) };
                return Err(crate::error::VkError {
                    call: "vkCreatePipelineCache",
                    result: e,
                    bytes: 0,
                }
                .into());
            }
        };
        Ok(Pipelines {
            layout,
            coopmat: false,
            int_dot: false,
            subgroup: Subgroup::default(),
            log: std::env::var("ROCMFORGE_VULKAN_LOG_PIPELINES").is_ok_and(|v| v != "0"),
            cache,
            map: HashMap::new(),
        })
    }

    /// The pipeline of kernel variant `name` (see build.rs), created on
    /// first use.
    pub fn get(&mut self, device: &ash::Device, name: &str) -> Result<vk::Pipeline, BackendError> {
        if let Some(&(_, p)) = self.map.get(name) {
            return Ok(p);
        }
        let code = spirv(name)
            .ok_or_else(|| BackendError::missing_kernel(name, "not in this build's shaders"))?;
        let ci = vk::ShaderModuleCreateInfo::default().code(&code);
        // SAFETY: `code` is SPIR-V produced by glslang at build time.
        let module =
            unsafe { device.create_shader_module(&ci, None) }.check("vkCreateShaderModule")?;
        let mut stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        // The size the kernels were tested with, where the device lets a
        // pipeline choose; full subgroups where the workgroup's x size is a
        // multiple of it (else the last subgroup may be partial).
        let mut required = vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo::default()
            .required_subgroup_size(self.subgroup.size);
        if self.subgroup.pinned {
            stage = stage.push_next(&mut required);
            let x = local_size(&code).map_or(0, |[x, _, _]| x);
            if self.subgroup.full && x > 0 && x.is_multiple_of(self.subgroup.size) {
                stage = stage.flags(vk::PipelineShaderStageCreateFlags::REQUIRE_FULL_SUBGROUPS);
            }
        }
        let ci = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(self.layout);
        // SAFETY: module and layout are valid; the shader's push-constant
        // block fits the layout's range; a required subgroup size is one the
        // device allows for compute, fits the largest workgroup (checked in
        // `device::choose_subgroup`), and its feature and extension were
        // enabled at device creation.
        match unsafe { device.create_compute_pipelines(self.cache, &[ci], None) } {
            Ok(p) => {
                if self.log {
                    eprintln!("vulkan: pipeline {name}");
                }
                self.map.insert(name.to_string(), (module, p[0]));
                Ok(p[0])
            }
            Err((_, e)) => {
                // SAFETY: the module is not used by any pipeline.
                unsafe { device.destroy_shader_module(module, None) };
                Err(crate::error::VkError {
                    call: "vkCreateComputePipelines",
                    result: e,
                    bytes: 0,
                }
                .into())
            }
        }
    }

    /// # Safety
    /// No command buffer using these pipelines is pending.
    pub unsafe fn destroy(&mut self, device: &ash::Device) {
        // SAFETY: per the contract above.
        unsafe {
            for (_, (m, p)) in self.map.drain() {
                device.destroy_pipeline(p, None);
                device.destroy_shader_module(m, None);
            }
            device.destroy_pipeline_cache(self.cache, None);
            device.destroy_pipeline_layout(self.layout, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::compiled;
    use rocmforge_core::gpu::{expert_int_workgroup, has_int_form, weight_suffix, workgroup_size};
    use rocmforge_core::quant::QuantType;

    /// The lowering sizes grids by `gpu::workgroup_size`: each shader's
    /// declared size (from build.rs's defines) must be the one it names.
    #[test]
    fn workgroup_sizes_are_the_lowerings() {
        let mut checked = 0;
        for (name, _) in compiled::SHADERS {
            let code = super::spirv(name).unwrap();
            let [x, y, z] = super::local_size(&code).unwrap_or_else(|| panic!("{name}"));
            let Some(mut expected) = workgroup_size(name) else {
                panic!("{name}: core's gpu::workgroup_size does not know this kernel");
            };
            if name.starts_with("matvec_id_int") {
                expected = expert_int_workgroup(crate::backend::EXPERT_INT_ROWS);
            }
            assert_eq!(x * y * z, expected, "{name}: local size {x}x{y}x{z}");
            checked += 1;
        }
        assert!(checked > 100, "only {checked} shaders");
    }

    /// Every kernel declares a literal workgroup size, so each can be
    /// checked against a pinned subgroup size.
    #[test]
    fn every_kernel_declares_its_workgroup_size() {
        for (name, _) in compiled::SHADERS {
            let code = super::spirv(name).unwrap();
            let [x, y, z] = super::local_size(&code).unwrap_or_else(|| panic!("{name}"));
            assert!(x >= 1 && y >= 1 && z >= 1, "{name}");
        }
        let largest = super::largest_workgroup();
        assert!((64..=1024).contains(&largest), "{largest}");
    }

    /// The shaders cover every weight type core's lowering names kernels
    /// for, with integer forms exactly where core expects them.
    #[test]
    fn compiled_kernels_match_the_lowering() {
        for ty in QuantType::supported() {
            let Some(suffix) = weight_suffix(ty) else {
                continue;
            };
            assert!(compiled::WEIGHT_TYPES.contains(&suffix), "{suffix}");
            assert_eq!(
                compiled::INT_WEIGHT_TYPES.contains(&suffix),
                has_int_form(ty),
                "{suffix}"
            );
        }
    }
}
