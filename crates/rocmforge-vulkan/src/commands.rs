//! Command recording and submission: a graph is recorded once into a
//! command buffer (dispatches, a barrier after each, a breadcrumb write
//! after each, the logits copy) and replayed by one `vkQueueSubmit` per step
//! with a bounded fence wait.

use std::time::{Duration, Instant};

use ash::vk;
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::grid;
use rocmforge_core::gpu::push::PUSH_BYTES;

use crate::error::{Check, VkError};

/// The command pool and the one fence every submit waits on.
pub struct Commands {
    pool: vk::CommandPool,
    fence: vk::Fence,
    /// How long a wait polls the fence before it blocks.
    spin: Duration,
}

/// How long a submit's wait polls its fence before it blocks on a GPU:
/// `ROCMFORGE_VULKAN_SPIN` (milliseconds; 0 blocks at once), else
/// [`SPIN`].
fn spin_time() -> Duration {
    std::env::var("ROCMFORGE_VULKAN_SPIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(SPIN, Duration::from_millis)
}

/// How long a wait polls by default, as the HIP backend's.
const SPIN: Duration = Duration::from_millis(20);

/// Why a bounded wait ended without the work done.
pub enum WaitError {
    Timeout(Duration),
    Vk(VkError),
}

impl Commands {
    /// `software`: the device runs on the CPU (lavapipe), whose threads a
    /// polling wait would take time from: its waits block at once.
    pub fn new(
        device: &ash::Device,
        family: u32,
        software: bool,
    ) -> Result<Commands, BackendError> {
        let ci = vk::CommandPoolCreateInfo::default()
            .queue_family_index(family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid device and create info.
        let pool = unsafe { device.create_command_pool(&ci, None) }.check("vkCreateCommandPool")?;
        // SAFETY: as above.
        let fence = match unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) } {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: the pool has no command buffers.
                unsafe { device.destroy_command_pool(pool, None) };
                return Err(VkError {
                    call: "vkCreateFence",
                    result: e,
                    bytes: 0,
                }
                .into());
            }
        };
        let spin = if software {
            Duration::ZERO
        } else {
            spin_time()
        };
        Ok(Commands { pool, fence, spin })
    }

    pub fn allocate(&self, device: &ash::Device) -> Result<vk::CommandBuffer, BackendError> {
        let ai = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: valid pool; one buffer requested.
        let cbs =
            unsafe { device.allocate_command_buffers(&ai) }.check("vkAllocateCommandBuffers")?;
        Ok(cbs[0])
    }

    /// Returns a command buffer to the pool.
    ///
    /// # Safety
    /// `cb` came from this pool and is not pending.
    pub unsafe fn free(&self, device: &ash::Device, cb: vk::CommandBuffer) {
        // SAFETY: per the contract above.
        unsafe { device.free_command_buffers(self.pool, &[cb]) };
    }

    /// Submits `cb` and waits for it at most `timeout`.
    pub fn submit_wait(
        &self,
        device: &ash::Device,
        queue: vk::Queue,
        cb: vk::CommandBuffer,
        timeout: Duration,
    ) -> Result<(), WaitError> {
        let cbs = [cb];
        let submit = vk::SubmitInfo::default().command_buffers(&cbs);
        let start = Instant::now();
        // SAFETY: `cb` is fully recorded and not pending (every earlier
        // submit was waited for), and the fence is unsignaled (reset after
        // each wait).
        unsafe { device.queue_submit(queue, &[submit], self.fence) }
            .check("vkQueueSubmit")
            .map_err(WaitError::Vk)?;
        // Polled first: a decode step is a few milliseconds, and a
        // blocking wait may sleep past its end (ROCMFORGE_VULKAN_SPIN=0:
        // the blocking wait alone, for measurement).
        let spin = self.spin.min(timeout);
        loop {
            // SAFETY: the fence belongs to this device.
            match unsafe { device.get_fence_status(self.fence) } {
                Ok(false) if start.elapsed() < spin => std::thread::yield_now(),
                Ok(_) => break,
                Err(result) => {
                    return Err(WaitError::Vk(VkError {
                        call: "vkGetFenceStatus",
                        result,
                        bytes: 0,
                    }))
                }
            }
        }
        let left = timeout.saturating_sub(start.elapsed());
        let ns = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the fence belongs to this device.
        match unsafe { device.wait_for_fences(&[self.fence], true, ns) } {
            Ok(()) => {}
            Err(vk::Result::TIMEOUT) => return Err(WaitError::Timeout(start.elapsed())),
            Err(result) => {
                return Err(WaitError::Vk(VkError {
                    call: "vkWaitForFences",
                    result,
                    bytes: 0,
                }))
            }
        }
        // SAFETY: the fence is signaled and no longer used by a submit.
        unsafe { device.reset_fences(&[self.fence]) }
            .check("vkResetFences")
            .map_err(WaitError::Vk)
    }

    /// # Safety
    /// Nothing from the pool is pending and the fence is not waited on.
    pub unsafe fn destroy(&self, device: &ash::Device) {
        // SAFETY: per the contract above; destroying the pool frees its
        // command buffers.
        unsafe {
            device.destroy_fence(self.fence, None);
            device.destroy_command_pool(self.pool, None);
        }
    }
}

/// Where breadcrumbs go: after dispatch `i` completes, if `i + 1` is a
/// multiple of `every`, the word at `offset` of `buffer` (host-visible) is
/// set to `i + 1`. A timeout then names the dispatches from there to the
/// next crumb. With `marker` (VK_AMD_buffer_marker) the word is written by
/// a pipelined marker instead of a transfer.
#[derive(Clone, Copy)]
pub struct Crumbs<'a> {
    pub buffer: vk::Buffer,
    pub offset: u64,
    pub every: usize,
    pub marker: Option<&'a ash::amd::buffer_marker::Device>,
}

impl<'a> Crumbs<'a> {
    /// Crumbs into `buffer` at `offset` every `crumb_every()` dispatches:
    /// markers where the device has them, else fills.
    pub fn new(
        buffer: vk::Buffer,
        offset: u64,
        marker: Option<&'a ash::amd::buffer_marker::Device>,
    ) -> Crumbs<'a> {
        Crumbs {
            buffer,
            offset,
            every: crumb_every(),
            marker,
        }
    }
}

/// Dispatches per breadcrumb: `ROCMFORGE_VULKAN_CRUMB_EVERY`, else
/// `DEFAULT_CRUMB_EVERY`. Measured on the H100 (docs/vulkan.md, 7B decode):
/// a fill (a transfer between compute dispatches) after every dispatch
/// cost 2.1 of 10.7 ms per token, a marker after every dispatch 0.75 of
/// 7.6 ms, a fill every 32 dispatches 0.27 ms.
pub fn crumb_every() -> usize {
    std::env::var("ROCMFORGE_VULKAN_CRUMB_EVERY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_CRUMB_EVERY)
}

/// See `crumb_every`.
pub const DEFAULT_CRUMB_EVERY: usize = 32;

/// Records dispatches into one command buffer, each followed by a barrier
/// (and, every `Crumbs::every` dispatches, a breadcrumb), and remembers a
/// label per dispatch for timeout messages.
///
/// Barriers name exactly the stages that wrote before them: compute, plus
/// transfer only while a breadcrumb fill is outstanding. A source mask that
/// always named the transfer stage made every one of a decode step's ~300
/// barriers wait on the copy engine too.
pub struct Recorder<'a> {
    device: &'a ash::Device,
    cb: vk::CommandBuffer,
    layout: vk::PipelineLayout,
    max_groups: [u32; 3],
    crumbs: Crumbs<'a>,
    bound: vk::Pipeline,
    /// A transfer (breadcrumb fill) was recorded since the last barrier
    /// that waited on the transfer stage.
    transfer_pending: bool,
    pub labels: Vec<String>,
    /// The profile's query pool (`crate::profile`): a timestamp before the
    /// first dispatch and after each one, whose kernel goes to `kernels`.
    stamps: Option<vk::QueryPool>,
    pub kernels: Vec<String>,
    /// Profile entries keyed by kernel and grid (`profile::by_grid`).
    by_grid: bool,
}

impl<'a> Recorder<'a> {
    /// Begins recording into `cb`; with `stamps` (a query pool of
    /// `profile::MAX_STAMPS` timestamps) each dispatch is timed.
    pub fn begin(
        device: &'a ash::Device,
        cb: vk::CommandBuffer,
        layout: vk::PipelineLayout,
        max_groups: [u32; 3],
        crumbs: Crumbs<'a>,
        stamps: Option<vk::QueryPool>,
    ) -> Result<Recorder<'a>, BackendError> {
        // SAFETY: `cb` is in the initial state (freshly allocated).
        unsafe { device.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()) }
            .check("vkBeginCommandBuffer")?;
        if let Some(pool) = stamps {
            // SAFETY: recording state, outside any render pass; the pool
            // holds MAX_STAMPS timestamp queries, reset on every replay
            // before the first is written.
            unsafe {
                device.cmd_reset_query_pool(cb, pool, 0, crate::profile::MAX_STAMPS);
                device.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, pool, 0);
            }
        }
        Ok(Recorder {
            device,
            cb,
            layout,
            max_groups,
            crumbs,
            bound: vk::Pipeline::null(),
            transfer_pending: false,
            labels: Vec::new(),
            stamps,
            kernels: Vec::new(),
            by_grid: stamps.is_some() && crate::profile::by_grid(),
        })
    }

    /// Orders the compute work recorded so far (and any outstanding
    /// breadcrumb fill) before `dst_stage`'s `dst_access`.
    fn barrier(&mut self, dst_stage: vk::PipelineStageFlags, dst_access: vk::AccessFlags) {
        let (mut src_stage, mut src_access) = (
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_WRITE,
        );
        if self.transfer_pending {
            src_stage |= vk::PipelineStageFlags::TRANSFER;
            src_access |= vk::AccessFlags::TRANSFER_WRITE;
            self.transfer_pending = false;
        }
        let b = vk::MemoryBarrier::default()
            .src_access_mask(src_access)
            .dst_access_mask(dst_access);
        // SAFETY: recording into a command buffer in the recording state.
        unsafe {
            self.device.cmd_pipeline_barrier(
                self.cb,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &[b],
                &[],
                &[],
            )
        };
    }

    /// Records `groups` workgroups of `pipeline` (kernel `kernel`) with
    /// `push`, then the barrier that orders it before everything after, its
    /// breadcrumb if one is due, and its timestamp when profiled.
    pub fn dispatch(
        &mut self,
        (kernel, pipeline): (&str, vk::Pipeline),
        push: &[u8],
        groups: u32,
        label: String,
    ) {
        if groups == 0 {
            return;
        }
        self.dispatch_ordered(pipeline, push, groups, label);
        let stamp = self.kernels.len() as u32 + 1;
        if let Some(pool) = self.stamps.filter(|_| stamp < crate::profile::MAX_STAMPS) {
            // SAFETY: recording state; query `stamp` is inside the pool and
            // was reset at the start of this command buffer.
            unsafe {
                self.device.cmd_write_timestamp(
                    self.cb,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    pool,
                    stamp,
                )
            };
            self.kernels
                .push(crate::profile::entry_name(kernel, groups, self.by_grid));
        }
    }

    /// [`Self::dispatch`] without the timestamp.
    fn dispatch_ordered(
        &mut self,
        pipeline: vk::Pipeline,
        push: &[u8],
        groups: u32,
        label: String,
    ) {
        let (x, y) = grid(groups, self.max_groups[0]);
        assert!(
            push.len() <= PUSH_BYTES,
            "argument block of {label} too long"
        );
        // SAFETY: recording state; the pipeline uses `self.layout`, whose
        // push range (`PUSH_BYTES`) covers `push` (asserted above).
        unsafe {
            if pipeline != self.bound {
                self.device
                    .cmd_bind_pipeline(self.cb, vk::PipelineBindPoint::COMPUTE, pipeline);
                self.bound = pipeline;
            }
            self.device.cmd_push_constants(
                self.cb,
                self.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                push,
            );
            self.device.cmd_dispatch(self.cb, x, y, 1);
        }
        self.labels.push(label);
        let due = self.labels.len().is_multiple_of(self.crumbs.every);
        if let (Some(marker), true) = (self.crumbs.marker, due) {
            self.barrier(
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
            );
            // SAFETY: recording state; the crumb word is 4-aligned inside
            // the host buffer, which has TRANSFER_DST usage.
            unsafe {
                marker.cmd_write_buffer_marker(
                    self.cb,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    self.crumbs.buffer,
                    self.crumbs.offset,
                    self.labels.len() as u32,
                )
            };
            return;
        }
        if !due {
            // Only compute follows until the next crumb.
            self.barrier(
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
            );
            return;
        }
        self.barrier(
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::AccessFlags::SHADER_READ
                | vk::AccessFlags::SHADER_WRITE
                | vk::AccessFlags::TRANSFER_READ
                | vk::AccessFlags::TRANSFER_WRITE,
        );
        // SAFETY: recording state; the crumb word is inside the host buffer,
        // which has TRANSFER_DST usage.
        unsafe {
            self.device.cmd_fill_buffer(
                self.cb,
                self.crumbs.buffer,
                self.crumbs.offset,
                4,
                self.labels.len() as u32,
            )
        };
        self.transfer_pending = true;
    }

    /// Records copies of host-written bytes (a part's imports) into
    /// `dst`, ordered before every dispatch recorded after them.
    pub fn copy_in(&mut self, src: vk::Buffer, dst: vk::Buffer, regions: &[vk::BufferCopy]) {
        if regions.is_empty() {
            return;
        }
        // SAFETY: recording state; the ranges are inside both buffers
        // (checked by the caller against the reservation). Host writes
        // before the submit are visible to it (submission is a host
        // memory dependency on coherent memory).
        unsafe { self.device.cmd_copy_buffer(self.cb, src, dst, regions) };
        self.transfer_pending = true;
        self.barrier(
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
        );
    }

    /// Records the copies `regions` from `src` to host memory (the logits,
    /// or a part's exports) and a barrier making them visible to the host,
    /// then ends recording.
    pub fn finish(
        mut self,
        src: vk::Buffer,
        dst: vk::Buffer,
        regions: &[vk::BufferCopy],
    ) -> Result<Vec<String>, BackendError> {
        // The last dispatch's barrier may have waited for compute only.
        self.barrier(
            vk::PipelineStageFlags::TRANSFER,
            vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE,
        );
        if !regions.is_empty() {
            // SAFETY: recording state; the ranges are inside their buffers
            // (checked by the caller against the reservation).
            unsafe { self.device.cmd_copy_buffer(self.cb, src, dst, regions) };
            self.transfer_pending = true;
        }
        self.barrier(vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ);
        // SAFETY: recording state.
        unsafe { self.device.end_command_buffer(self.cb) }.check("vkEndCommandBuffer")?;
        Ok(self.labels)
    }
}
