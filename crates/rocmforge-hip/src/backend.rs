//! `HipBackend`: the [`Backend`] implementation.
//!
//! Allocations per model, each one call counted by hip-sys: the weight
//! region (more only where `max_region` forces a split), the pinned
//! staging buffer (reused for every step's host side), the KV cache, and the
//! activation arena holding the scratch and the device copy of the step
//! inputs too. Nothing is allocated per graph or per token; the pinned
//! buffer is replaced once, at `reserve`, only if the logits of the largest
//! graph do not fit it.
//!
//! A step: the step inputs are written into pinned memory and copied to the
//! device, the graph replays (one `hipGraphLaunch`, or its launches), the
//! logits are copied back into pinned memory, and an event after all of it
//! is polled against the deadline. After a timeout or a lost device the
//! backend refuses every call, and its drop leaks everything instead of
//! waiting on a GPU that may never answer.

use std::ffi::c_void;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use hip_sys::{Event, Flavor, HipError, Runtime, Stream};
use rocmforge_core::backend::{
    AllocationStats, Backend, BackendError, BackendInfo, FreeMemory, GraphId, StepInputs,
};
use rocmforge_core::gpu::push::SpinPush;
use rocmforge_core::gpu::staging::{read_f32s, stage_part, Staged, STAGING_SLACK};
use rocmforge_core::gpu::{self as lower, DeviceWeight, GraphAddresses, Lowering, MatrixTiles};
use rocmforge_core::graph::split::{Exchange, GraphPart};
use rocmforge_core::graph::Graph;
use rocmforge_core::model::{Model, WeightId, WEIGHT_ALIGN};
use rocmforge_core::plan::{split_regions, ArenaPlan, KvLayout, StepInputLayout};
use rocmforge_core::quant::QuantType;

use crate::commands::{causes, wait, Recorded, Recorder, Replay, Stalled, WaitError, CRUMB_BYTES};
use crate::device::Device;
use crate::error::Hip;
use crate::memory::{DeviceBuffer, Piece, Pinned, Uploader};
use crate::modules::Kernels;

/// Default bound on every wait for the device.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of the pinned staging buffer weights are uploaded through.
pub const DEFAULT_STAGING_BYTES: usize = 64 << 20;

/// How to open the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HipOptions {
    /// Device ordinal (`--device N`); `None` takes the first.
    pub device: Option<usize>,
    /// Bound on every wait for the device.
    pub timeout: Duration,
    /// Replay graphs as captured hipGraphs (else launch by launch).
    pub graphs: bool,
    /// Cap on one weight allocation, below the device's memory (tests
    /// splitting).
    pub max_region: Option<u64>,
    /// Bytes of the pinned staging buffer (tests chunked uploads).
    pub staging_bytes: usize,
    /// Breadcrumbs (a 1-byte memset into pinned memory every 32 launches)
    /// so a timeout names the launches in flight; where the runtime refuses
    /// such memsets they are left out on their own.
    pub crumbs: bool,
}

impl Default for HipOptions {
    fn default() -> Self {
        HipOptions {
            device: None,
            timeout: DEFAULT_TIMEOUT,
            graphs: true,
            max_region: None,
            staging_bytes: DEFAULT_STAGING_BYTES,
            crumbs: true,
        }
    }
}

impl HipOptions {
    /// Defaults, then the environment: `ROCMFORGE_GPU_TIMEOUT` (seconds),
    /// `ROCMFORGE_HIP_GRAPHS=0` (direct launches), `ROCMFORGE_HIP_CRUMBS=0`
    /// (no breadcrumbs), `ROCMFORGE_HIP_MAX_REGION` and
    /// `ROCMFORGE_HIP_STAGING_BYTES` (bytes). The runtime itself is
    /// `ROCMFORGE_HIP_RUNTIME` (`hip` or unset: HIP; `cuda`: the CUDA driver).
    pub fn from_env() -> HipOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let d = HipOptions::default();
        HipOptions {
            device: None,
            timeout: var("ROCMFORGE_GPU_TIMEOUT")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map_or(d.timeout, Duration::from_secs_f64),
            graphs: var("ROCMFORGE_HIP_GRAPHS").is_none_or(|v| v != "0"),
            max_region: var("ROCMFORGE_HIP_MAX_REGION").and_then(|v| v.parse().ok()),
            staging_bytes: var("ROCMFORGE_HIP_STAGING_BYTES")
                .and_then(|v| v.parse().ok())
                .unwrap_or(d.staging_bytes),
            crumbs: var("ROCMFORGE_HIP_CRUMBS").is_none_or(|v| v != "0"),
        }
    }
}

struct Loaded {
    weights: Vec<DeviceWeight>,
    regions: Vec<DeviceBuffer>,
    kv: DeviceBuffer,
    kv_layout: KvLayout,
    n_vocab: usize,
    weight_bytes: u64,
    /// Host copy of the rope frequency factors, for the parameter check.
    rope_freqs: Option<(usize, Vec<f32>)>,
}

/// The arena allocation (arena, scratch, device step inputs) and the
/// layout of the pinned buffer's host side: step inputs, breadcrumbs,
/// logits.
struct Reserved {
    arena: DeviceBuffer,
    arena_bytes: u64,
    scratch_bytes: u64,
    /// Tokens of the largest graph, which sizes the step-input region.
    max_tokens: usize,
    /// The step inputs in both the arena allocation and the pinned buffer.
    step_offset: u64,
    /// Offsets in the pinned buffer (the step inputs are at 0).
    pinned_crumbs: usize,
    pinned_logits: usize,
    logits_bytes: usize,
}

pub struct HipBackend {
    rt: Runtime,
    dev: Device,
    kernels: Kernels,
    stream: Stream,
    /// Two, so the upload can wait for one half of the staging buffer while
    /// the other fills; a step uses the first.
    events: [Event; 2],
    opts: HipOptions,
    /// The one pinned buffer: staging at load, the steps' host side after.
    pinned: Option<Pinned>,
    loaded: Option<Loaded>,
    reserved: Option<Reserved>,
    /// Each graph's parts: one for a whole graph.
    graphs: Vec<Vec<Recorded>>,
    /// Memsets into pinned memory work here (found at `reserve`), so
    /// graphs carry breadcrumbs.
    crumbs: bool,
    /// The runtime's allocation calls before this model's.
    calls_at_load: usize,
    /// A failed capture was reported (once per backend).
    capture_warned: bool,
    /// Set by a timeout or a lost device: every later call fails with it.
    stopped: Option<String>,
}

impl HipBackend {
    pub fn new(opts: HipOptions) -> Result<HipBackend, BackendError> {
        let rt = Runtime::from_env().map_err(Hip)?;
        let dev = Device::open(&rt, opts.device)?;
        rt.set_device(dev.index).map_err(Hip)?;
        let mut kernels = Kernels::load(&rt, dev.image, &dev.target)?;
        let objects = (|| {
            let stream = rt.stream_create()?;
            let events = [rt.event_create()?, rt.event_create()?];
            Ok::<_, HipError>((stream, events))
        })();
        let (stream, events) = match objects {
            Ok(o) => o,
            Err(e) => {
                // SAFETY: nothing was launched; the module is not used again
                // (a stream or event made before the failure is leaked).
                let _ = unsafe { kernels.unload(&rt) };
                return Err(Hip(e).into());
            }
        };
        Ok(HipBackend {
            rt,
            dev,
            kernels,
            stream,
            events,
            opts,
            pinned: None,
            loaded: None,
            reserved: None,
            graphs: Vec::new(),
            crumbs: false,
            calls_at_load: 0,
            capture_warned: false,
            stopped: None,
        })
    }

    /// The one-line device summary, saying plainly which runtime runs it.
    pub fn device_summary(&self) -> String {
        let launches = if self.opts.graphs {
            "hipGraph replay"
        } else {
            "direct launches (ROCMFORGE_HIP_GRAPHS=0)"
        };
        format!("{} | {launches}", self.dev.summary)
    }

    /// HIP proper, or the CUDA driver standing in for it.
    pub fn flavor(&self) -> Flavor {
        self.dev.flavor
    }

    fn usable(&self) -> Result<(), BackendError> {
        match &self.stopped {
            Some(why) => Err(BackendError::Unusable(why.clone())),
            None => Ok(()),
        }
    }

    /// Makes the device current on the calling thread (HIP's current device
    /// and CUDA's current context are per thread, and a backend may be
    /// called from any).
    fn current(&self) -> Result<(), BackendError> {
        self.usable()?;
        self.rt.set_device(self.dev.index).map_err(Hip)?;
        Ok(())
    }

    /// Stops the backend on a fatal error; passes every error through.
    fn note<T>(&mut self, r: Result<T, BackendError>) -> Result<T, BackendError> {
        if let Err(e) = &r {
            if e.is_fatal() && self.stopped.is_none() {
                self.stopped = Some(e.to_string());
            }
        }
        r
    }

    /// The backend error for a failed wait: a timeout names what was in
    /// flight and the likely causes.
    fn stalled(&self, s: Stalled) -> BackendError {
        match s.error {
            WaitError::Timeout(waited) => BackendError::Timeout {
                what: format!("{}; {}", s.what, causes(self.dev.flavor)),
                waited,
            },
            WaitError::Hip(e) => Hip(e).into(),
        }
    }

    /// Waits (bounded) for everything queued so far: after a failed call
    /// in the middle of queuing, before freeing, before reusing pinned
    /// memory.
    fn drain(&self, what: &str) -> Result<(), BackendError> {
        // SAFETY: live event and stream.
        let queued = unsafe { self.rt.event_record(self.events[0], self.stream) };
        let waited = queued
            .map_err(WaitError::Hip)
            .and_then(|()| wait(&self.rt, self.events[0], self.opts.timeout));
        waited.map_err(|error| {
            self.stalled(Stalled {
                error,
                what: what.to_string(),
            })
        })
    }

    /// Frees graphs and the reservation, and with `model_too` the model's
    /// regions and the pinned buffer. Only with nothing queued (drained,
    /// or every step waited for).
    fn release(&mut self, model_too: bool) {
        // SAFETY: nothing is queued (the callers' contract) and none of it
        // is used again: the fields are emptied.
        unsafe {
            for g in self.graphs.drain(..).flatten() {
                g.destroy(&self.rt);
            }
            if let Some(r) = self.reserved.take() {
                let _ = r.arena.free(&self.rt);
            }
            if model_too {
                if let Some(l) = self.loaded.take() {
                    for r in &l.regions {
                        let _ = r.free(&self.rt);
                    }
                    let _ = l.kv.free(&self.rt);
                }
                if let Some(p) = self.pinned.take() {
                    let _ = p.free(&self.rt);
                }
            }
        }
    }

    fn load_model(
        &mut self,
        model: &Model,
        kv_layout: &KvLayout,
        kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        self.current()?;
        self.drain("the work queued before a new model")?;
        self.release(true);
        self.calls_at_load = self.rt.allocation_calls();
        let table = &model.weights.table;
        let mut weights = Vec::with_capacity(table.len());
        // A weight another backend computes with is neither placed nor
        // uploaded; it stays at address 0, which `check_part` refuses.
        let resident = |id: WeightId| !kept_out.contains(&id);
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
            // Matrices go through the kernels of their type; vectors (norm
            // weights, biases, rope factors) are read as f32.
            if !resident(id) {
            } else if w.rows > 1 {
                lower::weight_kernel(&dw)?;
            } else if w.ty != QuantType::F32 {
                return Err(BackendError::UnsupportedWeight {
                    tensor: w.name.clone(),
                    ty: w.ty,
                });
            }
            weights.push(dw);
        }
        // One region unless a cap (tests, or a device limit) forces more.
        let max_region = self.opts.max_region.map_or(self.dev.props.total_mem, |m| {
            m.min(self.dev.props.total_mem)
        });
        let sizes: Vec<u64> = table
            .iter()
            .enumerate()
            .map(|(id, w)| if resident(id) { w.n_bytes } else { 0 })
            .collect();
        let split = split_regions(&sizes, WEIGHT_ALIGN, max_region)
            .map_err(|e| BackendError::Device(format!("weights do not fit the device: {e}")))?;
        let staging = self.opts.staging_bytes.max(2 << 10);
        self.pinned = Some(Pinned::alloc(&self.rt, staging)?);
        let mut regions = Vec::with_capacity(split.region_bytes.len());
        let mut placed = Ok(());
        for &bytes in &split.region_bytes {
            match DeviceBuffer::alloc(&self.rt, "the weights", bytes) {
                Ok(r) => regions.push(r),
                Err(e) => {
                    placed = Err(e);
                    break;
                }
            }
        }
        let uploaded = placed.and_then(|()| {
            let pieces: Vec<Piece> = split
                .assignments
                .iter()
                .enumerate()
                .filter(|&(id, _)| resident(id))
                .map(|(id, a)| Piece {
                    name: &table[id].name,
                    bytes: model.weight_bytes(id),
                    dst: regions[a.region].ptr.offset(a.offset),
                })
                .collect();
            let up = Uploader {
                rt: &self.rt,
                stream: self.stream,
                events: self.events,
                staging: self.pinned.as_ref().expect("allocated above"),
                timeout: self.opts.timeout,
            };
            // SAFETY: every piece lies inside its region (split_regions
            // placed it there), nothing else is queued, and the staging
            // buffer is not in use.
            unsafe { up.upload(&pieces, progress) }.map_err(|s| self.stalled(s))
        });
        let kv = uploaded
            .and_then(|()| DeviceBuffer::alloc(&self.rt, "the KV cache", kv_layout.bytes() as u64));
        let kv = match kv {
            Ok(kv) => kv,
            Err(e) => {
                // A failed call may leave copies queued: they finish before
                // the regions go. A stalled upload (or drain) leaks the
                // regions and the pinned buffer instead: the GPU may still
                // be copying into them.
                if !e.is_fatal() && self.drain("the weight upload").is_ok() {
                    // SAFETY: nothing is queued, and nothing else refers to
                    // the regions.
                    unsafe {
                        for r in &regions {
                            let _ = r.free(&self.rt);
                        }
                    }
                }
                return Err(e);
            }
        };
        for (id, (w, a)) in weights.iter_mut().zip(&split.assignments).enumerate() {
            if resident(id) {
                w.address = regions[a.region].ptr.0 + a.offset;
            }
        }
        let rope_freqs = model.weights.rope_freqs.map(|id| {
            let v = model
                .weight_bytes(id)
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

    fn reserve_arena(
        &mut self,
        largest: &Graph,
        arena_bytes: usize,
        exchange_bytes: usize,
    ) -> Result<(), BackendError> {
        self.current()?;
        if self.loaded.is_none() {
            return Err(BackendError::NoModel);
        }
        self.drain("the work queued before the reservation")?;
        // A second reservation replaces the first, and its graphs.
        self.release(false);
        let max_tokens = largest.n_tokens;
        let step_bytes = StepInputLayout {
            n_tokens: max_tokens,
        }
        .bytes()
        .next_multiple_of(256);
        // The readback area holds the logits, or a part's imports and
        // exports.
        let logits_bytes = largest
            .tensor(largest.logits)
            .bytes()
            .max(exchange_bytes + STAGING_SLACK as usize);
        let pinned_crumbs = step_bytes;
        let pinned_logits = pinned_crumbs + CRUMB_BYTES;
        let host_bytes = pinned_logits + logits_bytes;
        if self.pinned.as_ref().is_none_or(|p| p.bytes < host_bytes) {
            // Only when all logits of a long batch outgrow the staging
            // buffer: one more pinned allocation, whatever the model.
            if let Some(old) = self.pinned.take() {
                // SAFETY: drained above; no recorded graph remains.
                let _ = unsafe { old.free(&self.rt) };
            }
            let bytes = host_bytes.max(self.opts.staging_bytes);
            self.pinned = Some(Pinned::alloc(&self.rt, bytes)?);
        }
        let arena_bytes = arena_bytes.next_multiple_of(256) as u64;
        let scratch_bytes = lower::scratch_bytes(largest).next_multiple_of(256) as u64;
        let arena = DeviceBuffer::alloc(
            &self.rt,
            "the activation arena",
            arena_bytes + scratch_bytes + step_bytes as u64,
        )?;
        self.reserved = Some(Reserved {
            arena,
            arena_bytes,
            scratch_bytes,
            max_tokens,
            step_offset: arena_bytes + scratch_bytes,
            pinned_crumbs,
            pinned_logits,
            logits_bytes,
        });
        self.crumbs = self.opts.crumbs && self.probe_crumbs()?;
        Ok(())
    }

    /// Whether a memset into pinned memory works on this runtime (one
    /// bounded wait). Breadcrumbs need it; without them a timeout names
    /// the graph but not the launch.
    fn probe_crumbs(&self) -> Result<bool, BackendError> {
        let (Some(r), Some(p)) = (&self.reserved, &self.pinned) else {
            return Ok(false);
        };
        let crumbs = p.device_ptr(r.pinned_crumbs);
        // SAFETY: the crumb area lies inside the pinned buffer, which
        // nothing else uses now (drained in `reserve`).
        let queued = unsafe { self.rt.memset_async(crumbs, 0, CRUMB_BYTES, self.stream) };
        match queued {
            Ok(()) => self.drain("the breadcrumb probe").map(|()| true),
            // Refused (pinned memory is not a memset target here).
            Err(HipError::Call { .. }) => Ok(false),
            Err(e) => Err(Hip(e).into()),
        }
    }

    /// Records each of `parts` of a planned graph for replay on its own.
    fn record_parts(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError> {
        self.current()?;
        let loaded = self.loaded.as_ref().ok_or(BackendError::NoModel)?;
        let r = self.reserved.as_ref().ok_or(BackendError::NotReserved)?;
        let pinned = self.pinned.as_ref().ok_or(BackendError::NotReserved)?;
        let rope_freqs = loaded
            .rope_freqs
            .as_ref()
            .filter(|(id, _)| graph.rope.freq_factors == Some(*id))
            .map(|(_, v)| v.as_slice());
        let reserved = lower::Reserved {
            arena_bytes: r.arena_bytes,
            scratch_bytes: r.scratch_bytes,
            max_tokens: r.max_tokens,
            logits_bytes: r.logits_bytes as u64,
        };
        lower::check_graph(graph, plan, &reserved, rope_freqs)?;
        let mut staged = Vec::with_capacity(parts.len());
        for part in parts {
            lower::check_part(graph, part, &loaded.weights)?;
            let at = r.pinned_logits as u64;
            staged.push(stage_part(graph, plan, part, at, r.logits_bytes as u64)?);
        }
        let base = r.arena.ptr.0;
        let addrs = GraphAddresses {
            weights: &loaded.weights,
            arena: base,
            scratch: base + r.arena_bytes,
            kv: loaded.kv.ptr.0,
            kv_layout: &loaded.kv_layout,
            step: base + r.step_offset,
            n_vocab: loaded.n_vocab,
        };
        let crumbs = self.crumbs.then(|| pinned.device_ptr(r.pinned_crumbs));
        let mut recorded = Vec::with_capacity(parts.len());
        for (part, (imports, exports)) in parts.iter().zip(staged) {
            let mut rec = Recorder {
                rt: &self.rt,
                kernels: &mut self.kernels,
                launches: Vec::new(),
            };
            let lowered =
                lower::record_graph(&mut rec, &lowering(), graph, plan, &addrs, part.ops.clone());
            if let Err(e) = lowered {
                // SAFETY: never replayed.
                unsafe { recorded.iter().for_each(|g: &Recorded| g.destroy(&self.rt)) };
                return Err(e);
            }
            let launches = rec.launches;
            // SAFETY: the stream is idle (every step is waited for) and not
            // capturing; the graph refers to the regions, the arena and the
            // pinned buffer, which outlive it (release destroys graphs
            // first).
            let replay =
                unsafe { Replay::new(&self.rt, self.stream, &launches, crumbs, self.opts.graphs) };
            recorded.push(Recorded {
                launches,
                replay,
                crumbs: self.crumbs,
                step: plan.step_inputs,
                imports,
                exports,
                n_tokens: graph.n_tokens,
            });
        }
        if let Some(Replay::Direct { why }) = recorded
            .iter()
            .map(|g| &g.replay)
            .find(|r| matches!(r, Replay::Direct { .. }))
        {
            if self.opts.graphs && !self.capture_warned {
                eprintln!("rocmforge: rocm: replaying launches one by one, slower: {why}");
                self.capture_warned = true;
            }
        }
        // For measurement: how many launches a step of this graph makes
        // (`ROCMFORGE_HIP_LOG_LAUNCHES=all` lists them).
        if let Ok(log) = std::env::var("ROCMFORGE_HIP_LOG_LAUNCHES") {
            for g in &recorded {
                eprintln!(
                    "rocm: graph of {} tokens records {} launches, {}",
                    graph.n_tokens,
                    g.launches.len(),
                    g.mode()
                );
                if log == "all" {
                    for l in &g.launches {
                        eprintln!("  {}", l.label);
                    }
                }
            }
        }
        self.graphs.push(recorded);
        Ok(GraphId(self.graphs.len() - 1))
    }

    /// Graph `id`'s part `part`.
    fn part(&self, id: GraphId, part: usize) -> Result<&Recorded, BackendError> {
        self.graphs
            .get(id.0)
            .and_then(|g| g.get(part))
            .ok_or(BackendError::UnknownGraph(id))
    }

    /// Runs part `part` of graph `id`: the step inputs and the part's
    /// imports (already in the pinned buffer) go to the device, the launches
    /// replay, the exports come back into the pinned buffer; one bounded
    /// wait.
    fn run_part(
        &mut self,
        id: GraphId,
        part: usize,
        inputs: &StepInputs,
    ) -> Result<(), BackendError> {
        self.current()?;
        let r = self.reserved.as_ref().ok_or(BackendError::NotReserved)?;
        let pinned = self.pinned.as_ref().ok_or(BackendError::NotReserved)?;
        let g = self.part(id, part)?;
        assert_eq!(
            inputs.tokens.len(),
            g.n_tokens,
            "step size (checked by Session)"
        );
        // SAFETY: the step words and the crumb area lie inside the pinned
        // buffer (sized at reserve for the largest graph; the step region
        // starts at 0, page-aligned), and no queued copy reads them: the
        // previous step was waited for.
        unsafe {
            let words = std::slice::from_raw_parts_mut(pinned.at(0).cast::<u32>(), g.step.words());
            g.step.encode(inputs, words);
            std::ptr::write_bytes(pinned.at(r.pinned_crumbs), 0, CRUMB_BYTES);
        }
        let step_dev = r.arena.ptr.offset(r.step_offset);
        // SAFETY: the copies stay inside the arena allocation and the
        // pinned buffer (checked against the reservation at prepare); the
        // replay's addresses all lie in live allocations; the event is
        // waited for before the host touches either buffer again.
        let queued = unsafe {
            let mut q =
                self.rt
                    .memcpy_htod_async(step_dev, pinned.at(0), g.step.bytes(), self.stream);
            for s in &g.imports {
                q = q.and_then(|()| {
                    self.rt.memcpy_htod_async(
                        r.arena.ptr.offset(s.arena),
                        pinned.at(s.host as usize),
                        s.bytes,
                        self.stream,
                    )
                });
            }
            q = q
                .and_then(|()| g.replay(&self.rt, self.stream, pinned.device_ptr(r.pinned_crumbs)));
            for s in &g.exports {
                q = q.and_then(|()| {
                    self.rt.memcpy_dtoh_async(
                        pinned.at(s.host as usize),
                        r.arena.ptr.offset(s.arena),
                        s.bytes,
                        self.stream,
                    )
                });
            }
            q.and_then(|()| self.rt.event_record(self.events[0], self.stream))
        };
        if let Err(e) = queued {
            // Part of the step may be queued: let it finish before the
            // host side is written again.
            self.drain("the step queued before a failed call")?;
            return Err(Hip(e).into());
        }
        if let Err(error) = wait(&self.rt, self.events[0], self.opts.timeout) {
            let crumbs: Vec<u8> = (0..CRUMB_BYTES)
                // SAFETY: inside the crumb area; the device may still write
                // it, hence the volatile reads (a stale byte only makes the
                // message less precise).
                .map(|i| unsafe { std::ptr::read_volatile(pinned.at(r.pinned_crumbs + i)) })
                .collect();
            let of = match self.graphs[id.0].len() {
                1 => String::new(),
                n => format!(", part {} of {n}", part + 1),
            };
            let what = format!(
                "{} of the {}-token graph ({}{of})",
                g.in_flight(&crumbs),
                g.n_tokens,
                g.mode()
            );
            return Err(self.stalled(Stalled { error, what }));
        }
        fence(Ordering::Acquire);
        Ok(())
    }

    /// Reads staged tensor `s` out of the pinned buffer.
    fn read_staged(&self, s: &Staged, dst: &mut [f32]) -> Result<(), BackendError> {
        let pinned = self.pinned.as_ref().ok_or(BackendError::NotReserved)?;
        assert_eq!(dst.len() * 4, s.bytes, "sizes checked by the caller");
        // SAFETY: the copy into the pinned buffer finished (its event
        // completed, `run_part`); the range lies inside it (checked at
        // record), and nothing writes it until the next step.
        let src = unsafe { std::slice::from_raw_parts(pinned.at(s.host as usize), s.bytes) };
        read_f32s(dst, src);
        Ok(())
    }

    fn execute_split(
        &mut self,
        id: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        let pinned = self.pinned.as_ref().ok_or(BackendError::NotReserved)?;
        for s in &self.part(id, part)?.imports {
            let src = exchange.tensor(s.tensor);
            assert_eq!(src.len() * 4, s.bytes, "exchange sized by the split");
            // SAFETY: the range lies inside the pinned buffer (checked at
            // record), and no queued copy reads it (every step is waited
            // for).
            let dst =
                unsafe { std::slice::from_raw_parts_mut(pinned.at(s.host as usize), s.bytes) };
            rocmforge_core::gpu::staging::write_f32s(dst, src);
        }
        self.run_part(id, part, inputs)?;
        for k in 0..self.part(id, part)?.exports.len() {
            let s = self.part(id, part)?.exports[k];
            self.read_staged(&s, exchange.tensor_mut(s.tensor))?;
        }
        Ok(())
    }

    /// Test only: launches the `spin` kernel, which polls a flag in pinned
    /// memory until the host sets it, and waits for it with the bounded
    /// wait every step uses. Returns the timeout error (the backend is
    /// stopped afterwards); the flag is then set, so the GPU finishes on its
    /// own and the process can exit cleanly.
    #[doc(hidden)]
    pub fn run_spin_test(&mut self, timeout: Duration) -> Result<(), BackendError> {
        let r = self.spin(timeout);
        self.note(r)
    }

    fn spin(&mut self, timeout: Duration) -> Result<(), BackendError> {
        self.current()?;
        let function = self.kernels.get(&self.rt, "spin")?;
        // flag[0]: set by the host; flag[1]: the kernel's poll count.
        let flag = Pinned::alloc(&self.rt, 64)?;
        let words = flag.at(0).cast::<u32>();
        // SAFETY: two aligned u32 inside the fresh allocation, unused yet.
        unsafe { std::ptr::write_bytes(words, 0, 2) };
        // Bounded only by the flag: u64::MAX polls outlast any test.
        let mut push = SpinPush {
            flag: flag.device_ptr(0).0,
            bound: u64::MAX,
        };
        let mut params: [*mut c_void; 1] = [(&mut push as *mut SpinPush).cast()];
        let block = lower::workgroup_size("spin").unwrap_or(1);
        // SAFETY: `spin(SpinPush)`: one by-value parameter; the kernel reads
        // flag[0] and writes flag[1], inside the pinned allocation, which is
        // freed only after the kernel is seen to finish (and leaked
        // otherwise).
        let launched = unsafe {
            self.rt.launch_kernel(
                function,
                [1, 1, 1],
                [block, 1, 1],
                0,
                self.stream,
                &mut params,
            )
        }
        .and_then(|()| {
            // SAFETY: live event and stream.
            unsafe { self.rt.event_record(self.events[0], self.stream) }
        });
        if let Err(e) = launched {
            // SAFETY: the launch (if queued) cannot end before the flag is
            // set; set it, then wait before freeing.
            unsafe { std::ptr::write_volatile(words, 1) };
            self.drain("the spin test")?;
            // SAFETY: nothing uses the flag any more.
            let _ = unsafe { flag.free(&self.rt) };
            return Err(Hip(e).into());
        }
        match wait(&self.rt, self.events[0], timeout) {
            Ok(()) => {
                // SAFETY: the kernel finished.
                let _ = unsafe { flag.free(&self.rt) };
                Ok(())
            }
            Err(error) => {
                // SAFETY: the flag word is pinned and mapped; the kernel
                // polls it with volatile loads. The allocation is leaked:
                // the kernel may still read it.
                unsafe { std::ptr::write_volatile(words, 1) };
                fence(Ordering::SeqCst);
                Err(self.stalled(Stalled {
                    error,
                    what: "launch 1 of 1, spin test kernel, of the spin test".into(),
                }))
            }
        }
    }
}

impl Drop for HipBackend {
    fn drop(&mut self) {
        // A hung or lost device: waiting could block forever and freeing
        // what it may still use is undefined, so everything is leaked.
        if self.stopped.is_some() || self.current().is_err() {
            return;
        }
        if self.drain("the work queued before the drop").is_err() {
            return;
        }
        self.release(true);
        // SAFETY: the stream is idle (drained) and nothing below is used
        // again. The device's primary context (CUDA mode) stays retained
        // until the process exits, as the CUDA runtime's does: a session
        // that opens the backend again then skips recreating it.
        unsafe {
            for e in self.events {
                let _ = self.rt.event_destroy(e);
            }
            let _ = self.rt.stream_destroy(self.stream);
            let _ = self.kernels.unload(&self.rt);
        }
    }
}

impl Backend for HipBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "rocm",
            device: self.device_summary(),
        }
    }

    fn load_except(
        &mut self,
        model: &Model,
        kv_layout: &KvLayout,
        kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        let r = self.load_model(model, kv_layout, kept_out, progress);
        self.note(r)
    }

    fn reserve_parts(
        &mut self,
        largest: &Graph,
        arena_bytes: usize,
        exchange_bytes: usize,
    ) -> Result<(), BackendError> {
        let r = self.reserve_arena(largest, arena_bytes, exchange_bytes);
        self.note(r)
    }

    fn prepare_parts(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError> {
        let r = self.record_parts(graph, plan, parts);
        self.note(r)
    }

    fn execute_part(
        &mut self,
        graph: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        let r = self.execute_split(graph, part, inputs, exchange);
        self.note(r)
    }

    fn allocations(&self) -> AllocationStats {
        AllocationStats {
            device_allocations: self.rt.allocation_calls() - self.calls_at_load,
            weight_bytes: self.loaded.as_ref().map_or(0, |l| l.weight_bytes),
            kv_bytes: self.loaded.as_ref().map_or(0, |l| l.kv.bytes),
            arena_bytes: self.reserved.as_ref().map_or(0, |r| r.arena_bytes),
            scratch_bytes: self.reserved.as_ref().map_or(0, |r| r.scratch_bytes),
        }
    }

    fn free_memory(&self) -> Option<FreeMemory> {
        // The device is current on this thread only after set_device; a
        // failed query skips the check rather than failing the load.
        self.rt.set_device(self.dev.index).ok()?;
        self.rt.mem_get_info().ok().map(|m| FreeMemory {
            free: m.free,
            holds_weights: true,
            weights_kept_out: 0,
        })
    }
}

/// What the HIP kernels offer: integer mat-vecs named `matvec_int_*` (the
/// prelude's `dot4` picks the instruction per target, so there are no
/// `_dot` variants) and 64×64 matrix-core tiles with register prefetch
/// (`matmul_cmps_*`), Q8-packed roundings one block per wave. Measurement
/// switches: `ROCMFORGE_HIP_FUSE=0` (one
/// launch per op), `ROCMFORGE_HIP_MATVEC_INT=0` (the f32 decode mat-vec).
fn lowering() -> Lowering {
    let off = |var: &str| std::env::var(var).is_ok_and(|v| v == "0");
    Lowering {
        fuse: !off("ROCMFORGE_HIP_FUSE"),
        int_matvec: !off("ROCMFORGE_HIP_MATVEC_INT"),
        int_dot_names: false,
        matrix: MatrixTiles::Small,
        matrix_prefetch: true,
        // kernels/ops_quantize.hip: one block per wave for the Q8-packed
        // roundings.
        q8_packed_blocks_per_group: 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_can_move_between_threads() {
        // It makes its device current on whichever thread calls it.
        fn check<T: Send>() {}
        check::<HipBackend>();
    }

    #[test]
    fn hip_lowering_names_the_hip_kernels() {
        let l = lowering();
        assert!(!l.int_dot_names, "HIP kernels have no _dot variants");
        assert_eq!(l.matrix, MatrixTiles::Small, "64x64 tiles: matmul_cmps_*");
        assert!(l.matrix_prefetch);
        assert_eq!(
            l.q8_packed_blocks_per_group, 2,
            "ops_quantize.hip's mapping"
        );
    }
}
