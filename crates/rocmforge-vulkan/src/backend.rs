//! [`VulkanDevice`]: the [`GpuDevice`] of the Vulkan backend, which
//! [`GpuBackend`] turns into a [`Backend`](rocmforge_core::backend::Backend).
//!
//! A part is one command buffer: its copies in, its dispatches (a barrier
//! after each, a breadcrumb every few), its copies out, replayed by one
//! `vkQueueSubmit` and one bounded fence wait. Weights on a unified-memory
//! device are written straight from the file mapping into host-visible
//! regions; elsewhere they go through the host buffer, made at load as the
//! staging buffer and kept for the steps.

use std::collections::HashMap;
use std::time::Duration;

use ash::vk;
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::cost::Rates;
use rocmforge_core::gpu::device::{
    Frame, HostCopy, HostMemory, InFlight, Lower, Memory, Stall, Upload,
};
use rocmforge_core::gpu::push::{Push, SpinPush};
use rocmforge_core::gpu::{
    Dispatch, GpuBackend, GpuDevice, GpuOptions, KernelSink, Lowering, MatrixTiles,
};

use crate::commands::{Commands, Crumbs, Recorder, WaitError};
use crate::device::{DeviceChoice, Gpu};
use crate::error::Check;
use crate::memory::{allocate, Allocation, Placement};
use crate::options::VulkanOptions;
use crate::pipelines::Pipelines;
use crate::profile::{self, PartStamps, Totals};
use crate::upload::upload_mapped;

/// Bytes of the staging buffer discrete GPUs upload weights through.
const STAGING_BYTES: u64 = 64 << 20;

/// The Vulkan backend: core's GPU backend over this crate's device.
pub type VulkanBackend = GpuBackend<VulkanDevice>;

/// Opens the device `opts` chooses, as a backend with `gpu`'s switches.
pub fn open(opts: VulkanOptions, gpu: GpuOptions) -> Result<VulkanBackend, BackendError> {
    Ok(GpuBackend::new(VulkanDevice::open(opts)?, gpu))
}

/// Rows a workgroup of the integer expert mat-vec computes: build.rs's
/// `matvec_id_int*` variants are two teams of 32 invocations x 4 rows
/// (`gpu::expert_int_workgroup`).
pub(crate) const EXPERT_INT_ROWS: u32 = 8;

/// Teams a dense integer mat-vec workgroup of 64 splits into at least:
/// two teams of 32 invocations, two rows each (the `_teams` variant), so
/// a workgroup computes 4 rows. On the H200 this was +3% (qwen3-30b-a3b),
/// +3% (gpt-oss-20b) and +4% (llama2-7b) tg128 over one team of 64
/// invocations on 2 rows, and 4 teams of 16 lost 2-7%
/// (docs/measurements.md, session 26).
pub(crate) const INT_TEAMS: u32 = 2;

/// Fewest positions a run of the split decode attention takes on wide
/// subgroups (`attention_decode`; narrower ones keep core's 128). 32 gives
/// a short context several runs: at tg128 (spans of 1 to 128 positions)
/// 4 runs of 32 were +4% (qwen3-30b-a3b), +3% (gpt-oss-20b) and +2%
/// (llama2-7b) on the H200 over core's 128, whose single run walked up to
/// 128 positions four groups at a time; 16 was no better
/// (docs/measurements.md, session 26). Long contexts split as before: their
/// runs are set by the workgroups that fill the device.
pub(crate) const SPLIT_MIN: u32 = 32;

/// A recorded part.
pub struct VulkanPart {
    cb: vk::CommandBuffer,
    /// Dispatches per breadcrumb (see `commands::Crumbs`).
    crumb_every: usize,
    /// Its timestamps, when profiled (`ROCMFORGE_VULKAN_PROFILE=1`).
    stamps: Option<PartStamps>,
}

pub struct VulkanDevice {
    pub(crate) gpu: Gpu,
    pub(crate) pipes: Pipelines,
    pub(crate) cmds: Commands,
    pub(crate) opts: VulkanOptions,
    pub(crate) allocations: usize,
    /// After a fatal failure: the drop leaks everything.
    pub(crate) abandoned: bool,
    /// Per profiled part (by command buffer): the ticks its dispatches
    /// took over its submits.
    pub(crate) profiles: HashMap<vk::CommandBuffer, Totals>,
}

impl VulkanDevice {
    pub fn open(opts: VulkanOptions) -> Result<VulkanDevice, BackendError> {
        let choice = DeviceChoice {
            index: opts.device,
            allow_cpu: opts.allow_cpu,
        };
        let mut gpu = Gpu::open(choice, &opts.subgroup_size)?;
        let mut pipes = match Pipelines::new(&gpu.device) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: nothing was created on the device.
                unsafe { gpu.destroy() };
                return Err(e);
            }
        };
        pipes.coopmat = gpu.props.coopmat;
        pipes.int_dot = gpu.props.int_dot;
        pipes.subgroup = gpu.props.subgroup;
        let software = gpu.props.device_type == vk::PhysicalDeviceType::CPU;
        let cmds = match Commands::new(&gpu.device, gpu.queue_family, software) {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: nothing uses the pipelines yet.
                unsafe {
                    pipes.destroy(&gpu.device);
                    gpu.destroy();
                }
                return Err(e);
            }
        };
        Ok(VulkanDevice {
            gpu,
            pipes,
            cmds,
            opts,
            allocations: 0,
            abandoned: false,
            profiles: HashMap::new(),
        })
    }

    /// The subgroup size every kernel runs with, and whether it is required
    /// of the driver (`VkPipelineShaderStageRequiredSubgroupSizeCreateInfo`)
    /// rather than the driver's default or the device's only size.
    pub fn subgroup_size(&self) -> (u32, bool) {
        (self.gpu.props.subgroup.size, self.gpu.props.subgroup.pinned)
    }

    pub(crate) fn wait(&self, cb: vk::CommandBuffer, timeout: Duration) -> Result<(), Stall> {
        let (d, q) = (&self.gpu.device, self.gpu.queue);
        self.cmds
            .submit_wait(d, q, cb, timeout)
            .map_err(|e| match e {
                WaitError::Timeout(waited) => Stall::Timeout(waited),
                WaitError::Vk(v) => Stall::Failed(v.into()),
            })
    }
}

impl Drop for VulkanDevice {
    fn drop(&mut self) {
        if self.abandoned {
            return;
        }
        // SAFETY: the backend freed everything made from the device and
        // waited for it; the pool and pipelines are unused.
        unsafe {
            self.cmds.destroy(&self.gpu.device);
            self.pipes.destroy(&self.gpu.device);
            self.gpu.destroy();
        }
    }
}

fn copies(list: &[HostCopy], inward: bool) -> Vec<vk::BufferCopy> {
    let copy = |c: &HostCopy| {
        let (src_offset, dst_offset) = if inward {
            (c.host, c.arena)
        } else {
            (c.arena, c.host)
        };
        vk::BufferCopy {
            src_offset,
            dst_offset,
            size: c.bytes as u64,
        }
    };
    list.iter().map(copy).collect()
}

impl GpuDevice for VulkanDevice {
    type Buffer = Allocation;
    type Host = Allocation;
    type Part = VulkanPart;

    const NAME: &'static str = "vulkan";

    /// What this device's pipelines offer.
    fn lowering(&self) -> Lowering {
        let matrix = if self.pipes.coopmat {
            MatrixTiles::Auto
        } else {
            MatrixTiles::Off
        };
        // Subgroups of at least 32: decode attention by `attention_decode`.
        let wide = self.gpu.props.subgroup.size >= 32;
        Lowering {
            fuse: true,
            int_matvec: true,
            int_expert_matvec: true,
            grouped_experts: true,
            int_dot_names: self.pipes.int_dot,
            matrix,
            matrix_prefetch: !self.opts.no_prefetch,
            q8_packed_blocks_per_group: 64,
            int_rows: 2,
            expert_int_rows: EXPERT_INT_ROWS,
            row_teams: true,
            compute_units: self.gpu.props.compute_units,
            subgroup_decode: wide,
            // The short runs were measured for `attention_decode`; the
            // staged kernel of narrow subgroups keeps core's.
            split_min: if wide {
                SPLIT_MIN
            } else {
                rocmforge_core::gpu::split::SPLIT_MIN_POSITIONS as u32
            },
            int_teams: INT_TEAMS,
            matrix_attention: self.pipes.coopmat,
        }
    }

    fn summary(&self) -> String {
        self.gpu.props.summary.clone()
    }

    fn max_region(&self) -> u64 {
        self.gpu.props.max_region
    }

    fn free_memory(&self) -> Option<u64> {
        // Asked before load, so nothing of ours is allocated yet; the
        // figure from opening the device is current enough.
        (self.gpu.free_at_open > 0).then_some(self.gpu.free_at_open)
    }

    fn allocation_calls(&self) -> usize {
        self.allocations
    }

    fn crumb_bytes(&self) -> usize {
        4
    }

    fn rates(&self) -> Rates {
        match self.gpu.props.device_type {
            vk::PhysicalDeviceType::CPU => Rates::SOFTWARE,
            vk::PhysicalDeviceType::INTEGRATED_GPU => Rates::INTEGRATED,
            _ => Rates::DISCRETE,
        }
    }

    fn alloc(
        &mut self,
        what: &'static str,
        bytes: u64,
        memory: Memory,
    ) -> Result<Allocation, BackendError> {
        let host = memory == Memory::Weights && self.gpu.props.uma && !self.opts.force_staging;
        self.allocations += 1;
        allocate(&self.gpu, what, bytes, Placement::Device { host })
    }

    fn alloc_host(&mut self, what: &'static str, bytes: u64) -> Result<Allocation, BackendError> {
        self.allocations += 1;
        allocate(&self.gpu, what, bytes, Placement::Host)
    }

    unsafe fn free(&mut self, buffer: Allocation) {
        // SAFETY: the caller's contract.
        unsafe { buffer.destroy(&self.gpu.device) }
    }

    unsafe fn free_host(&mut self, host: Allocation) {
        // SAFETY: the caller's contract.
        unsafe { host.destroy(&self.gpu.device) }
    }

    unsafe fn upload(
        &mut self,
        staging: &mut Option<Allocation>,
        job: Upload<Allocation>,
    ) -> Result<(), BackendError> {
        let Upload {
            regions,
            pieces,
            timeout,
            progress,
        } = job;
        if regions.iter().all(|r| r.mapped.is_some()) {
            // SAFETY: the caller's contract.
            unsafe { upload_mapped(regions, pieces, progress) };
            return Ok(());
        }
        if staging.is_none() {
            *staging = Some(self.alloc_host("staging and readback", STAGING_BYTES)?);
        }
        let staging = staging.as_ref().expect("allocated above");
        self.upload_staged(staging, regions, pieces, timeout, progress)
    }

    fn record(
        &mut self,
        frame: &Frame<Self>,
        lower: &mut Lower,
    ) -> Result<VulkanPart, BackendError> {
        let d = &self.gpu.device;
        let cb = self.cmds.allocate(d)?;
        let crumbs = Crumbs::new(frame.host.buffer, frame.crumbs, self.gpu.marker.as_ref());
        let (arena, host) = (frame.arena.buffer, frame.host.buffer);
        let max_groups = self.gpu.props.max_workgroups;
        let pool = match self.gpu.props.timestamp_ns.filter(|_| profile::wanted()) {
            Some(_) => match profile::create_pool(d) {
                Ok(p) => Some(p),
                Err(e) => {
                    // SAFETY: never submitted.
                    unsafe { self.cmds.free(d, cb) };
                    return Err(e);
                }
            },
            None => None,
        };
        let pipes = &mut self.pipes;
        let recorded = (|| {
            let mut rec = Recorder::begin(d, cb, pipes.layout, max_groups, crumbs, pool)?;
            rec.copy_in(host, arena, &copies(frame.copies_in, true));
            lower(&mut Sink {
                rec: &mut rec,
                pipes,
                device: d,
            })?;
            let kernels = std::mem::take(&mut rec.kernels);
            rec.finish(arena, host, &copies(frame.copies_out, false))?;
            Ok(kernels)
        })();
        match recorded {
            Ok(kernels) => Ok(VulkanPart {
                cb,
                crumb_every: crumbs.every,
                stamps: pool.map(|pool| PartStamps { pool, kernels }),
            }),
            Err(e) => {
                // SAFETY: never submitted.
                unsafe {
                    self.cmds.free(d, cb);
                    if let Some(pool) = pool {
                        d.destroy_query_pool(pool, None);
                    }
                }
                Err(e)
            }
        }
    }

    unsafe fn submit(
        &mut self,
        part: &VulkanPart,
        _: &Allocation,
        _: &Allocation,
        timeout: Duration,
    ) -> Result<(), Stall> {
        self.wait(part.cb, timeout)?;
        if let Some(stamps) = &part.stamps {
            let totals = self.profiles.entry(part.cb).or_default();
            // SAFETY: the submit completed (waited for above).
            unsafe { profile::collect(&self.gpu.device, stamps, totals) }.map_err(Stall::Failed)?;
        }
        Ok(())
    }

    fn in_flight(&self, part: &VulkanPart, crumbs: &[u8]) -> Option<InFlight> {
        let word = u32::from_le_bytes(crumbs.get(..4)?.try_into().ok()?);
        Some(InFlight {
            done: word as usize,
            window: part.crumb_every,
        })
    }

    unsafe fn free_part(&mut self, part: VulkanPart) {
        let totals = self.profiles.remove(&part.cb);
        if let (Some(stamps), Some(tick_ns)) = (&part.stamps, self.gpu.props.timestamp_ns) {
            if let Some(t) = totals.and_then(|t| profile::table(stamps, &t, tick_ns)) {
                eprint!("{t}");
            }
        }
        // SAFETY: the caller's contract (the part is not pending, so
        // neither is its query pool).
        unsafe {
            self.cmds.free(&self.gpu.device, part.cb);
            if let Some(stamps) = part.stamps {
                self.gpu.device.destroy_query_pool(stamps.pool, None);
            }
        }
    }

    fn idle(&mut self, _timeout: Duration) -> Result<(), Stall> {
        // Every submit is waited for (bounded), so this returns at once on
        // a healthy device; it is not called after a stall.
        // SAFETY: a live device.
        unsafe { self.gpu.device.device_wait_idle() }
            .check("vkDeviceWaitIdle")
            .map_err(|e| Stall::Failed(e.into()))
    }

    fn spin(&mut self, timeout: Duration) -> Result<(), Stall> {
        let buf = self.alloc_host("spin flag", 256).map_err(Stall::Failed)?;
        // SAFETY: a fresh mapped allocation of 256 bytes, not in use.
        unsafe { buf.host_slice(0, 32) }.fill(0);
        let push = SpinPush {
            flag: buf.address,
            bound: 65535,
        };
        let frame = Frame {
            arena: &buf,
            host: &buf,
            copies_in: &[],
            copies_out: &[],
            crumbs: 16,
        };
        // 2^20 workgroups of 65535 polls: hours of spinning, seconds to
        // drain once the flag is set.
        let part = self.record(&frame, &mut |sink: &mut dyn KernelSink| {
            sink.dispatch(
                "spin",
                push.bytes(),
                1 << 20,
                "op 0 of 1 (spin test kernel)".into(),
            )
        });
        let part = part.map_err(Stall::Failed)?;
        match self.wait(part.cb, timeout) {
            Ok(()) => {
                // SAFETY: the submit completed; nothing uses these now.
                unsafe {
                    self.cmds.free(&self.gpu.device, part.cb);
                    buf.destroy(&self.gpu.device);
                }
                Ok(())
            }
            Err(e) => {
                // SAFETY: the flag word is host-visible and coherent; the
                // kernel polls it with volatile loads. The buffer and the
                // command buffer are leaked: the device may still use them.
                unsafe { std::ptr::write_volatile(buf.host_ptr().as_ptr().cast::<u32>(), 1) };
                Err(e)
            }
        }
    }

    fn abandon(&mut self) {
        self.abandoned = true;
    }
}

/// Records the lowering's launches as dispatches of this device's
/// pipelines.
struct Sink<'r, 'a> {
    rec: &'r mut Recorder<'a>,
    pipes: &'r mut Pipelines,
    device: &'r ash::Device,
}

impl KernelSink for Sink<'_, '_> {
    fn launch(&mut self, d: Dispatch) -> Result<(), BackendError> {
        let p = self.pipes.get(self.device, d.kernel)?;
        self.rec
            .dispatch((d.kernel, p), d.push, d.groups, d.label.to_owned());
        Ok(())
    }
}
