//! Shader modules and compute pipelines: one pipeline layout (push
//! constants only, no descriptor sets), one pipeline cache, and a pipeline
//! per kernel variant, created the first time a graph needs it (at load or
//! prepare, never per token).

use std::collections::HashMap;

use ash::vk;
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::push::PUSH_BYTES;

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

pub struct Pipelines {
    pub layout: vk::PipelineLayout,
    /// The device runs the matrix-core prefill matmul (`matmul_cm*`
    /// kernels; see `DeviceProps::coopmat`).
    pub coopmat: bool,
    /// The device takes `dotPacked4x8EXT` (see `DeviceProps::int_dot`).
    pub int_dot: bool,
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
            .ok_or_else(|| BackendError::Device(format!("kernel '{name}' is not in this build")))?;
        let ci = vk::ShaderModuleCreateInfo::default().code(&code);
        // SAFETY: `code` is SPIR-V produced by glslang at build time.
        let module =
            unsafe { device.create_shader_module(&ci, None) }.check("vkCreateShaderModule")?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        let ci = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(self.layout);
        // SAFETY: module and layout are valid; the shader's push-constant
        // block fits the layout's range.
        match unsafe { device.create_compute_pipelines(self.cache, &[ci], None) } {
            Ok(p) => {
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
    use rocmforge_core::gpu::{has_int_form, weight_suffix};
    use rocmforge_core::quant::QuantType;

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
