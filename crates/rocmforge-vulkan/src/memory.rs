//! A few big allocations, each one `VkDeviceMemory` bound to one `VkBuffer`
//! whose device address kernels receive. Nothing is sub-allocated from the
//! driver per tensor: tensors are offsets chosen by the core planners.

use std::ptr::NonNull;

use ash::vk;
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::device::{DeviceMemory, HostMemory};

use crate::device::Gpu;
use crate::error::Check;

/// Where an allocation should live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Device-local; host-visible too if the device has such memory and
    /// `host` is set (UMA weights written straight from the mapping).
    Device { host: bool },
    /// Host-visible and coherent, preferably cached (step inputs, readback,
    /// staging).
    Host,
}

/// One buffer with its own memory.
pub struct Allocation {
    pub buffer: vk::Buffer,
    pub memory: vk::DeviceMemory,
    pub size: u64,
    /// Device address of byte 0.
    pub address: u64,
    /// Host pointer to byte 0 when the memory is mapped.
    pub mapped: Option<*mut u8>,
}

impl Allocation {
    /// Frees the buffer and its memory.
    ///
    /// # Safety
    /// The device has finished every command that uses the buffer.
    pub unsafe fn destroy(&self, device: &ash::Device) {
        // SAFETY: per the contract above; unmapping is implicit in freeing.
        unsafe {
            device.destroy_buffer(self.buffer, None);
            device.free_memory(self.memory, None);
        }
    }

    /// The mapped bytes `offset..offset + len`.
    ///
    /// # Safety
    /// The range is inside the allocation, the allocation is mapped, and
    /// neither the device nor another slice is accessing the range.
    // Mapped device memory is shared with the device, like an UnsafeCell:
    // handing out `&mut` from `&self` is the point, under the contract above.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn host_slice(&self, offset: u64, len: usize) -> &mut [u8] {
        let base = self.mapped.expect("allocation is mapped");
        debug_assert!(offset + len as u64 <= self.size);
        // SAFETY: per the contract above.
        unsafe { std::slice::from_raw_parts_mut(base.add(offset as usize), len) }
    }
}

fn memory_type(gpu: &Gpu, bits: u32, placement: Placement) -> Option<u32> {
    use vk::MemoryPropertyFlags as F;
    let wanted: &[F] = match placement {
        Placement::Device { host: true } => &[
            F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
            F::DEVICE_LOCAL,
        ],
        Placement::Device { host: false } => &[F::DEVICE_LOCAL, F::empty()],
        Placement::Host => &[
            F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED,
            F::HOST_VISIBLE | F::HOST_COHERENT,
        ],
    };
    let types = &gpu.memory.memory_types[..gpu.memory.memory_type_count as usize];
    wanted.iter().find_map(|&flags| {
        types
            .iter()
            .enumerate()
            .find(|(i, t)| bits & (1 << i) != 0 && t.property_flags.contains(flags))
            .map(|(i, _)| i as u32)
    })
}

/// Creates a buffer of `size` bytes usable as storage (by address) and as a
/// transfer source and destination, with memory of its own. Host-visible
/// memory is mapped for the allocation's lifetime.
pub fn allocate(
    gpu: &Gpu,
    what: &'static str,
    size: u64,
    placement: Placement,
) -> Result<Allocation, BackendError> {
    let size = size.max(256);
    let d = &gpu.device;
    let ci = vk::BufferCreateInfo::default()
        .size(size)
        .usage(
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST,
        )
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: valid device and create info.
    let buffer = unsafe { d.create_buffer(&ci, None) }.check_alloc("vkCreateBuffer", size)?;
    let cleanup_buffer = |e: BackendError| {
        // SAFETY: the buffer is unused and unbound.
        unsafe { d.destroy_buffer(buffer, None) };
        e
    };
    // SAFETY: the buffer was just created on this device.
    let req = unsafe { d.get_buffer_memory_requirements(buffer) };
    let type_index = memory_type(gpu, req.memory_type_bits, placement).ok_or_else(|| {
        cleanup_buffer(BackendError::unsupported(
            "memory",
            format!("the device has no memory type for {what} ({placement:?})"),
        ))
    })?;
    let mut flags =
        vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
    let ai = vk::MemoryAllocateInfo::default()
        .allocation_size(req.size)
        .memory_type_index(type_index)
        .push_next(&mut flags);
    // SAFETY: valid allocate info; the device address flag is supported
    // because bufferDeviceAddress was enabled.
    let memory = unsafe { d.allocate_memory(&ai, None) }
        .map_err(|result| BackendError::OutOfMemory {
            what,
            bytes: if result == vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
                || result == vk::Result::ERROR_OUT_OF_HOST_MEMORY
            {
                size
            } else {
                0
            },
        })
        .map_err(cleanup_buffer)?;
    let fail = |e: BackendError| {
        // SAFETY: neither object is in use.
        unsafe {
            d.destroy_buffer(buffer, None);
            d.free_memory(memory, None);
        }
        e
    };
    // SAFETY: memory is of a type the buffer accepts and large enough.
    unsafe { d.bind_buffer_memory(buffer, memory, 0) }
        .check("vkBindBufferMemory")
        .map_err(|e| fail(e.into()))?;
    let host_visible = gpu.memory.memory_types[type_index as usize]
        .property_flags
        .contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
    let mapped = if host_visible && placement != (Placement::Device { host: false }) {
        // SAFETY: host-visible memory, mapped once, whole range.
        let p = unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
            .check("vkMapMemory")
            .map_err(|e| fail(e.into()))?;
        Some(p.cast::<u8>())
    } else {
        None
    };
    let info = vk::BufferDeviceAddressInfo::default().buffer(buffer);
    // SAFETY: the buffer has SHADER_DEVICE_ADDRESS usage and bound memory
    // allocated with the device-address flag.
    let address = unsafe { d.get_buffer_device_address(&info) };
    Ok(Allocation {
        buffer,
        memory,
        size,
        address,
        mapped,
    })
}

impl DeviceMemory for Allocation {
    fn address(&self) -> u64 {
        self.address
    }

    fn bytes(&self) -> u64 {
        self.size
    }
}

impl HostMemory for Allocation {
    fn host_ptr(&self) -> NonNull<u8> {
        NonNull::new(self.mapped.expect("host memory is mapped")).expect("mapped")
    }
}
