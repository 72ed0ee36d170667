//! Instance, physical-device choice, required features, and the one-line
//! device summary.
//!
//! The loader is opened at run time (`Entry::load`), so a machine without
//! Vulkan still builds and runs everything else: it gets
//! [`BackendError::Unavailable`] with one line saying why.

use std::ffi::CStr;

use ash::vk;
use rocmforge_core::backend::BackendError;

use crate::error::Check;

/// Which device to open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceChoice {
    /// An index into the driver's device list: that device, whatever its
    /// type (this is how a CPU implementation such as lavapipe is chosen).
    pub index: Option<usize>,
    /// Let automatic choice fall back to CPU implementations.
    pub allow_cpu: bool,
}

/// Which subgroup size compute pipelines are created with
/// (`VulkanOptions::subgroup_size`, env `ROCMFORGE_VULKAN_SUBGROUP_SIZE`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SubgroupSize {
    /// 32 where the device lets a pipeline require it (NVIDIA, AMD wave32,
    /// Intel): the size every kernel was tested with. Elsewhere the
    /// driver's default.
    #[default]
    Auto,
    /// The driver's default, nothing required (env value `0`).
    Driver,
    /// Exactly this size: opening the backend fails where the device cannot
    /// run pipelines with it.
    Pin(u32),
    /// An environment value that is not a number: opening the backend fails
    /// naming it.
    Invalid(String),
}

impl SubgroupSize {
    /// `ROCMFORGE_VULKAN_SUBGROUP_SIZE`'s value: `0` for the driver's
    /// default, else a size to pin.
    pub fn parse(v: &str) -> SubgroupSize {
        match v.trim().parse::<u32>() {
            Ok(0) => SubgroupSize::Driver,
            Ok(n) => SubgroupSize::Pin(n),
            Err(_) => SubgroupSize::Invalid(v.to_string()),
        }
    }
}

/// What the device offers for subgroup sizes
/// (`VK_EXT_subgroup_size_control`, core in Vulkan 1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubgroupCaps {
    /// The size pipelines get when none is required (`subgroupSize`).
    pub default: u32,
    pub min: u32,
    pub max: u32,
    /// The extension with `subgroupSizeControl` and compute in
    /// `requiredSubgroupSizeStages`: a pipeline may require any power of
    /// two in `min..=max`.
    pub control: bool,
    /// `computeFullSubgroups`.
    pub full: bool,
    /// `maxComputeWorkgroupSubgroups`: a required size must fit every
    /// workgroup in this many subgroups.
    pub max_workgroup_subgroups: u32,
}

/// The subgroup size compute pipelines are created with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Subgroup {
    /// The size every kernel runs with.
    pub size: u32,
    /// `VkPipelineShaderStageRequiredSubgroupSizeCreateInfo` with `size` is
    /// chained into every pipeline.
    pub pinned: bool,
    /// Pinned and `computeFullSubgroups`: kernels whose `local_size_x` is a
    /// multiple of `size` are created with `REQUIRE_FULL_SUBGROUPS`.
    pub full: bool,
}

/// The size to use on a device with `caps`, or why `want` cannot be had
/// there. `largest_workgroup`: invocations of the largest kernel
/// workgroup, which a required size must fit in
/// `maxComputeWorkgroupSubgroups` subgroups.
pub fn choose_subgroup(
    caps: &SubgroupCaps,
    want: &SubgroupSize,
    largest_workgroup: u32,
) -> Result<Subgroup, BackendError> {
    let driver = Subgroup {
        size: caps.default,
        pinned: false,
        full: false,
    };
    let in_range = |n: u32| n.is_power_of_two() && (caps.min..=caps.max).contains(&n);
    let fits = |n: u32| {
        u64::from(caps.max_workgroup_subgroups) * u64::from(n) >= u64::from(largest_workgroup)
    };
    let pinnable = |n: u32| caps.control && in_range(n) && fits(n);
    let pin = |n: u32| Subgroup {
        size: n,
        pinned: true,
        full: caps.full,
    };
    const VAR: &str = "ROCMFORGE_VULKAN_SUBGROUP_SIZE";
    let allowed = if caps.min == caps.max {
        format!("runs subgroups of {} only (use {0}", caps.min)
    } else {
        format!(
            "allows subgroups of {} to {} (use a power of two in that range",
            caps.min, caps.max
        )
    };
    let bad = |n: u32, reason: String| BackendError::bad_option(VAR, n, reason);
    match *want {
        SubgroupSize::Auto if pinnable(32) => Ok(pin(32)),
        SubgroupSize::Auto | SubgroupSize::Driver => Ok(driver),
        SubgroupSize::Pin(n) if pinnable(n) => Ok(pin(n)),
        // Nothing to require: the driver runs this size anyway (modules
        // are SPIR-V 1.5, created without ALLOW_VARYING_SUBGROUP_SIZE).
        SubgroupSize::Pin(n) if n == caps.default => Ok(driver),
        SubgroupSize::Pin(n) if !in_range(n) => Err(bad(
            n,
            format!("the device {allowed}, or 0 for the driver's default)"),
        )),
        SubgroupSize::Pin(n) if !caps.control => Err(bad(
            n,
            format!(
                "the device cannot require a subgroup size in compute shaders (no subgroupSizeControl); it runs {} (unset it, or 0)",
                caps.default
            ),
        )),
        SubgroupSize::Pin(n) => Err(bad(
            n,
            format!(
                "a workgroup of {largest_workgroup} invocations needs more than the device's {} subgroups of {n}",
                caps.max_workgroup_subgroups
            ),
        )),
        SubgroupSize::Invalid(ref v) => Err(BackendError::bad_option(
            VAR,
            format!("{v:?}"),
            "not a number (use a power of two the device runs, or 0 for the driver's default)",
        )),
    }
}

/// The device line's subgroup entry, e.g. `subgroup: 32 (pinned, device
/// allows 32-64)` or `subgroup: 8 (fixed)`.
fn subgroup_summary(caps: &SubgroupCaps, used: &Subgroup) -> String {
    let how = if caps.min == caps.max && used.size == caps.min {
        "fixed".to_string()
    } else if used.pinned {
        format!("pinned, device allows {}-{}", caps.min, caps.max)
    } else if caps.control {
        format!("driver default, device allows {}-{}", caps.min, caps.max)
    } else {
        "driver default, no size control".to_string()
    };
    format!("subgroup: {} ({how})", used.size)
}

/// What the kernels and the memory code need to know about the device.
#[derive(Clone, Debug)]
pub struct DeviceProps {
    pub name: String,
    pub device_type: vk::PhysicalDeviceType,
    /// Integrated GPU or CPU implementation with device-local host-visible
    /// memory: weights are written straight from the file mapping.
    pub uma: bool,
    pub fp16: bool,
    /// `VK_KHR_cooperative_matrix` with 16x16x16 f16 x f16 -> f32 subgroup
    /// matrices, pipelines running 32-wide subgroups (`subgroup.size`),
    /// f16 arithmetic and the Vulkan memory model: the prefill matmul runs
    /// on matrix cores (`matmul_coopmat.comp`). Off with
    /// `ROCMFORGE_VULKAN_COOPMAT=0`.
    pub coopmat: bool,
    /// The subgroup size pipelines are created with (matrix-core prefill
    /// needs 32).
    pub subgroup: Subgroup,
    /// `VK_KHR_shader_integer_dot_product` with its feature: the integer
    /// decode mat-vec uses `dotPacked4x8EXT` (`matvec_int_dot_*` kernels).
    /// Off with `ROCMFORGE_VULKAN_INT_DOT=0`.
    pub int_dot: bool,
    /// `VK_AMD_buffer_marker`: breadcrumbs are pipelined marker writes after
    /// every dispatch instead of a transfer every few dispatches. Off with
    /// `ROCMFORGE_VULKAN_MARKER=0`.
    pub buffer_marker: bool,
    /// Largest single allocation and buffer.
    pub max_region: u64,
    /// `VK_EXT_memory_budget`: the driver reports each heap's budget and
    /// this process's usage.
    pub memory_budget: bool,
    pub max_workgroups: [u32; 3],
    /// Compute units (CUs, SMs; a CPU implementation's threads), or a
    /// guess where the driver does not say: split decode attention fills
    /// them (rocmforge_core::gpu::split).
    pub compute_units: u32,
    /// One line in the style of llama.cpp's device report.
    pub summary: String,
    /// Nanoseconds per timestamp tick, where the compute queue writes
    /// timestamps (`timestampValidBits` > 0): the per-kernel profile
    /// (`crate::profile`) needs them.
    pub timestamp_ns: Option<f64>,
}

/// An open logical device and the objects it came from.
pub struct Gpu {
    // The loader and the process's instance (both live for the process).
    _entry: ash::Entry,
    _instance: ash::Instance,
    pub device: ash::Device,
    pub queue: vk::Queue,
    pub queue_family: u32,
    pub memory: vk::PhysicalDeviceMemoryProperties,
    /// Device-local bytes free when the device was opened: the
    /// `VK_EXT_memory_budget` budget less usage where the driver has it,
    /// else the largest device-local heap's size.
    pub free_at_open: u64,
    pub props: DeviceProps,
    /// `vkCmdWriteBufferMarkerAMD`, where `props.buffer_marker`.
    pub marker: Option<ash::amd::buffer_marker::Device>,
}

struct Candidate {
    physical: vk::PhysicalDevice,
    index: usize,
    /// `subgroup`, `coopmat` and `summary` are filled in by `settle` once
    /// the device is chosen.
    props: DeviceProps,
    queue_family: u32,
    subgroups: SubgroupCaps,
    /// Everything matrix-core prefill needs but 32-wide subgroups.
    coopmat_ok: bool,
    /// `VK_KHR_cooperative_matrix` is offered at all.
    coopmat_ext: bool,
    /// The summary's text before and after the subgroup entry.
    summary_head: String,
    summary_tail: String,
}

impl Candidate {
    /// Picks the subgroup size (which matrix-core prefill depends on) and
    /// writes the device line.
    fn settle(&mut self, want: &SubgroupSize) -> Result<(), BackendError> {
        let used = choose_subgroup(&self.subgroups, want, crate::pipelines::largest_workgroup())
            .map_err(|e| match e {
                BackendError::BadOption {
                    name,
                    value,
                    reason,
                } => BackendError::BadOption {
                    name,
                    value,
                    reason: format!("{}: {reason}", self.props.name),
                },
                other => other,
            })?;
        let coopmat = self.coopmat_ok && used.size == 32;
        self.props.subgroup = used;
        self.props.coopmat = coopmat;
        self.props.summary = format!(
            "{} | {} | {} | matrix cores: {} | markers: {}",
            self.summary_head,
            subgroup_summary(&self.subgroups, &used),
            self.summary_tail,
            match (self.coopmat_ext, coopmat) {
                (true, true) => "KHR_coopmat",
                (true, false) => "KHR_coopmat (unused)",
                _ => "none",
            },
            u8::from(self.props.buffer_marker),
        );
        Ok(())
    }
}

fn rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 4,
        _ => 3,
    }
}

fn cstr(bytes: &[std::ffi::c_char]) -> String {
    // SAFETY: Vulkan's fixed-size name arrays are NUL-terminated.
    unsafe { CStr::from_ptr(bytes.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The Vulkan loader, opened once per process and never closed. Closing and
/// reopening it per backend made NVIDIA's driver fail to load after a few
/// dozen sessions ("Unable to find a Vulkan driver", seen on an H100): its
/// libraries are not built to be unloaded and loaded again.
fn loader() -> Result<ash::Entry, BackendError> {
    static ENTRY: std::sync::OnceLock<Result<ash::Entry, BackendError>> =
        std::sync::OnceLock::new();
    ENTRY
        .get_or_init(|| {
            // SAFETY: loads the system Vulkan loader; its initialisation code
            // is trusted as any system library's.
            unsafe { ash::Entry::load() }
                .map_err(|e| BackendError::unavailable_from("no Vulkan loader (libvulkan.so.1)", e))
        })
        .clone()
}

/// The process's one Vulkan instance, created on first use and never
/// destroyed. Creating and destroying an instance per backend made NVIDIA's
/// driver refuse `vkCreateInstance` ("Unable to find a Vulkan driver")
/// after about a dozen sessions in one process on an H100; llama.cpp keeps
/// one instance per process too.
fn shared_instance() -> Result<(ash::Entry, ash::Instance), BackendError> {
    static INSTANCE: std::sync::OnceLock<Result<(ash::Entry, ash::Instance), BackendError>> =
        std::sync::OnceLock::new();
    INSTANCE
        .get_or_init(|| {
            let entry = loader()?;
            // SAFETY: plain query on a loaded entry.
            let version = unsafe { entry.try_enumerate_instance_version() }
                .map_err(|e| BackendError::unavailable_from("vkEnumerateInstanceVersion", e))?
                .unwrap_or(vk::API_VERSION_1_0);
            if version < vk::API_VERSION_1_2 {
                return Err(BackendError::unavailable(format!(
                    "the Vulkan loader supports API {}.{}, 1.2 is needed",
                    vk::api_version_major(version),
                    vk::api_version_minor(version)
                )));
            }
            let app = vk::ApplicationInfo::default()
                .application_name(c"rocmforge")
                .api_version(vk::API_VERSION_1_2);
            let ci = vk::InstanceCreateInfo::default().application_info(&app);
            // SAFETY: `ci` and what it points to live across the call.
            let instance = unsafe { entry.create_instance(&ci, None) }
                .map_err(|e| BackendError::unavailable_from("vkCreateInstance failed", e))?;
            Ok((entry, instance))
        })
        .clone()
}

impl Gpu {
    pub fn open(choice: DeviceChoice, subgroup: &SubgroupSize) -> Result<Gpu, BackendError> {
        let (entry, instance) = shared_instance()?;
        let mut c = Self::pick(&entry, &instance, choice)?;
        c.settle(subgroup)?;
        Self::create(entry, instance, c)
    }

    fn pick(
        entry: &ash::Entry,
        instance: &ash::Instance,
        choice: DeviceChoice,
    ) -> Result<Candidate, BackendError> {
        // SAFETY: valid instance.
        let physicals =
            unsafe { instance.enumerate_physical_devices() }.check("vkEnumeratePhysicalDevices")?;
        if physicals.is_empty() {
            return Err(BackendError::unavailable("no Vulkan device found"));
        }
        if let Some(i) = choice.index {
            let &pd = physicals.get(i).ok_or_else(|| {
                BackendError::bad_option(
                    "--device",
                    i,
                    format!(
                        "{} Vulkan device(s) found, numbered from 0",
                        physicals.len()
                    ),
                )
            })?;
            return candidate(entry, instance, pd, i).map_err(BackendError::unavailable);
        }
        let mut usable = Vec::new();
        let mut rejected = Vec::new();
        for (i, &pd) in physicals.iter().enumerate() {
            match candidate(entry, instance, pd, i) {
                Ok(c) if c.props.device_type == vk::PhysicalDeviceType::CPU && !choice.allow_cpu => {
                    rejected.push(format!(
                        "{} is a CPU implementation (pick it with --device {i} or ROCMFORGE_VULKAN_ALLOW_CPU=1)",
                        c.props.name
                    ))
                }
                Ok(c) => usable.push(c),
                Err(e) => rejected.push(e),
            }
        }
        usable.sort_by_key(|c| (rank(c.props.device_type), c.index));
        usable
            .into_iter()
            .next()
            .ok_or_else(|| BackendError::unavailable(rejected.join("; ")))
    }

    fn create(
        entry: ash::Entry,
        instance: ash::Instance,
        c: Candidate,
    ) -> Result<Gpu, BackendError> {
        let mut f11 =
            vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(true);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .buffer_device_address(true)
            .storage_buffer8_bit_access(true)
            .shader_float16(c.props.fp16)
            .vulkan_memory_model(c.props.coopmat);
        let mut coopmat =
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut int_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(true);
        // Through the extension: the instance asks for API 1.2, where the
        // 1.3 feature struct may not be used. (A size is pinned only where
        // `subgroup_caps` found the extension.)
        let pinned = c.props.subgroup.pinned;
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlFeatures::default()
            .subgroup_size_control(true)
            .compute_full_subgroups(c.props.subgroup.full);
        let mut extensions = Vec::new();
        if pinned {
            extensions.push(ash::ext::subgroup_size_control::NAME.as_ptr());
        }
        if c.props.coopmat {
            extensions.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        }
        if c.props.int_dot {
            extensions.push(ash::khr::shader_integer_dot_product::NAME.as_ptr());
        }
        if c.props.buffer_marker {
            extensions.push(ash::amd::buffer_marker::NAME.as_ptr());
        }
        let features = vk::PhysicalDeviceFeatures::default().shader_int64(true);
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(c.queue_family)
            .queue_priorities(&priorities)];
        let mut ci = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&extensions)
            .enabled_features(&features)
            .push_next(&mut f11)
            .push_next(&mut f12);
        if c.props.coopmat {
            ci = ci.push_next(&mut coopmat);
        }
        if c.props.int_dot {
            ci = ci.push_next(&mut int_dot);
        }
        if pinned {
            ci = ci.push_next(&mut size_control);
        }
        // SAFETY: the physical device came from this instance and supports
        // every feature and extension enabled here (checked in `candidate`
        // and `subgroup_caps`).
        let device = match unsafe { instance.create_device(c.physical, &ci, None) } {
            Ok(d) => d,
            Err(e) => {
                return Err(crate::error::VkError {
                    call: "vkCreateDevice",
                    result: e,
                    bytes: 0,
                }
                .into());
            }
        };
        // SAFETY: the family was requested with one queue above.
        let queue = unsafe { device.get_device_queue(c.queue_family, 0) };
        // SAFETY: plain query.
        let memory = unsafe { instance.get_physical_device_memory_properties(c.physical) };
        let free_at_open = device_local_free(&instance, c.physical, &memory, c.props.memory_budget);
        let marker = c
            .props
            .buffer_marker
            .then(|| ash::amd::buffer_marker::Device::new(&instance, &device));
        Ok(Gpu {
            marker,
            _entry: entry,
            _instance: instance,
            device,
            queue,
            queue_family: c.queue_family,
            memory,
            free_at_open,
            props: c.props,
        })
    }

    /// Destroys the device (the instance is the process's, see
    /// `shared_instance`).
    ///
    /// # Safety
    /// Every object created from the device is destroyed and the device is
    /// idle.
    pub unsafe fn destroy(&mut self) {
        // SAFETY: per the contract above.
        unsafe {
            self.device.destroy_device(None);
        }
    }
}

/// Checks one device against the requirements; the error says what it lacks.
fn candidate(
    entry: &ash::Entry,
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    index: usize,
) -> Result<Candidate, String> {
    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut subgroup)
        .push_next(&mut driver)
        .push_next(&mut maint3);
    // SAFETY: `pd` came from this instance; the chain is of 1.1/1.2 core
    // structs, which an instance of API 1.2 accepts.
    unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
    let p = props2.properties;
    let name = cstr(&p.device_name);
    if p.api_version < vk::API_VERSION_1_2 {
        return Err(format!(
            "{name}: Vulkan {}.{}, 1.2 is needed",
            vk::api_version_major(p.api_version),
            vk::api_version_minor(p.api_version)
        ));
    }
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut f11)
        .push_next(&mut f12);
    // SAFETY: as above.
    unsafe { instance.get_physical_device_features2(pd, &mut f2) };
    let f = f2.features;
    let mut missing = Vec::new();
    for (ok, what) in [
        (f12.buffer_device_address, "bufferDeviceAddress"),
        (f.shader_int64, "shaderInt64"),
        (f12.storage_buffer8_bit_access, "storageBuffer8BitAccess"),
        (f11.storage_buffer16_bit_access, "storageBuffer16BitAccess"),
    ] {
        if ok == vk::FALSE {
            missing.push(what);
        }
    }
    let needed_ops = vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC;
    if !subgroup.supported_operations.contains(needed_ops)
        || !subgroup
            .supported_stages
            .contains(vk::ShaderStageFlags::COMPUTE)
    {
        missing.push("subgroup arithmetic in compute shaders");
    }
    if !missing.is_empty() {
        return Err(format!("{name} lacks {}", missing.join(", ")));
    }
    // SAFETY: plain query.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    // Prefer a compute-only queue (async compute on discrete GPUs), else
    // any queue with compute.
    let compute = |q: &vk::QueueFamilyProperties| q.queue_flags.contains(vk::QueueFlags::COMPUTE);
    let queue_family = families
        .iter()
        .position(|q| compute(q) && !q.queue_flags.contains(vk::QueueFlags::GRAPHICS))
        .or_else(|| families.iter().position(compute))
        .ok_or_else(|| format!("{name} has no compute queue"))? as u32;
    // SAFETY: plain query.
    let exts = unsafe { instance.enumerate_device_extension_properties(pd) }
        .map_err(|e| format!("{name}: vkEnumerateDeviceExtensionProperties: {e}"))?;
    let has_ext = |want: &CStr| {
        exts.iter()
            .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == want))
    };
    let int_dot = has_ext(ash::khr::shader_integer_dot_product::NAME) && {
        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut dot);
        // SAFETY: `pd` came from this instance and offers the extension
        // whose feature struct is chained.
        unsafe { instance.get_physical_device_features2(pd, &mut f2) };
        dot.shader_integer_dot_product == vk::TRUE
    };
    let buffer_marker = has_ext(ash::amd::buffer_marker::NAME)
        && std::env::var("ROCMFORGE_VULKAN_MARKER").map_or(true, |v| v != "0");
    let use_int_dot =
        int_dot && std::env::var("ROCMFORGE_VULKAN_INT_DOT").map_or(true, |v| v != "0");
    let coopmat = has_ext(ash::khr::cooperative_matrix::NAME);
    let fp16 = f12.shader_float16 == vk::TRUE;
    // Matrix-core prefill also needs 32-wide subgroups: `settle` checks
    // the size once it is chosen.
    let coopmat_ok = coopmat
        && fp16
        && f12.vulkan_memory_model == vk::TRUE
        && std::env::var("ROCMFORGE_VULKAN_COOPMAT").map_or(true, |v| v != "0")
        && coopmat_f16_16x16(entry, instance, pd);
    let size_control_ext = has_ext(ash::ext::subgroup_size_control::NAME);
    let subgroups = subgroup_caps(instance, pd, subgroup.subgroup_size, size_control_ext);
    // SAFETY: plain query.
    let mem = unsafe { instance.get_physical_device_memory_properties(pd) };
    let host_local = vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE;
    let has_host_local = mem.memory_types[..mem.memory_type_count as usize]
        .iter()
        .any(|t| t.property_flags.contains(host_local));
    let uma = has_host_local
        && matches!(
            p.device_type,
            vk::PhysicalDeviceType::INTEGRATED_GPU | vk::PhysicalDeviceType::CPU
        );
    let max_region = maint3.max_memory_allocation_size;
    let compute_units = compute_units(instance, pd, p.device_type, &has_ext);
    let summary_head = format!(
        "{name} ({}: {}) | uma: {} | fp16: {}",
        cstr(&driver.driver_name),
        cstr(&driver.driver_info),
        u8::from(uma),
        u8::from(fp16),
    );
    let summary_tail = format!(
        "shared memory: {} | int dot: {} | compute units: {compute_units}",
        p.limits.max_compute_shared_memory_size,
        u8::from(use_int_dot),
    );
    Ok(Candidate {
        physical: pd,
        index,
        queue_family,
        subgroups,
        coopmat_ok,
        coopmat_ext: coopmat,
        summary_head,
        summary_tail,
        props: DeviceProps {
            name,
            device_type: p.device_type,
            uma,
            fp16,
            coopmat: false,
            subgroup: Subgroup::default(),
            int_dot: use_int_dot,
            buffer_marker,
            max_region,
            memory_budget: has_ext(ash::ext::memory_budget::NAME),
            max_workgroups: p.limits.max_compute_work_group_count,
            compute_units,
            summary: String::new(),
            timestamp_ns: (families[queue_family as usize].timestamp_valid_bits > 0
                && p.limits.timestamp_period > 0.0)
                .then_some(f64::from(p.limits.timestamp_period)),
        },
    })
}

/// Compute units the device reports: `VK_AMD_shader_core_properties`
/// (engines × arrays × CUs per array), `VK_NV_shader_sm_builtins` (SMs),
/// a CPU implementation's threads; else 32, a mid-sized GPU.
fn compute_units(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    device_type: vk::PhysicalDeviceType,
    has_ext: &dyn Fn(&CStr) -> bool,
) -> u32 {
    if has_ext(ash::amd::shader_core_properties::NAME) {
        let mut core = vk::PhysicalDeviceShaderCorePropertiesAMD::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut core);
        // SAFETY: `pd` came from this instance and offers the extension
        // whose properties struct is chained.
        unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
        let cus = core.shader_engine_count
            * core.shader_arrays_per_engine_count
            * core.compute_units_per_shader_array;
        if cus > 0 {
            return cus;
        }
    }
    if has_ext(ash::nv::shader_sm_builtins::NAME) {
        let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sm);
        // SAFETY: as above.
        unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
        if sm.shader_sm_count > 0 {
            return sm.shader_sm_count;
        }
    }
    if device_type == vk::PhysicalDeviceType::CPU {
        return std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    }
    32
}

/// The device's subgroup sizes: `VK_EXT_subgroup_size_control`'s range and
/// features where it is offered, else only `default`.
fn subgroup_caps(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    default: u32,
    has_ext: bool,
) -> SubgroupCaps {
    let fixed = SubgroupCaps {
        default,
        min: default,
        max: default,
        control: false,
        full: false,
        max_workgroup_subgroups: u32::MAX,
    };
    if !has_ext {
        return fixed;
    }
    let mut props = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut props);
    // SAFETY: `pd` came from this instance and offers
    // VK_EXT_subgroup_size_control, whose property struct may be chained.
    unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
    let mut features = vk::PhysicalDeviceSubgroupSizeControlFeatures::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut features);
    // SAFETY: as above, for the feature struct.
    unsafe { instance.get_physical_device_features2(pd, &mut f2) };
    if props.min_subgroup_size == 0 || props.min_subgroup_size > props.max_subgroup_size {
        return fixed;
    }
    let control = features.subgroup_size_control == vk::TRUE
        && props
            .required_subgroup_size_stages
            .contains(vk::ShaderStageFlags::COMPUTE);
    SubgroupCaps {
        default,
        min: props.min_subgroup_size,
        max: props.max_subgroup_size,
        control,
        full: control && features.compute_full_subgroups == vk::TRUE,
        max_workgroup_subgroups: props.max_compute_workgroup_subgroups,
    }
}

/// Whether the device offers 16x16x16 f16 x f16 + f32 -> f32 subgroup
/// matrices (the shape `matmul_coopmat.comp` is written for) and the
/// cooperativeMatrix feature.
fn coopmat_f16_16x16(entry: &ash::Entry, instance: &ash::Instance, pd: vk::PhysicalDevice) -> bool {
    let mut cm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut cm);
    // SAFETY: the device exposes VK_KHR_cooperative_matrix (checked by the
    // caller), so its feature struct may be chained.
    unsafe { instance.get_physical_device_features2(pd, &mut f2) };
    if cm.cooperative_matrix != vk::TRUE {
        return false;
    }
    let ext = ash::khr::cooperative_matrix::Instance::new(entry, instance);
    // SAFETY: plain query on a device exposing the extension.
    let Ok(shapes) = (unsafe { ext.get_physical_device_cooperative_matrix_properties(pd) }) else {
        return false;
    };
    use vk::ComponentTypeKHR as C;
    shapes.iter().any(|s| {
        (s.m_size, s.n_size, s.k_size) == (16, 16, 16)
            && s.a_type == C::FLOAT16
            && s.b_type == C::FLOAT16
            && s.c_type == C::FLOAT32
            && s.result_type == C::FLOAT32
            && s.scope == vk::ScopeKHR::SUBGROUP
    })
}

/// Device-local bytes free now (see [`Gpu::free_at_open`]).
fn device_local_free(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    memory: &vk::PhysicalDeviceMemoryProperties,
    has_budget: bool,
) -> u64 {
    let heaps = &memory.memory_heaps[..memory.memory_heap_count as usize];
    let local = |i: usize| heaps[i].flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL);
    if has_budget {
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut props2 = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: `pd` came from this instance and supports
        // VK_EXT_memory_budget, whose struct may then extend this query.
        unsafe { instance.get_physical_device_memory_properties2(pd, &mut props2) };
        if let Some(free) = (0..heaps.len())
            .filter(|&i| local(i))
            .map(|i| budget.heap_budget[i].saturating_sub(budget.heap_usage[i]))
            .max()
        {
            return free;
        }
    }
    (0..heaps.len())
        .filter(|&i| local(i))
        .map(|i| heaps[i].size)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(default: u32, min: u32, max: u32) -> SubgroupCaps {
        SubgroupCaps {
            default,
            min,
            max,
            control: true,
            full: true,
            max_workgroup_subgroups: 32,
        }
    }

    fn pinned(size: u32) -> Subgroup {
        Subgroup {
            size,
            pinned: true,
            full: true,
        }
    }

    fn driver(size: u32) -> Subgroup {
        Subgroup {
            size,
            pinned: false,
            full: false,
        }
    }

    #[test]
    fn auto_pins_32_where_the_device_allows_it() {
        // RADV (wave64 default), NVIDIA, Intel.
        for c in [caps(64, 32, 64), caps(32, 32, 32), caps(16, 8, 32)] {
            let used = choose_subgroup(&c, &SubgroupSize::Auto, 512).unwrap();
            assert_eq!(used, pinned(32), "{c:?}");
        }
        let radv = caps(64, 32, 64);
        assert_eq!(
            subgroup_summary(&radv, &pinned(32)),
            "subgroup: 32 (pinned, device allows 32-64)"
        );
        assert_eq!(
            subgroup_summary(&caps(32, 32, 32), &pinned(32)),
            "subgroup: 32 (fixed)"
        );
    }

    #[test]
    fn auto_keeps_the_driver_size_where_32_is_not_allowed() {
        // lavapipe: 8 only, and 512 invocations do not fit 32 subgroups of 8.
        let lavapipe = caps(8, 8, 8);
        for want in [
            SubgroupSize::Auto,
            SubgroupSize::Driver,
            SubgroupSize::Pin(8),
        ] {
            let used = choose_subgroup(&lavapipe, &want, 512).unwrap();
            assert_eq!(used, driver(8), "{want:?}");
            assert_eq!(subgroup_summary(&lavapipe, &used), "subgroup: 8 (fixed)");
        }
        let wave64_only = caps(64, 64, 64);
        assert_eq!(
            choose_subgroup(&wave64_only, &SubgroupSize::Auto, 512).unwrap(),
            driver(64)
        );
        let no_control = SubgroupCaps {
            control: false,
            full: false,
            ..caps(64, 32, 64)
        };
        let used = choose_subgroup(&no_control, &SubgroupSize::Auto, 512).unwrap();
        assert_eq!(used, driver(64));
        assert_eq!(
            subgroup_summary(&no_control, &used),
            "subgroup: 64 (driver default, no size control)"
        );
    }

    #[test]
    fn the_override_pins_or_says_why_not() {
        let radv = caps(64, 32, 64);
        assert_eq!(
            choose_subgroup(&radv, &SubgroupSize::Pin(64), 512).unwrap(),
            pinned(64)
        );
        let used = choose_subgroup(&radv, &SubgroupSize::Driver, 512).unwrap();
        assert_eq!(used, driver(64));
        assert_eq!(
            subgroup_summary(&radv, &used),
            "subgroup: 64 (driver default, device allows 32-64)"
        );
        for (want, says) in [
            (
                SubgroupSize::Pin(3),
                "=3: the device allows subgroups of 32 to 64",
            ),
            (
                SubgroupSize::Pin(48),
                "=48: the device allows subgroups of 32 to 64",
            ),
            (
                SubgroupSize::Pin(128),
                "=128: the device allows subgroups of 32 to 64",
            ),
            (
                SubgroupSize::Invalid("wave64".into()),
                "=\"wave64\": not a number",
            ),
        ] {
            let e = choose_subgroup(&radv, &want, 512).unwrap_err();
            assert!(matches!(e, BackendError::BadOption { .. }), "{e:?}");
            let e = e.to_string();
            assert!(e.contains(says), "{e}");
            assert!(e.starts_with("ROCMFORGE_VULKAN_SUBGROUP_SIZE="), "{e}");
        }
        let e = choose_subgroup(&caps(8, 8, 8), &SubgroupSize::Pin(32), 512)
            .unwrap_err()
            .to_string();
        assert!(e.contains("runs subgroups of 8 only (use 8, or 0"), "{e}");
        // 1024 invocations in at most 16 subgroups of 32: too many.
        let small = SubgroupCaps {
            max_workgroup_subgroups: 16,
            ..caps(64, 32, 64)
        };
        let e = choose_subgroup(&small, &SubgroupSize::Pin(32), 1024)
            .unwrap_err()
            .to_string();
        assert!(e.contains("16 subgroups of 32"), "{e}");
        assert_eq!(
            choose_subgroup(&small, &SubgroupSize::Auto, 1024).unwrap(),
            driver(64)
        );
    }

    #[test]
    fn the_environment_value_parses() {
        assert_eq!(SubgroupSize::parse("0"), SubgroupSize::Driver);
        assert_eq!(SubgroupSize::parse(" 64"), SubgroupSize::Pin(64));
        assert_eq!(
            SubgroupSize::parse("-1"),
            SubgroupSize::Invalid("-1".into())
        );
    }
}
