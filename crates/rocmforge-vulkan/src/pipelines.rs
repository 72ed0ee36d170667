//! Shader modules and compute pipelines: one pipeline layout (push
//! constants only, no descriptor sets), one pipeline cache, and a pipeline
//! per kernel variant, created the first time a graph needs it (at load or
//! prepare, never per token).

use std::collections::HashMap;

use ash::vk;
use rocmforge_core::backend::BackendError;
use rocmforge_core::quant::QuantType;

use crate::error::Check;

mod compiled {
    include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
}

/// Bytes of push constants every kernel may use (Vulkan's guaranteed minimum).
pub const PUSH_BYTES: u32 = 128;

/// The `quant/` file name of a weight type, if a dequantizer for it was
/// compiled into this build.
pub fn weight_suffix(ty: QuantType) -> Option<&'static str> {
    let name = match ty {
        QuantType::F32 => "f32",
        QuantType::F16 => "f16",
        QuantType::BF16 => "bf16",
        QuantType::Q4_0 => "q4_0",
        QuantType::Q4_1 => "q4_1",
        QuantType::Q5_0 => "q5_0",
        QuantType::Q5_1 => "q5_1",
        QuantType::Q8_0 => "q8_0",
        QuantType::Q2K => "q2_k",
        QuantType::Q3K => "q3_k",
        QuantType::Q4K => "q4_k",
        QuantType::Q5K => "q5_k",
        QuantType::Q6K => "q6_k",
        QuantType::IQ4NL => "iq4_nl",
        QuantType::IQ4XS => "iq4_xs",
        _ => return None,
    };
    compiled::WEIGHT_TYPES.iter().copied().find(|&n| n == name)
}

/// Whether weights of this type have the integer decode mat-vec
/// (`matvec_int_*` kernels).
pub fn has_int_form(ty: QuantType) -> bool {
    weight_suffix(ty).is_some_and(|n| compiled::INT_WEIGHT_TYPES.contains(&n))
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
            size: PUSH_BYTES,
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
