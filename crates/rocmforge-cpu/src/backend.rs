//! `CpuBackend`: the [`Backend`] implementation over host memory.

use rocmforge_core::backend::{
    AllocationStats, Backend, BackendError, BackendInfo, FreeMemory, GraphId, StepInputs,
};
use rocmforge_core::graph::fusion::matmul_groups;
use rocmforge_core::graph::split::{Exchange, GraphPart};
use rocmforge_core::graph::Graph;
use rocmforge_core::model::{Model, WeightId};
use rocmforge_core::plan::{ArenaPlan, KvLayout, StepInputLayout};

use crate::exec::{ScratchLayout, Step};
use crate::kernels::rope::{RopeMode, RopeTable};
use crate::memory::{available_host_memory, HostBuffer};
use crate::team::Team;
use crate::weights::MappedWeights;

struct Loaded {
    weights: MappedWeights,
    kv_layout: KvLayout,
    kv: HostBuffer,
}

struct Prepared {
    graph: Graph,
    plan: ArenaPlan,
    rope: RopeTable,
    /// The local layers' table (Gemma 3), if their frequencies differ.
    rope_local: Option<RopeTable>,
    /// Op ranges of matmuls that run as one phase (core's fusion groups).
    groups: Vec<std::ops::Range<usize>>,
    /// The parts this backend runs of the graph (one, the whole graph,
    /// unless it is split with another backend).
    parts: Vec<GraphPart>,
}

/// What `reserve` fixed: the work buffer's split into arena, scratch and the
/// step-input words.
#[derive(Clone, Copy, Debug, Default)]
struct Reservation {
    arena_bytes: usize,
    scratch_layout: ScratchLayout,
    /// Byte offset of the step-input region in the work buffer.
    step_offset: usize,
    step_words: usize,
}

/// Allocations per model load: the weight mapping, the region of repacked
/// weights (Q4_0 models on AVX2 machines), the KV cache, and one work buffer
/// holding the activation arena, the scratch (quantized activations,
/// per-thread attention scores) and the step-input region, sized once by
/// `reserve`.
pub struct CpuBackend {
    n_threads: usize,
    team: Team,
    repack: bool,
    loaded: Option<Loaded>,
    graphs: Vec<Prepared>,
    work: HostBuffer,
    reserved: Option<Reservation>,
    allocations: usize,
}

/// The most threads a CPU backend runs, as ggml's `GGML_MAX_N_THREADS`:
/// every step spawns its team and gives each member scratch, so an absurd
/// count (`--threads 100000`) would exhaust the process's threads or memory
/// instead of running.
pub const MAX_THREADS: usize = 512;

impl CpuBackend {
    /// As [`new`](CpuBackend::new), refusing thread counts above
    /// [`MAX_THREADS`] with an error the user can act on.
    pub fn try_new(n_threads: usize) -> Result<CpuBackend, BackendError> {
        if n_threads > MAX_THREADS {
            return Err(BackendError::bad_option(
                "--threads",
                n_threads,
                format!("the cpu backend runs at most {MAX_THREADS} (0 = one per core)"),
            ));
        }
        Ok(CpuBackend::new(n_threads))
    }

    /// `n_threads` 0 means one per available core. Counts above
    /// [`MAX_THREADS`] are the caller's mistake; [`try_new`](CpuBackend::try_new)
    /// checks them.
    pub fn new(n_threads: usize) -> CpuBackend {
        let n_threads = if n_threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            n_threads
        };
        CpuBackend {
            n_threads,
            team: Team::new(n_threads),
            repack: true,
            loaded: None,
            graphs: Vec::new(),
            work: HostBuffer::new(0).expect("empty buffer"),
            reserved: None,
            allocations: 0,
        }
    }

    /// Keeps every weight in file order, read from the mapping (no
    /// repacking at load); for comparisons and memory-tight hosts.
    pub fn without_repacking(mut self) -> CpuBackend {
        self.repack = false;
        self
    }

    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// How many weight matrices of the loaded model were repacked into the
    /// interleaved Q4_0 layout (see `kernels::quant_dot::q4_0x8`).
    pub fn interleaved_matrices(&self) -> usize {
        self.loaded.as_ref().map_or(0, |l| {
            l.weights.views.iter().filter(|v| v.interleaved).count()
        })
    }

    fn allocate(&mut self, what: &'static str, bytes: usize) -> Result<HostBuffer, BackendError> {
        self.allocations += 1;
        HostBuffer::new(bytes).ok_or(BackendError::OutOfMemory {
            what,
            bytes: bytes as u64,
        })
    }
}

impl CpuBackend {
    /// Runs part `k` of graph `id`: its imports in from `exchange`, its
    /// ops, its exports out to `exchange`.
    fn run_step(
        &mut self,
        id: GraphId,
        k: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        let loaded = self.loaded.as_mut().ok_or(BackendError::NoModel)?;
        let r = self.reserved.ok_or(BackendError::NotReserved)?;
        let p = self
            .graphs
            .get(id.0)
            .ok_or(BackendError::UnknownGraph(id))?;
        let g = &p.graph;
        let part = p.parts.get(k).ok_or(BackendError::UnknownGraph(id))?;
        let ops = part.ops.clone();
        let work = self.work.shared();
        // SAFETY: no team is running; the region is this backend's own and
        // `reserve` sized it for the largest graph.
        let region = unsafe { work.u32s(r.step_offset, p.plan.step_inputs.words()) };
        p.plan.step_inputs.encode(inputs, region);
        let step = Step {
            graph: g,
            plan: &p.plan,
            rope: &p.rope,
            rope_local: p.rope_local.as_ref(),
            groups: &p.groups,
            weights: &loaded.weights.views,
            kv_layout: &loaded.kv_layout,
            kv: loaded.kv.shared(),
            arena: work.sub(0, r.arena_bytes),
            scratch: work.sub(r.arena_bytes, r.scratch_layout.total(self.n_threads)),
            scratch_layout: r.scratch_layout,
            step_inputs: work.sub(r.step_offset, r.step_words * 4),
            next_chunk: Default::default(),
            ops,
        };
        for &t in &part.imports {
            let src = exchange.tensor(t);
            // SAFETY: no team is running; the tensor lies in the arena (the
            // plan was checked against the reservation).
            unsafe { step.arena.f32s(p.plan.offsets[t], src.len()) }.copy_from_slice(src);
        }
        self.team.run(|m, barrier| step.run(m, barrier));
        for &t in &part.exports {
            let dst = exchange.tensor_mut(t);
            // SAFETY: the team has finished; nothing else touches the
            // arena, and each export lies in it.
            let src = unsafe { step.arena.f32s(p.plan.offsets[t], dst.len()) };
            dst.copy_from_slice(src);
        }
        Ok(())
    }
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

impl Backend for CpuBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "cpu",
            device: format!("{} ({} threads)", cpu_name(), self.n_threads),
        }
    }

    fn load_except(
        &mut self,
        model: &Model,
        kv_layout: &KvLayout,
        // Every weight is read from the file's mapping, where only the
        // pages touched become resident: keeping one out costs nothing.
        _kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        self.graphs.clear();
        self.loaded = None;
        self.reserved = None;
        self.work = HostBuffer::new(0).expect("empty buffer");
        let weights = MappedWeights::load(model, self.repack, progress)?;
        // The mapping is the weight region; repacked weights are a second.
        self.allocations = 1 + usize::from(weights.has_repacked_region());
        let kv = self.allocate("KV cache", kv_layout.bytes())?;
        self.loaded = Some(Loaded {
            weights,
            kv_layout: kv_layout.clone(),
            kv,
        });
        Ok(())
    }

    fn reserve_parts(
        &mut self,
        largest: &Graph,
        arena_bytes: usize,
        // Imports and exports are copied straight from and to the arena,
        // which is host memory.
        _exchange_bytes: usize,
    ) -> Result<(), BackendError> {
        let loaded = self.loaded.as_ref().ok_or(BackendError::NoModel)?;
        let scratch_layout = ScratchLayout::for_graph(
            largest,
            &loaded.weights.views,
            loaded.kv_layout.n_ctx,
            self.n_threads,
        );
        let arena_bytes = arena_bytes.next_multiple_of(64);
        let step_offset = arena_bytes + scratch_layout.total(self.n_threads);
        let step_words = StepInputLayout::bound_words(largest.n_tokens, largest.attention.n_head);
        self.work = self.allocate("activation arena and scratch", step_offset + step_words * 4)?;
        self.reserved = Some(Reservation {
            arena_bytes,
            scratch_layout,
            step_offset,
            step_words,
        });
        Ok(())
    }

    fn execute_part(
        &mut self,
        id: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        self.run_step(id, part, inputs, exchange)
    }

    fn prepare_parts(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError> {
        let loaded = self.loaded.as_ref().ok_or(BackendError::NoModel)?;
        let r = self.reserved.ok_or(BackendError::NotReserved)?;
        let views = &loaded.weights.views;
        let freq_factors = graph.rope.freq_factors.map(|id| views[id].f32s());
        graph.rope.check(graph.attention.head_dim, freq_factors)?;
        let table = |local: bool| {
            let spec = graph.rope.for_op(local);
            let factors = if local { None } else { freq_factors };
            RopeTable::new(
                if spec.neox {
                    RopeMode::NeoX
                } else {
                    RopeMode::Normal
                },
                spec.n_rot,
                spec.freq_base,
                spec.freq_scale,
                factors,
            )
            .with_yarn(spec.yarn_terms())
        };
        let rope = table(false);
        let rope_local = graph.rope.local.map(|_| table(true));
        let needed = ScratchLayout::for_graph(graph, views, loaded.kv_layout.n_ctx, self.n_threads);
        let fits = |need: usize, have: usize, what| {
            if need > have {
                Err(BackendError::ExceedsReservation {
                    what,
                    needed: need as u64,
                    reserved: have as u64,
                })
            } else {
                Ok(())
            }
        };
        fits(plan.arena_bytes, r.arena_bytes, "activation arena")?;
        fits(
            needed.total(self.n_threads),
            r.scratch_layout.total(self.n_threads),
            "scratch",
        )?;
        fits(plan.step_inputs.words(), r.step_words, "step inputs")?;
        self.graphs.push(Prepared {
            graph: graph.clone(),
            plan: plan.clone(),
            rope,
            rope_local,
            groups: matmul_groups(graph, plan),
            parts: parts.to_vec(),
        });
        Ok(GraphId(self.graphs.len() - 1))
    }

    fn max_sequences(&self) -> usize {
        // Sequence ids travel as u32 words.
        u32::MAX as usize
    }

    fn launches(&self, _: GraphId) -> Option<usize> {
        None
    }

    fn allocations(&self) -> AllocationStats {
        AllocationStats {
            device_allocations: self.allocations,
            weight_bytes: self.loaded.as_ref().map_or(0, |l| l.weights.bytes),
            kv_bytes: self.loaded.as_ref().map_or(0, |l| l.kv.len() as u64),
            arena_bytes: self.reserved.map_or(0, |r| r.arena_bytes as u64),
            scratch_bytes: self
                .reserved
                .map_or(0, |r| (self.work.len() - r.arena_bytes) as u64),
        }
    }

    fn free_memory(&self) -> Option<FreeMemory> {
        available_host_memory().map(|free| FreeMemory {
            free,
            // Weights are read through the file's mapping; the repacked
            // Q4_0 copy is left out of the estimate.
            holds_weights: false,
            weights_kept_out: 0,
        })
    }
}
