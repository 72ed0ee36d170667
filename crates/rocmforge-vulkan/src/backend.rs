//! `VulkanBackend`: the [`Backend`] implementation.
//!
//! Allocations per model: the weight region(s), the KV cache, the arena, and
//! one host-visible buffer holding the step inputs, the breadcrumb word and
//! the logits readback. On discrete GPUs that host buffer is made at load
//! (64 MiB at least) and first serves as the staging buffer the weights are
//! uploaded through. Nothing else is allocated per graph or per token.

use std::time::Duration;

use ash::vk;
use rocmforge_core::backend::{
    AllocationStats, Backend, BackendError, BackendInfo, FreeMemory, GraphId, StepInputs,
};
use rocmforge_core::graph::split::{Exchange, GraphPart};
use rocmforge_core::graph::Graph;
use rocmforge_core::model::{Model, WeightId, WEIGHT_ALIGN};
use rocmforge_core::plan::{split_regions, ArenaPlan, KvLayout, StepInputLayout};
use rocmforge_core::quant::QuantType;

use crate::commands::{in_flight, Commands, Crumbs, Recorder, WaitError};
use crate::device::{DeviceChoice, Gpu, SubgroupSize};
use crate::error::Check;
use crate::memory::{allocate, Allocation, Placement};
use crate::pipelines::Pipelines;
use rocmforge_core::gpu::push::{Push, SpinPush};
use rocmforge_core::gpu::staging::{read_f32s, stage_part, write_f32s, Staged, STAGING_SLACK};
use rocmforge_core::gpu::{self as kernels, DeviceWeight, GraphAddresses, KernelSink, Lowering};

/// Default bound on one step's fence wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of the staging buffer discrete GPUs upload weights through.
const STAGING_BYTES: u64 = 64 << 20;

/// How to open the backend.
#[derive(Clone, Debug, PartialEq)]
pub struct VulkanOptions {
    /// Device index in the driver's list; `None` picks the best GPU.
    pub device: Option<usize>,
    /// Allow automatic choice of a CPU implementation (lavapipe).
    pub allow_cpu: bool,
    /// Bound on each step's wait for the device.
    pub timeout: Duration,
    /// Upload weights through the staging buffer even on UMA devices (tests
    /// the discrete-GPU path on any device).
    pub force_staging: bool,
    /// Cap on one weight region, below the device's own (tests splitting).
    pub max_region: Option<u64>,
    /// The subgroup size pipelines are created with: by default 32 where
    /// the device lets pipelines require a size, else the driver's.
    pub subgroup_size: SubgroupSize,
}

impl Default for VulkanOptions {
    fn default() -> Self {
        VulkanOptions {
            device: None,
            allow_cpu: false,
            timeout: DEFAULT_TIMEOUT,
            force_staging: false,
            max_region: None,
            subgroup_size: SubgroupSize::Auto,
        }
    }
}

impl VulkanOptions {
    /// Defaults, then the environment: `ROCMFORGE_VULKAN_ALLOW_CPU=1`,
    /// `ROCMFORGE_GPU_TIMEOUT` (seconds), `ROCMFORGE_VULKAN_STAGING=1`,
    /// `ROCMFORGE_VULKAN_MAX_REGION` (bytes),
    /// `ROCMFORGE_VULKAN_SUBGROUP_SIZE` (a size to pin, e.g. 64 for wave64
    /// on RADV; 0 for the driver's default).
    pub fn from_env() -> VulkanOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let flag = |k: &str| var(k).is_some_and(|v| v != "0");
        let timeout = var("ROCMFORGE_GPU_TIMEOUT")
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64);
        VulkanOptions {
            device: None,
            allow_cpu: flag("ROCMFORGE_VULKAN_ALLOW_CPU"),
            timeout,
            force_staging: flag("ROCMFORGE_VULKAN_STAGING"),
            max_region: var("ROCMFORGE_VULKAN_MAX_REGION").and_then(|v| v.parse().ok()),
            subgroup_size: var("ROCMFORGE_VULKAN_SUBGROUP_SIZE")
                .map_or(SubgroupSize::Auto, |v| SubgroupSize::parse(&v)),
        }
    }
}

struct Loaded {
    weights: Vec<DeviceWeight>,
    regions: Vec<Allocation>,
    kv: Allocation,
    kv_layout: KvLayout,
    n_vocab: usize,
    weight_bytes: u64,
    /// Host copy of the rope frequency factors, for the parameter check.
    rope_freqs: Option<(usize, Vec<f32>)>,
}

/// The arena and the layout of the host-visible buffer: step inputs, then
/// the breadcrumb word, then the logits.
struct Reserved {
    /// The arena, then the scratch (rounded matmul activations).
    arena: Allocation,
    arena_bytes: u64,
    scratch_bytes: u64,
    max_tokens: usize,
    crumb_offset: u64,
    logits_offset: u64,
    logits_bytes: u64,
}

/// A recorded graph: one command buffer for a whole graph, or one per part
/// of a split graph.
struct Recorded {
    parts: Vec<RecordedPart>,
    step: StepInputLayout,
    n_tokens: usize,
}

struct RecordedPart {
    cb: vk::CommandBuffer,
    labels: Vec<String>,
    /// Dispatches per breadcrumb (see `commands::Crumbs`).
    crumb_every: usize,
    /// Where the part's imports are written, and its exports (a whole
    /// graph's only export is its logits) read, in the host buffer.
    imports: Vec<Staged>,
    exports: Vec<Staged>,
}

/// Copies between the readback region and the arena.
trait StagedCopy {
    fn copy_in(&self) -> vk::BufferCopy;
    fn copy_out(&self) -> vk::BufferCopy;
}

impl StagedCopy for Staged {
    fn copy_in(&self) -> vk::BufferCopy {
        vk::BufferCopy {
            src_offset: self.host,
            dst_offset: self.arena,
            size: self.bytes as u64,
        }
    }

    fn copy_out(&self) -> vk::BufferCopy {
        vk::BufferCopy {
            src_offset: self.arena,
            dst_offset: self.host,
            size: self.bytes as u64,
        }
    }
}

pub struct VulkanBackend {
    gpu: Gpu,
    pipes: Pipelines,
    cmds: Commands,
    opts: VulkanOptions,
    loaded: Option<Loaded>,
    reserved: Option<Reserved>,
    /// Host-visible: staging at load (discrete GPUs), then step inputs,
    /// breadcrumb and logits readback.
    host: Option<Allocation>,
    graphs: Vec<Recorded>,
    allocations: usize,
    /// Set by a timeout or device loss: every later call fails with it.
    stopped: Option<String>,
}

impl VulkanBackend {
    pub fn new(opts: VulkanOptions) -> Result<VulkanBackend, BackendError> {
        let mut gpu = Gpu::open(
            DeviceChoice {
                index: opts.device,
                allow_cpu: opts.allow_cpu,
            },
            &opts.subgroup_size,
        )?;
        let pipes = match Pipelines::new(&gpu.device) {
            Ok(mut p) => {
                p.coopmat = gpu.props.coopmat;
                p.int_dot = gpu.props.int_dot;
                p.subgroup = gpu.props.subgroup;
                p
            }
            Err(e) => {
                // SAFETY: nothing was created on the device.
                unsafe { gpu.destroy() };
                return Err(e);
            }
        };
        let cmds = Commands::new(&gpu.device, gpu.queue_family);
        let cmds = match cmds {
            Ok(c) => c,
            Err(e) => {
                let mut pipes = pipes;
                // SAFETY: nothing uses the pipelines yet.
                unsafe {
                    pipes.destroy(&gpu.device);
                    gpu.destroy();
                }
                return Err(e);
            }
        };
        Ok(VulkanBackend {
            gpu,
            pipes,
            cmds,
            opts,
            loaded: None,
            reserved: None,
            host: None,
            graphs: Vec::new(),
            allocations: 0,
            stopped: None,
        })
    }

    /// The one-line device summary.
    pub fn device_summary(&self) -> &str {
        &self.gpu.props.summary
    }

    /// The subgroup size every kernel runs with, and whether it is required
    /// of the driver (`VkPipelineShaderStageRequiredSubgroupSizeCreateInfo`)
    /// rather than the driver's default or the device's only size.
    pub fn subgroup_size(&self) -> (u32, bool) {
        (self.gpu.props.subgroup.size, self.gpu.props.subgroup.pinned)
    }

    fn usable(&self) -> Result<(), BackendError> {
        match &self.stopped {
            Some(why) => Err(BackendError::Unusable(why.clone())),
            None => Ok(()),
        }
    }

    /// Turns a failed wait into the backend error, stopping the backend on
    /// a timeout or a lost device.
    fn wait_failed(&mut self, e: WaitError, what: String) -> BackendError {
        let err = match e {
            WaitError::Timeout(waited) => BackendError::Timeout { what, waited },
            WaitError::Vk(v) => v.into(),
        };
        if err.is_fatal() {
            self.stopped = Some(err.to_string());
        }
        err
    }

    /// Destroys graphs, reservation and model (device idle first).
    fn release(&mut self, model_too: bool) {
        // SAFETY: waiting for idle is always valid on a healthy device; the
        // objects below are then unused.
        unsafe {
            let _ = self.gpu.device.device_wait_idle();
            for g in self.graphs.drain(..) {
                for p in g.parts {
                    self.cmds.free(&self.gpu.device, p.cb);
                }
            }
            if let Some(r) = self.reserved.take() {
                r.arena.destroy(&self.gpu.device);
            }
            if model_too {
                if let Some(h) = self.host.take() {
                    h.destroy(&self.gpu.device);
                }
                if let Some(l) = self.loaded.take() {
                    for a in &l.regions {
                        a.destroy(&self.gpu.device);
                    }
                    l.kv.destroy(&self.gpu.device);
                }
            }
        }
    }

    fn alloc(
        &mut self,
        what: &'static str,
        size: u64,
        placement: Placement,
    ) -> Result<Allocation, BackendError> {
        self.allocations += 1;
        allocate(&self.gpu, what, size, placement)
    }

    /// Copies every weight into its region: straight from the mapping into
    /// host-visible regions, else through one staging buffer in chunks.
    fn upload(
        &mut self,
        sources: &[&[u8]],
        regions: &[Allocation],
        places: &[(usize, u64)],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        let total: u64 = sources.iter().map(|s| s.len() as u64).sum();
        let mut done = 0;
        progress(0, total);
        if regions.iter().all(|r| r.mapped.is_some()) {
            for (&src, &(region, offset)) in sources.iter().zip(places) {
                // SAFETY: the range was assigned inside the region by
                // split_regions, and no command uses the region yet.
                unsafe { regions[region].host_slice(offset, src.len()) }.copy_from_slice(src);
                done += src.len() as u64;
                progress(done, total);
            }
            return Ok(());
        }
        // The host buffer, made now, is the staging buffer; it is kept for
        // the step inputs and logits.
        let staging = self.alloc("staging and readback", STAGING_BYTES, Placement::Host)?;
        let result = self.upload_staged(sources, regions, places, &staging, total, progress);
        self.host = Some(staging);
        result
    }

    fn upload_staged(
        &mut self,
        sources: &[&[u8]],
        regions: &[Allocation],
        places: &[(usize, u64)],
        staging: &Allocation,
        total: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        let cb = self.cmds.allocate(&self.gpu.device)?;
        let mut pending: Vec<(usize, vk::BufferCopy)> = Vec::new();
        let mut fill = 0u64;
        let mut done = 0u64;
        let mut result = Ok(());
        'weights: for (&src, &(region, offset)) in sources.iter().zip(places) {
            let mut at = 0usize;
            while at < src.len() {
                if fill == staging.size {
                    if let Err(e) = self.flush_copies(cb, staging, regions, &mut pending) {
                        result = Err(e);
                        break 'weights;
                    }
                    fill = 0;
                }
                let n = (src.len() - at).min((staging.size - fill) as usize);
                // SAFETY: `fill + n <= staging.size`, and no copy reading
                // the staging buffer is pending (flushed above).
                unsafe { staging.host_slice(fill, n) }.copy_from_slice(&src[at..at + n]);
                pending.push((
                    region,
                    vk::BufferCopy {
                        src_offset: fill,
                        dst_offset: offset + at as u64,
                        size: n as u64,
                    },
                ));
                fill += n as u64;
                at += n;
                done += n as u64;
                progress(done, total);
            }
        }
        if result.is_ok() && !pending.is_empty() {
            result = self.flush_copies(cb, staging, regions, &mut pending);
        }
        if self.stopped.is_none() {
            // SAFETY: every submit of `cb` was waited for.
            unsafe { self.cmds.free(&self.gpu.device, cb) };
        }
        result
    }

    fn flush_copies(
        &mut self,
        cb: vk::CommandBuffer,
        staging: &Allocation,
        regions: &[Allocation],
        pending: &mut Vec<(usize, vk::BufferCopy)>,
    ) -> Result<(), BackendError> {
        let d = &self.gpu.device;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: `cb` is not pending (the previous flush waited), so it can
        // be re-begun (the pool allows resets); the copy ranges are inside
        // both buffers.
        unsafe {
            d.begin_command_buffer(cb, &begin)
                .check("vkBeginCommandBuffer")?;
            for (region, copy) in pending.drain(..) {
                d.cmd_copy_buffer(cb, staging.buffer, regions[region].buffer, &[copy]);
            }
            d.end_command_buffer(cb).check("vkEndCommandBuffer")?;
        }
        let timeout = self.opts.timeout;
        self.cmds
            .submit_wait(&self.gpu.device, self.gpu.queue, cb, timeout)
            .map_err(|e| self.wait_failed(e, "the weight upload".into()))
    }

    /// Test only: runs a kernel that spins until a host-visible flag is set,
    /// with a fence wait bounded by `timeout`, to exercise the timeout path.
    /// Returns the timeout error (the backend is unusable afterwards); the
    /// flag is then set so the device can finish on its own.
    #[doc(hidden)]
    pub fn run_spin_test(&mut self, timeout: Duration) -> Result<(), BackendError> {
        self.usable()?;
        let buf = self.alloc("spin flag", 256, Placement::Host)?;
        // SAFETY: a fresh mapped allocation of 256 bytes, not in use.
        unsafe { buf.host_slice(0, 32) }.fill(0);
        let pipeline = self.pipes.get(&self.gpu.device, "spin")?;
        let cb = self.cmds.allocate(&self.gpu.device)?;
        let crumbs = Crumbs {
            buffer: buf.buffer,
            offset: 16,
            every: 1,
            marker: None,
        };
        let mut rec = Recorder::begin(
            &self.gpu.device,
            cb,
            self.pipes.layout,
            self.gpu.props.max_workgroups,
            crumbs,
        )?;
        let push = SpinPush {
            flag: buf.address,
            bound: 65535,
        };
        // 2^20 workgroups of 65535 polls: hours of spinning, seconds to
        // drain once the flag is set.
        rec.dispatch(
            pipeline,
            push.bytes(),
            1 << 20,
            "op 0 of 1 (spin test kernel)".into(),
        );
        let copy = vk::BufferCopy {
            src_offset: 0,
            dst_offset: 32,
            size: 4,
        };
        let labels = rec.finish(buf.buffer, buf.buffer, &[copy])?;
        let result = self
            .cmds
            .submit_wait(&self.gpu.device, self.gpu.queue, cb, timeout);
        match result {
            Ok(()) => {
                // SAFETY: the submit completed; nothing uses these now.
                unsafe {
                    self.cmds.free(&self.gpu.device, cb);
                    buf.destroy(&self.gpu.device);
                }
                Ok(())
            }
            Err(e) => {
                // SAFETY: the flag word is host-visible and coherent; the
                // kernel polls it with volatile loads.
                unsafe {
                    std::ptr::write_volatile(buf.mapped.expect("host memory").cast::<u32>(), 1);
                }
                // The buffer and command buffer are leaked: the device may
                // still be using them.
                Err(self.wait_failed(e, format!("{} of the spin test", labels[0])))
            }
        }
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        if self.stopped.is_some() {
            // A hung or lost device: waiting for idle could block forever
            // and destroying objects it may still use is undefined, so
            // everything is leaked.
            return;
        }
        self.release(true);
        // SAFETY: the device is idle (release waited) and every object made
        // from it is destroyed.
        unsafe {
            self.cmds.destroy(&self.gpu.device);
            self.pipes.destroy(&self.gpu.device);
            self.gpu.destroy();
        }
    }
}

/// Weight `id`'s bytes to upload: none for a weight another backend
/// computes with (`load_except`).
fn resident_bytes<'m>(model: &'m Model, kept_out: &[WeightId], id: WeightId) -> &'m [u8] {
    if kept_out.contains(&id) {
        &[]
    } else {
        model.weight_bytes(id)
    }
}

impl Backend for VulkanBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "vulkan",
            device: self.gpu.props.summary.clone(),
        }
    }

    fn load_except(
        &mut self,
        model: &Model,
        kv_layout: &KvLayout,
        kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        self.usable()?;
        self.release(true);
        self.allocations = 0;
        let table = &model.weights.table;
        let mut weights = Vec::with_capacity(table.len());
        for (id, w) in table.iter().enumerate() {
            let dw = DeviceWeight {
                name: w.name.clone(),
                ty: w.ty,
                address: 0,
                cols: w.cols,
                rows: w.rows,
                row_bytes: w.row_bytes(),
                experts: w.experts,
            };
            if kept_out.contains(&id) {
                // Stays at address 0, which `check_part` refuses.
            } else if w.rows > 1 {
                kernels::weight_kernel(&dw)?;
            } else if w.ty != QuantType::F32 {
                return Err(BackendError::UnsupportedWeight {
                    tensor: w.name.clone(),
                    ty: w.ty,
                });
            }
            weights.push(dw);
        }
        let max_region = self.opts.max_region.map_or(self.gpu.props.max_region, |m| {
            m.min(self.gpu.props.max_region)
        });
        let sources: Vec<&[u8]> = (0..table.len())
            .map(|id| resident_bytes(model, kept_out, id))
            .collect();
        let sizes: Vec<u64> = sources.iter().map(|s| s.len() as u64).collect();
        let split = split_regions(&sizes, WEIGHT_ALIGN, max_region)
            .map_err(|e| BackendError::Device(format!("weights do not fit the device: {e}")))?;
        let host = self.gpu.props.uma && !self.opts.force_staging;
        let mut regions = Vec::new();
        let mut failed = None;
        for &bytes in &split.region_bytes {
            match self.alloc("weights", bytes, Placement::Device { host }) {
                Ok(a) => regions.push(a),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let places: Vec<(usize, u64)> = split
            .assignments
            .iter()
            .map(|a| (a.region, a.offset))
            .collect();
        let uploaded = match failed {
            Some(e) => Err(e),
            None => self.upload(&sources, &regions, &places, progress),
        };
        let kv = uploaded.and_then(|()| {
            self.alloc(
                "KV cache",
                kv_layout.bytes() as u64,
                Placement::Device { host: false },
            )
        });
        let kv = match kv {
            Ok(kv) => kv,
            Err(e) => {
                if self.stopped.is_none() {
                    // SAFETY: the upload finished or never started.
                    unsafe {
                        for r in &regions {
                            r.destroy(&self.gpu.device);
                        }
                    }
                }
                return Err(e);
            }
        };
        for (id, (w, &(region, offset))) in weights.iter_mut().zip(&places).enumerate() {
            if !kept_out.contains(&id) {
                w.address = regions[region].address + offset;
            }
        }
        let rope_freqs = model.weights.rope_freqs.map(|id| {
            let bytes = model.weight_bytes(id);
            let v = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (id, v)
        });
        self.loaded = Some(Loaded {
            weights,
            regions,
            kv,
            kv_layout: kv_layout.clone(),
            n_vocab: model.config.n_vocab,
            weight_bytes: split.region_bytes.iter().sum(),
            rope_freqs,
        });
        Ok(())
    }

    fn reserve_parts(
        &mut self,
        largest: &Graph,
        arena_bytes: usize,
        exchange_bytes: usize,
    ) -> Result<(), BackendError> {
        self.usable()?;
        if self.loaded.is_none() {
            return Err(BackendError::NoModel);
        }
        if self.reserved.is_some() {
            // A second reservation replaces the first (and its graphs).
            self.release(false);
        }
        let max_tokens = largest.n_tokens;
        let step_bytes = StepInputLayout {
            n_tokens: max_tokens,
        }
        .bytes()
        .next_multiple_of(256) as u64;
        // The readback region holds the logits, or a part's imports and
        // exports (each 256-aligned).
        let logits_bytes = (largest.tensor(largest.logits).bytes() as u64)
            .max(exchange_bytes as u64 + STAGING_SLACK);
        let crumb_offset = step_bytes;
        let logits_offset = step_bytes + 256;
        let host_bytes = logits_offset + logits_bytes;
        if self.host.as_ref().is_some_and(|h| h.size < host_bytes) {
            let old = self.host.take().expect("checked above");
            // SAFETY: release() above or the upload waited for idle; no
            // recorded graph refers to the buffer any more.
            unsafe { old.destroy(&self.gpu.device) };
        }
        if self.host.is_none() {
            self.host = Some(self.alloc("step inputs and logits", host_bytes, Placement::Host)?);
        }
        let arena_bytes = arena_bytes.next_multiple_of(256) as u64;
        let scratch_bytes = kernels::scratch_bytes(largest) as u64;
        let arena = self.alloc(
            "activation arena and scratch",
            arena_bytes + scratch_bytes,
            Placement::Device { host: false },
        )?;
        self.reserved = Some(Reserved {
            arena,
            arena_bytes,
            scratch_bytes,
            max_tokens,
            crumb_offset,
            logits_offset,
            logits_bytes,
        });
        Ok(())
    }

    fn prepare_parts(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError> {
        self.record(graph, plan, parts)
    }

    fn execute_part(
        &mut self,
        id: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        let (g, host) = self.recorded(id)?;
        let p = g.parts.get(part).ok_or(BackendError::UnknownGraph(id))?;
        for s in &p.imports {
            let src = exchange.tensor(s.tensor);
            assert_eq!(src.len() * 4, s.bytes, "exchange sized by the split");
            // SAFETY: the range is inside the readback region (checked at
            // record), and no submit is pending.
            write_f32s(unsafe { host.host_slice(s.host, s.bytes) }, src);
        }
        self.run_part(id, part, inputs)?;
        let (g, host) = self.recorded(id)?;
        for s in &g.parts[part].exports {
            let dst = exchange.tensor_mut(s.tensor);
            // SAFETY: the submit finished and its last barrier made the
            // copy visible to the host; the range is inside the readback
            // region (checked at record).
            read_f32s(dst, unsafe { host.host_slice(s.host, s.bytes) });
        }
        Ok(())
    }

    fn allocations(&self) -> AllocationStats {
        AllocationStats {
            device_allocations: self.allocations,
            weight_bytes: self.loaded.as_ref().map_or(0, |l| l.weight_bytes),
            kv_bytes: self.loaded.as_ref().map_or(0, |l| l.kv.size),
            arena_bytes: self.reserved.as_ref().map_or(0, |r| r.arena_bytes),
            scratch_bytes: self.reserved.as_ref().map_or(0, |r| r.scratch_bytes),
        }
    }

    fn free_memory(&self) -> Option<FreeMemory> {
        // Asked before load, so nothing of ours is allocated yet; the
        // figure from opening the device is current enough.
        (self.gpu.free_at_open > 0).then_some(FreeMemory {
            free: self.gpu.free_at_open,
            holds_weights: true,
            weights_kept_out: 0,
        })
    }
}

impl VulkanBackend {
    /// The graph `id` and the host buffer its parts read back into.
    fn recorded(&self, id: GraphId) -> Result<(&Recorded, &Allocation), BackendError> {
        self.usable()?;
        let host = self.host.as_ref().ok_or(BackendError::NotReserved)?;
        let g = self
            .graphs
            .get(id.0)
            .ok_or(BackendError::UnknownGraph(id))?;
        Ok((g, host))
    }

    /// Records each of `parts` into a command buffer of its own: the copies
    /// of its imports into the arena, its ops, and the copies of its
    /// exports into the readback region.
    fn record(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError> {
        self.usable()?;
        let loaded = self.loaded.as_ref().ok_or(BackendError::NoModel)?;
        let r = self.reserved.as_ref().ok_or(BackendError::NotReserved)?;
        let host = self.host.as_ref().ok_or(BackendError::NotReserved)?;
        let rope_freqs = loaded
            .rope_freqs
            .as_ref()
            .filter(|(id, _)| graph.rope.freq_factors == Some(*id))
            .map(|(_, v)| v.as_slice());
        let reserved = kernels::Reserved {
            arena_bytes: r.arena_bytes,
            scratch_bytes: r.scratch_bytes,
            max_tokens: r.max_tokens,
            logits_bytes: r.logits_bytes,
        };
        kernels::check_graph(graph, plan, &reserved, rope_freqs)?;
        let mut layouts = Vec::with_capacity(parts.len());
        for part in parts {
            kernels::check_part(graph, part, &loaded.weights)?;
            layouts.push(stage_part(
                graph,
                plan,
                part,
                r.logits_offset,
                r.logits_bytes,
            )?);
        }
        let addrs = GraphAddresses {
            weights: &loaded.weights,
            arena: r.arena.address,
            scratch: r.arena.address + r.arena_bytes,
            kv: loaded.kv.address,
            kv_layout: &loaded.kv_layout,
            step: host.address,
            n_vocab: loaded.n_vocab,
        };
        let crumbs = Crumbs::new(host.buffer, r.crumb_offset, self.gpu.marker.as_ref());
        let (arena_buf, host_buf) = (r.arena.buffer, host.buffer);
        let mut recorded: Vec<RecordedPart> = Vec::with_capacity(parts.len());
        let mut failed = None;
        for (part, (imports, exports)) in parts.iter().zip(layouts) {
            let cb = match self.cmds.allocate(&self.gpu.device) {
                Ok(cb) => cb,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let labels = (|| {
                let mut rec = Recorder::begin(
                    &self.gpu.device,
                    cb,
                    self.pipes.layout,
                    self.gpu.props.max_workgroups,
                    crumbs,
                )?;
                let copies: Vec<vk::BufferCopy> = imports.iter().map(Staged::copy_in).collect();
                rec.copy_in(host_buf, arena_buf, &copies);
                let lowering = lowering(&self.pipes);
                let mut sink = Sink {
                    rec: &mut rec,
                    pipes: &mut self.pipes,
                    device: &self.gpu.device,
                };
                kernels::record_graph(&mut sink, &lowering, graph, plan, &addrs, part.ops.clone())?;
                let copies: Vec<vk::BufferCopy> = exports.iter().map(Staged::copy_out).collect();
                rec.finish(arena_buf, host_buf, &copies)
            })();
            match labels {
                Ok(labels) => recorded.push(RecordedPart {
                    cb,
                    labels,
                    crumb_every: crumbs.every,
                    imports,
                    exports,
                }),
                Err(e) => {
                    // SAFETY: never submitted.
                    unsafe { self.cmds.free(&self.gpu.device, cb) };
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            for p in recorded {
                // SAFETY: never submitted.
                unsafe { self.cmds.free(&self.gpu.device, p.cb) };
            }
            return Err(e);
        }
        // For measurement: how many dispatches a step of this graph replays
        // (`ROCMFORGE_VULKAN_LOG_DISPATCHES=all` lists them).
        if let Ok(log) = std::env::var("ROCMFORGE_VULKAN_LOG_DISPATCHES") {
            let n: usize = recorded.iter().map(|p| p.labels.len()).sum();
            eprintln!(
                "vulkan: graph of {} tokens records {n} dispatches in {} part(s)",
                graph.n_tokens,
                recorded.len()
            );
            if log == "all" {
                for l in recorded.iter().flat_map(|p| &p.labels) {
                    eprintln!("  {l}");
                }
            }
        }
        self.graphs.push(Recorded {
            parts: recorded,
            step: plan.step_inputs,
            n_tokens: graph.n_tokens,
        });
        Ok(GraphId(self.graphs.len() - 1))
    }

    /// Writes the step inputs, submits part `part` of graph `id` and waits
    /// for it (bounded).
    fn run_part(
        &mut self,
        id: GraphId,
        part: usize,
        inputs: &StepInputs,
    ) -> Result<(), BackendError> {
        self.usable()?;
        let r = self.reserved.as_ref().ok_or(BackendError::NotReserved)?;
        let (g, host) = self.recorded(id)?;
        let p = g.parts.get(part).ok_or(BackendError::UnknownGraph(id))?;
        assert_eq!(
            inputs.tokens.len(),
            g.n_tokens,
            "step size (checked by Session)"
        );
        // SAFETY: the host buffer is mapped, the step region and crumb word
        // lie inside it, and no submit is pending (every one is waited for).
        unsafe {
            let words = host.mapped.expect("host memory").cast::<u32>();
            let step = std::slice::from_raw_parts_mut(words, g.step.words());
            g.step.encode(inputs, step);
            host.host_slice(r.crumb_offset, 4).fill(0);
        }
        let (cb, timeout, crumb_offset) = (p.cb, self.opts.timeout, r.crumb_offset);
        if let Err(e) = self
            .cmds
            .submit_wait(&self.gpu.device, self.gpu.queue, cb, timeout)
        {
            let (g, host) = self.recorded(id)?;
            // SAFETY: mapped coherent word; a stale value only makes the
            // message less precise.
            let done = unsafe {
                std::ptr::read_volatile(
                    host.mapped
                        .expect("host memory")
                        .add(crumb_offset as usize)
                        .cast::<u32>(),
                )
            } as usize;
            let p = &g.parts[part];
            let of = match g.parts.len() {
                1 => String::new(),
                n => format!(" (part {} of {n})", part + 1),
            };
            let what = match in_flight(&p.labels, done, p.crumb_every) {
                Some(l) => format!("{l} of the {}-token graph{of}", g.n_tokens),
                None => format!("the end of the {}-token graph{of}", g.n_tokens),
            };
            return Err(self.wait_failed(e, what));
        }
        Ok(())
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
    fn dispatch(
        &mut self,
        kernel: &str,
        push: &[u8],
        groups: u32,
        label: String,
    ) -> Result<(), BackendError> {
        let p = self.pipes.get(self.device, kernel)?;
        self.rec.dispatch(p, push, groups, label);
        Ok(())
    }
}

/// What this device's pipelines offer, with the measurement switches
/// `ROCMFORGE_VULKAN_FUSE=0` (one dispatch per op),
/// `ROCMFORGE_VULKAN_MATVEC_INT=0` (the f32 decode mat-vec),
/// `ROCMFORGE_VULKAN_BIG_TILES=n` (128x128 matrix-core tiles for matmuls
/// of at least n of them; tests use 0) and
/// `ROCMFORGE_VULKAN_COOPMAT_PREFETCH=0` (no register prefetch).
fn lowering(pipes: &Pipelines) -> Lowering {
    let off = |var: &str| std::env::var(var).is_ok_and(|v| v == "0");
    let matrix = if !pipes.coopmat {
        kernels::MatrixTiles::Off
    } else {
        match std::env::var("ROCMFORGE_VULKAN_BIG_TILES")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            Some(min) => kernels::MatrixTiles::BigFrom(min),
            None => kernels::MatrixTiles::Auto,
        }
    };
    Lowering {
        fuse: !off("ROCMFORGE_VULKAN_FUSE"),
        int_matvec: !off("ROCMFORGE_VULKAN_MATVEC_INT"),
        int_dot_names: pipes.int_dot,
        matrix,
        matrix_prefetch: !off("ROCMFORGE_VULKAN_COOPMAT_PREFETCH"),
        q8_packed_blocks_per_group: 64,
    }
}
