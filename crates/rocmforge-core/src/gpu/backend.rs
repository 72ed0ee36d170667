//! [`GpuBackend`]: the one [`Backend`] implementation over every
//! [`GpuDevice`].
//!
//! Allocations per model: the weight region(s) (more than one only where a
//! device caps one allocation), the KV cache, the arena (activations, then
//! the scratch, then the device's copy of the step inputs) and one host
//! buffer: the staging buffer of the upload where a device stages, then the
//! host side of every step (step inputs, breadcrumbs, the readback region
//! for a part's imports and exports). Nothing is allocated per graph or per
//! token.
//!
//! A step of one part: the host writes the step inputs and the part's
//! imports into the host buffer, the device runs the recorded part (copies
//! in, launches, copies out) under one bounded wait, and the host reads the
//! exports. After a timeout or a lost device the backend refuses every
//! call, and its drop leaks everything instead of waiting.

use std::sync::atomic::{fence, Ordering};

use super::cost;
use super::device::{
    DeviceMemory, Frame, GpuDevice, HostCopy, HostMemory, Memory, Piece, Stall, Upload,
};
use super::options::{GpuOptions, LogLaunches};
use super::split;
use super::staging::{read_f32s, stage_part, write_f32s, Staged, STAGING_SLACK};
use super::{check_graph, check_part, record_graph, scratch_bytes, weight_kernel};
use super::{
    DeviceWeight, Dispatch, GraphAddresses, KernelSink, Lowering, MatrixTiles, Reserved as Limits,
};
use crate::backend::{
    AllocationStats, Backend, BackendError, BackendInfo, Cause, FreeMemory, GraphId, StepInputs,
};
use crate::graph::split::{Exchange, GraphPart};
use crate::graph::Graph;
use crate::model::{Model, WeightId, WEIGHT_ALIGN};
use crate::plan::{split_regions, ArenaPlan, KvLayout, RegionError, StepInputLayout};
use crate::quant::QuantType;

struct Loaded<B> {
    weights: Vec<DeviceWeight>,
    regions: Vec<B>,
    /// The KV cache, then split attention's partials from `partials_at`.
    kv: B,
    kv_layout: KvLayout,
    partials_at: u64,
    partials_bytes: u64,
    n_vocab: usize,
    weight_bytes: u64,
    /// Host copy of the rope frequency factors, for the parameter check.
    rope_freqs: Option<(WeightId, Vec<f32>)>,
}

/// The arena and the layout of the host buffer: step inputs at 0, then
/// the breadcrumbs, then the readback region.
struct Reserved<B> {
    arena: B,
    arena_bytes: u64,
    scratch_bytes: u64,
    /// The device's copy of the step inputs, in the arena allocation.
    step_offset: u64,
    max_tokens: usize,
    crumbs: u64,
    readback: u64,
    readback_bytes: u64,
}

struct Recorded<P> {
    parts: Vec<RecordedPart<P>>,
    step: StepInputLayout,
    n_tokens: usize,
}

/// A part: one or more submissions (runs of its ops, each estimated under
/// the submission budget), the first copying its imports in, the last its
/// exports out.
struct RecordedPart<P> {
    runs: Vec<Run<P>>,
    imports: Vec<Staged>,
    exports: Vec<Staged>,
}

/// One submission of a part.
struct Run<P> {
    part: P,
    labels: Vec<String>,
}

/// A [`Backend`] made of a [`GpuDevice`]: see the module doc.
pub struct GpuBackend<D: GpuDevice> {
    device: D,
    opts: GpuOptions,
    lowering: Lowering,
    host: Option<D::Host>,
    loaded: Option<Loaded<D::Buffer>>,
    reserved: Option<Reserved<D::Buffer>>,
    graphs: Vec<Recorded<D::Part>>,
    calls_at_load: usize,
    /// Set by a timeout or a lost device: every later call fails with
    /// [`BackendError::Unusable`] pointing at it.
    stopped: Option<Cause>,
}

/// Launches a replay of `parts` makes: one a label, over every submission.
fn launch_count<P>(parts: &[RecordedPart<P>]) -> usize {
    parts
        .iter()
        .flat_map(|p| &p.runs)
        .map(|r| r.labels.len())
        .sum()
}

/// The matrix tiles a device offers, with [`GpuOptions::big_tiles`]
/// applied where it has any.
pub(super) fn matrix_tiles(device: MatrixTiles, big_tiles: Option<usize>) -> MatrixTiles {
    match (device, big_tiles) {
        (MatrixTiles::Off, _) | (_, None) => device,
        (_, Some(min)) => MatrixTiles::BigFrom(min),
    }
}

impl<D: GpuDevice> GpuBackend<D> {
    pub fn new(device: D, opts: GpuOptions) -> GpuBackend<D> {
        let from_device = device.lowering();
        let lowering = Lowering {
            fuse: opts.fuse,
            int_matvec: opts.int_matvec,
            grouped_experts: from_device.grouped_experts && opts.grouped_experts,
            compute_units: opts.compute_units.unwrap_or(from_device.compute_units),
            matrix: matrix_tiles(from_device.matrix, opts.big_tiles),
            split_min: opts.split_min.unwrap_or(from_device.split_min),
            int_teams: opts.int_teams.unwrap_or(from_device.int_teams),
            ..from_device
        };
        GpuBackend {
            calls_at_load: device.allocation_calls(),
            device,
            opts,
            lowering,
            host: None,
            loaded: None,
            reserved: None,
            graphs: Vec::new(),
            stopped: None,
        }
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    /// What the lowering names on this device, after the switches.
    pub fn lowering(&self) -> Lowering {
        self.lowering
    }

    /// Test only: a kernel that spins until the host sets a flag, waited
    /// for at most `timeout`, exercises the timeout path. The backend is
    /// stopped afterwards.
    #[doc(hidden)]
    pub fn run_spin_test(&mut self, timeout: std::time::Duration) -> Result<(), BackendError> {
        let r = self.ready().and_then(|()| {
            let spun = self.device.spin(timeout);
            spun.map_err(|s| self.stalled(s, "op 0 of 1 (spin test kernel) of the spin test"))
        });
        self.note(r)
    }

    fn ready(&self) -> Result<(), BackendError> {
        if let Some(first) = &self.stopped {
            return Err(BackendError::unusable(first));
        }
        self.device.make_current()
    }

    /// Stops the backend on a fatal error; passes every result through.
    fn note<T>(&mut self, r: Result<T, BackendError>) -> Result<T, BackendError> {
        if let Err(e) = &r {
            if e.is_fatal() && self.stopped.is_none() {
                self.stopped = Some(Cause::new(e.clone()));
                self.device.abandon();
            }
        }
        r
    }

    /// The error for a failed wait on `what`, with the device's hint.
    fn stalled(&self, s: Stall, what: &str) -> BackendError {
        match self.device.stall_hint() {
            Some(hint) => s.error(format!("{what}; {hint}")),
            None => s.error(what),
        }
    }

    /// Waits for the device, then frees the graphs and the reservation,
    /// and with `model_too` the model and the host buffer.
    fn release(&mut self, model_too: bool) -> Result<(), BackendError> {
        let idle = self.device.idle(self.opts.timeout);
        idle.map_err(|s| self.stalled(s, "the work queued before freeing"))?;
        // SAFETY: the device is idle and the fields are emptied, so nothing
        // freed here is submitted again.
        unsafe {
            for run in self
                .graphs
                .drain(..)
                .flat_map(|g| g.parts)
                .flat_map(|p| p.runs)
            {
                self.device.free_part(run.part);
            }
            if let Some(r) = self.reserved.take() {
                self.device.free(r.arena);
            }
            if model_too {
                if let Some(l) = self.loaded.take() {
                    for r in l.regions {
                        self.device.free(r);
                    }
                    self.device.free(l.kv);
                }
                if let Some(h) = self.host.take() {
                    self.device.free_host(h);
                }
            }
        }
        Ok(())
    }

    fn load_model(
        &mut self,
        model: &Model,
        kv_layout: &KvLayout,
        kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        self.ready()?;
        self.release(true)?;
        self.calls_at_load = self.device.allocation_calls();
        let weights = device_weights(model, kept_out)?;
        let resident = |id: WeightId| !kept_out.contains(&id);
        let table = &model.weights.table;
        let sizes: Vec<u64> = (0..table.len())
            .map(|id| if resident(id) { table[id].n_bytes } else { 0 })
            .collect();
        let cap = self.device.max_region();
        let max_region = self.opts.max_region.map_or(cap, |m| m.min(cap));
        let split = split_regions(&sizes, WEIGHT_ALIGN, max_region).map_err(|e| match e {
            RegionError::TooLarge { index, bytes, max } if max < cap => BackendError::bad_option(
                "ROCMFORGE_GPU_MAX_REGION",
                max,
                format!(
                    "tensor '{}' needs {bytes} bytes, more than one weight region may hold",
                    table[index].name
                ),
            ),
            RegionError::TooLarge { index, bytes, max } => BackendError::unsupported(
                "tensor size",
                format!(
                    "tensor '{}' needs {bytes} bytes, more than the device's largest allocation ({max} bytes)",
                    table[index].name
                ),
            ),
            RegionError::Alignment(_) => BackendError::unsupported("weight alignment", e.to_string()),
        })?;
        let mut regions = Vec::with_capacity(split.region_bytes.len());
        for &bytes in &split.region_bytes {
            match self.device.alloc("weights", bytes, Memory::Weights) {
                Ok(r) => regions.push(r),
                Err(e) => {
                    // SAFETY: nothing was queued that uses them.
                    unsafe { regions.into_iter().for_each(|r| self.device.free(r)) };
                    return Err(e);
                }
            }
        }
        let pieces: Vec<Piece> = (0..table.len())
            .filter(|&id| resident(id))
            .map(|id| Piece {
                name: &table[id].name,
                bytes: model.weight_bytes(id),
                region: split.assignments[id].region,
                offset: split.assignments[id].offset,
            })
            .collect();
        let timeout = self.opts.timeout;
        // SAFETY: split_regions placed every piece inside its region, and
        // nothing is queued (released above).
        let uploaded = unsafe {
            (self.device).upload(
                &mut self.host,
                Upload {
                    regions: &regions,
                    pieces: &pieces,
                    timeout,
                    progress,
                },
            )
        };
        // Split decode attention's partials share the cache's allocation
        // (one allocation call fewer), sized for every graph up front.
        let partials_at = (kv_layout.bytes() as u64).next_multiple_of(256);
        let c = &model.config;
        let cus = self.lowering.compute_units;
        let partials_bytes = split::partials_bound(c.n_head, c.head_dim, cus) as u64;
        let kv = uploaded.and_then(|()| {
            self.device
                .alloc("KV cache", partials_at + partials_bytes, Memory::KvCache)
        });
        let kv = match kv {
            Ok(kv) => kv,
            Err(e) => {
                // Queued copies finish before the regions go; a stalled
                // device leaks them instead (it may still write them).
                if !e.is_fatal() && self.device.idle(timeout).is_ok() {
                    // SAFETY: idle, and nothing else refers to the regions.
                    unsafe { regions.into_iter().for_each(|r| self.device.free(r)) };
                }
                return Err(e);
            }
        };
        let mut weights = weights;
        for (id, w) in weights.iter_mut().enumerate() {
            if resident(id) {
                let a = split.assignments[id];
                w.address = regions[a.region].address() + a.offset;
            }
        }
        let rope_freqs = model.weights.rope_freqs.map(|id| {
            let v = (model.weight_bytes(id).chunks_exact(4))
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (id, v)
        });
        self.loaded = Some(Loaded {
            weights,
            regions,
            kv,
            kv_layout: kv_layout.clone(),
            partials_at,
            partials_bytes,
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
        self.ready()?;
        if self.loaded.is_none() {
            return Err(BackendError::NoModel);
        }
        // A second reservation replaces the first, and its graphs.
        self.release(false)?;
        let max_tokens = largest.n_tokens;
        let step_bytes = (4 * StepInputLayout::bound_words(max_tokens, largest.attention.n_head))
            .next_multiple_of(256) as u64;
        // The readback region holds the logits, or a part's imports and
        // exports (each 256-aligned).
        let readback_bytes = (largest.tensor(largest.logits).bytes() as u64)
            .max(exchange_bytes as u64 + STAGING_SLACK);
        let crumbs = step_bytes;
        let readback = crumbs + (self.device.crumb_bytes() as u64).next_multiple_of(256);
        let host_bytes = readback + readback_bytes;
        if let Some(old) = self.host.take_if(|h| h.bytes() < host_bytes) {
            // SAFETY: idle (release above), and no recorded part is left.
            unsafe { self.device.free_host(old) };
        }
        if self.host.is_none() {
            let what = "step inputs and readback";
            self.host = Some(self.device.alloc_host(what, host_bytes)?);
        }
        let arena_bytes = arena_bytes.next_multiple_of(256) as u64;
        let scratch_bytes = scratch_bytes(largest).next_multiple_of(256) as u64;
        let arena = self.device.alloc(
            "activation arena and scratch",
            arena_bytes + scratch_bytes + step_bytes,
            Memory::Arena,
        )?;
        self.reserved = Some(Reserved {
            arena,
            arena_bytes,
            scratch_bytes,
            step_offset: arena_bytes + scratch_bytes,
            max_tokens,
            crumbs,
            readback,
            readback_bytes,
        });
        let host = self.host.as_ref().expect("allocated above");
        self.device.host_ready(host, crumbs, self.opts.timeout)
    }

    /// Records each of `parts` for replay on its own.
    fn record(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError> {
        self.ready()?;
        let loaded = self.loaded.as_ref().ok_or(BackendError::NoModel)?;
        let r = self.reserved.as_ref().ok_or(BackendError::NotReserved)?;
        let host = self.host.as_ref().ok_or(BackendError::NotReserved)?;
        let rope_freqs = (loaded.rope_freqs.as_ref())
            .filter(|(id, _)| graph.rope.freq_factors == Some(*id))
            .map(|(_, v)| v.as_slice());
        let limits = Limits {
            arena_bytes: r.arena_bytes,
            scratch_bytes: r.scratch_bytes,
            max_tokens: r.max_tokens,
            logits_bytes: r.readback_bytes,
        };
        check_graph(graph, plan, &limits, rope_freqs)?;
        let mut staged = Vec::with_capacity(parts.len());
        for part in parts {
            check_part(graph, part, &loaded.weights)?;
            staged.push(stage_part(graph, plan, part, r.readback, r.readback_bytes)?);
        }
        let base = r.arena.address();
        let addrs = GraphAddresses {
            weights: &loaded.weights,
            arena: base,
            scratch: base + r.arena_bytes,
            kv: loaded.kv.address(),
            kv_layout: &loaded.kv_layout,
            partials: loaded.kv.address() + loaded.partials_at,
            partials_bytes: loaded.partials_bytes,
            step: base + r.step_offset,
            n_vocab: loaded.n_vocab,
        };
        // Kernels read the step inputs from the device's copy.
        let step_in = HostCopy {
            host: 0,
            arena: r.step_offset,
            bytes: plan.step_inputs.bytes(),
        };
        let seconds = cost::op_seconds(
            graph,
            &loaded.weights,
            &loaded.kv_layout,
            self.device.rates(),
        );
        let budget = self.opts.submit_budget.as_secs_f64();
        let mut recorded: Vec<RecordedPart<D::Part>> = Vec::with_capacity(parts.len());
        for (part, (imports, exports)) in parts.iter().zip(staged) {
            let copies_in: Vec<HostCopy> = std::iter::once(step_in)
                .chain(imports.iter().map(host_copy))
                .filter(|c| c.bytes > 0)
                .collect();
            let copies_out: Vec<HostCopy> = (exports.iter().map(host_copy))
                .filter(|c| c.bytes > 0)
                .collect();
            let cuts = cost::segments(part.ops.clone(), &seconds, budget);
            let mut runs = Vec::with_capacity(cuts.len());
            for (k, ops) in cuts.iter().enumerate() {
                let frame = Frame {
                    arena: &r.arena,
                    host,
                    copies_in: if k == 0 { &copies_in } else { &[] },
                    copies_out: if k + 1 == cuts.len() {
                        &copies_out
                    } else {
                        &[]
                    },
                    crumbs: r.crumbs,
                };
                let (lowering, skip) = (&self.lowering, self.opts.skip_launches.as_deref());
                let mut labels = Vec::new();
                let done = self.device.record(&frame, &mut |sink| {
                    let mut sink = Labelled {
                        inner: sink,
                        labels: &mut labels,
                        skip,
                    };
                    record_graph(&mut sink, lowering, graph, plan, &addrs, ops.clone())
                });
                match done {
                    Ok(part) => runs.push(Run { part, labels }),
                    Err(e) => {
                        let made = recorded.into_iter().flat_map(|p| p.runs).chain(runs);
                        // SAFETY: never submitted.
                        unsafe { made.for_each(|run| self.device.free_part(run.part)) };
                        return Err(e);
                    }
                }
            }
            recorded.push(RecordedPart {
                runs,
                imports,
                exports,
            });
        }
        self.log(graph, &recorded);
        self.graphs.push(Recorded {
            parts: recorded,
            step: plan.step_inputs,
            n_tokens: graph.n_tokens,
        });
        Ok(GraphId(self.graphs.len() - 1))
    }

    /// For measurement: how many launches a step of this graph replays.
    fn log(&self, graph: &Graph, parts: &[RecordedPart<D::Part>]) {
        if self.opts.log_launches == LogLaunches::Off {
            return;
        }
        let runs: Vec<&Run<D::Part>> = parts.iter().flat_map(|p| &p.runs).collect();
        let n = launch_count(parts);
        let how = runs.first().and_then(|r| self.device.describe(&r.part));
        eprintln!(
            "{}: graph of {} tokens records {n} launches in {} part(s), {} submission(s){}",
            D::NAME,
            graph.n_tokens,
            parts.len(),
            runs.len(),
            how.map_or(String::new(), |h| format!(", {h}"))
        );
        if self.opts.log_launches == LogLaunches::All {
            runs.iter()
                .flat_map(|r| &r.labels)
                .for_each(|l| eprintln!("  {l}"));
        }
    }

    /// Runs part `part` of graph `id`: see the module doc.
    fn run(
        &mut self,
        id: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        self.ready()?;
        let r = self.reserved.as_ref().ok_or(BackendError::NotReserved)?;
        let host = self.host.as_ref().ok_or(BackendError::NotReserved)?;
        let g = self
            .graphs
            .get(id.0)
            .ok_or(BackendError::UnknownGraph(id))?;
        let p = g.parts.get(part).ok_or(BackendError::UnknownGraph(id))?;
        assert_eq!(
            inputs.tokens.len(),
            g.n_tokens,
            "step size (checked by Session)"
        );
        let base = host.host_ptr().as_ptr();
        let crumb_bytes = self.device.crumb_bytes();
        // SAFETY: the step words, the crumb area and the staged ranges lie
        // inside the host buffer (laid out at reserve, the staged ranges
        // checked by stage_part at record), and no submit is pending: every
        // one is waited for.
        unsafe {
            let words = std::slice::from_raw_parts_mut(base.cast::<u32>(), g.step.words());
            g.step.encode(inputs, words);
            for s in &p.imports {
                let src = exchange.tensor(s.tensor);
                assert_eq!(src.len() * 4, s.bytes, "exchange sized by the split");
                let dst = std::slice::from_raw_parts_mut(base.add(s.host as usize), s.bytes);
                write_f32s(dst, src);
            }
        }
        for (k, run) in p.runs.iter().enumerate() {
            // SAFETY: inside the host buffer (laid out at reserve); no
            // submit is pending.
            unsafe { std::ptr::write_bytes(base.add(r.crumbs as usize), 0, crumb_bytes) };
            // SAFETY: recorded against this arena and host buffer, both
            // live; nothing else is queued.
            let ran = unsafe { (self.device).submit(&run.part, &r.arena, host, self.opts.timeout) };
            let Err(stall) = ran else { continue };
            let crumbs: Vec<u8> = (0..crumb_bytes)
                // SAFETY: inside the crumb area; the device may still write
                // it, hence the volatile reads (a stale byte only makes the
                // message less precise).
                .map(|i| unsafe { std::ptr::read_volatile(base.add(r.crumbs as usize + i)) })
                .collect();
            let mut how: Vec<String> = self.device.describe(&run.part).into_iter().collect();
            if g.parts.len() > 1 {
                how.push(format!("part {} of {}", part + 1, g.parts.len()));
            }
            if p.runs.len() > 1 {
                how.push(format!("submission {} of {}", k + 1, p.runs.len()));
            }
            let how = if how.is_empty() {
                String::new()
            } else {
                format!(" ({})", how.join(", "))
            };
            let window = in_flight(&run.labels, self.device.in_flight(&run.part, &crumbs));
            let what = format!("{window} of the {}-token graph{how}", g.n_tokens);
            return Err(self.stalled(stall, &what));
        }
        fence(Ordering::Acquire);
        for s in &p.exports {
            // SAFETY: the submit completed, its copies are visible to the
            // host, and the range lies inside the host buffer.
            let src = unsafe { std::slice::from_raw_parts(base.add(s.host as usize), s.bytes) };
            read_f32s(exchange.tensor_mut(s.tensor), src);
        }
        Ok(())
    }
}

impl<D: GpuDevice> Drop for GpuBackend<D> {
    fn drop(&mut self) {
        // A hung or lost device: waiting could block forever and freeing
        // what it may still use is undefined, so everything is leaked.
        if self.stopped.is_some() || self.device.make_current().is_err() {
            self.device.abandon();
            return;
        }
        if self.release(true).is_err() {
            self.device.abandon();
        }
    }
}

impl<D: GpuDevice> Backend for GpuBackend<D> {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: D::NAME,
            device: self.device.summary(),
        }
    }

    fn load_except(
        &mut self,
        model: &Model,
        kv: &KvLayout,
        kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        if kv.n_seq > self.max_sequences() {
            return Err(BackendError::unsupported(
                "KV cache",
                format!(
                    "{} sequences: the GPU kernels run one sequence a step so far",
                    kv.n_seq
                ),
            ));
        }
        let r = self.load_model(model, kv, kept_out, progress);
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
        let r = self.record(graph, plan, parts);
        self.note(r)
    }

    fn execute_part(
        &mut self,
        graph: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        let r = self.run(graph, part, inputs, exchange);
        self.note(r)
    }

    fn max_sequences(&self) -> usize {
        1
    }

    fn launches(&self, id: GraphId) -> Option<usize> {
        Some(launch_count(&self.graphs.get(id.0)?.parts))
    }

    fn allocations(&self) -> AllocationStats {
        AllocationStats {
            device_allocations: self.device.allocation_calls() - self.calls_at_load,
            weight_bytes: self.loaded.as_ref().map_or(0, |l| l.weight_bytes),
            kv_bytes: self.loaded.as_ref().map_or(0, |l| l.kv.bytes()),
            arena_bytes: self.reserved.as_ref().map_or(0, |r| r.arena_bytes),
            scratch_bytes: self.reserved.as_ref().map_or(0, |r| r.scratch_bytes),
        }
    }

    fn free_memory(&self) -> Option<FreeMemory> {
        self.device.free_memory().map(|free| FreeMemory {
            free,
            holds_weights: true,
            weights_kept_out: 0,
        })
    }
}

/// The model's weights as the lowering sees them, at address 0 until
/// placed. A weight another backend computes with stays at 0, which
/// `check_part` refuses.
fn device_weights(model: &Model, kept_out: &[WeightId]) -> Result<Vec<DeviceWeight>, BackendError> {
    let mut weights = Vec::with_capacity(model.weights.table.len());
    for (id, w) in model.weights.table.iter().enumerate() {
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
        if kept_out.contains(&id) {
        } else if w.rows > 1 {
            weight_kernel(&dw)?;
        } else if w.ty != QuantType::F32 {
            return Err(BackendError::UnsupportedWeight {
                tensor: w.name.clone(),
                ty: w.ty,
            });
        }
        weights.push(dw);
    }
    Ok(weights)
}

fn host_copy(s: &Staged) -> HostCopy {
    HostCopy {
        host: s.host,
        arena: s.arena,
        bytes: s.bytes,
    }
}

/// Keeps each launch's label (for timeout messages and logs) and leaves
/// out empty and skipped launches before the device records them, so the
/// labels are the device's launches, in order.
struct Labelled<'a, 's> {
    inner: &'a mut dyn KernelSink,
    labels: &'a mut Vec<String>,
    skip: Option<&'s str>,
}

impl KernelSink for Labelled<'_, '_> {
    fn launch(&mut self, d: Dispatch) -> Result<(), BackendError> {
        if d.groups == 0 || self.skip.is_some_and(|s| d.label.contains(s)) {
            return Ok(());
        }
        self.inner.launch(d)?;
        self.labels.push(d.label.to_owned());
        Ok(())
    }
}

/// The launches in flight when a part stopped, from the device's reading
/// of its breadcrumbs, or all of them without breadcrumbs.
fn in_flight(labels: &[String], at: Option<super::device::InFlight>) -> String {
    let n = labels.len();
    let Some(at) = at else {
        return format!("one of its {n} launches (no breadcrumbs on this device)");
    };
    let first = at.done;
    if first >= n {
        return format!("the copies after all {n} launches");
    }
    let last = (first + at.window.max(1)).min(n) - 1;
    if last == first {
        format!("launch {} of {n}, {}", first + 1, labels[first])
    } else {
        format!(
            "launches {}-{} of {n}, from {} to {}",
            first + 1,
            last + 1,
            labels[first],
            labels[last]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::device::InFlight;

    #[test]
    fn breadcrumbs_name_the_window_in_flight() {
        let labels: Vec<String> = (0..70).map(|i| format!("op {i} of 70 (x)")).collect();
        let at = |done, window| Some(InFlight { done, window });
        assert_eq!(
            in_flight(&labels, at(0, 32)),
            "launches 1-32 of 70, from op 0 of 70 (x) to op 31 of 70 (x)"
        );
        assert_eq!(
            in_flight(&labels, at(64, 32)),
            "launches 65-70 of 70, from op 64 of 70 (x) to op 69 of 70 (x)"
        );
        assert_eq!(
            in_flight(&labels, at(70, 32)),
            "the copies after all 70 launches"
        );
        assert_eq!(
            in_flight(&labels[..1], at(0, 32)),
            "launch 1 of 1, op 0 of 70 (x)"
        );
        assert_eq!(
            in_flight(&labels, at(5, 1)),
            "launch 6 of 70, op 5 of 70 (x)"
        );
        assert_eq!(
            in_flight(&labels[..5], None),
            "one of its 5 launches (no breadcrumbs on this device)"
        );
    }
}
