//! `CpuBackend`: the [`Backend`] implementation over host memory.

use rocmforge_core::backend::{AllocationStats, Backend, BackendError, BackendInfo, GraphId};
use rocmforge_core::graph::Graph;
use rocmforge_core::model::Model;
use rocmforge_core::plan::{ArenaPlan, KvLayout};

use crate::exec::{ScratchLayout, Step};
use crate::kernels::rope::{RopeMode, RopeTable};
use crate::memory::HostBuffer;
use crate::team::run_team;
use crate::weights::MappedWeights;

struct Loaded {
    weights: MappedWeights,
    kv_layout: KvLayout,
    kv: HostBuffer,
    n_vocab: usize,
}

struct Prepared {
    graph: Graph,
    plan: ArenaPlan,
    rope: RopeTable,
}

/// Allocations per model load: the weight mapping, the region of repacked
/// weights (Q4_0 models on AVX2 machines), the KV cache, and one work buffer
/// holding the activation arena followed by the scratch (quantized
/// activations, per-thread attention scores). The work buffer grows only if
/// a graph larger than every earlier one is prepared.
pub struct CpuBackend {
    n_threads: usize,
    repack: bool,
    loaded: Option<Loaded>,
    graphs: Vec<Prepared>,
    work: HostBuffer,
    /// Bytes of `work` reserved for the arena; the scratch follows.
    arena_bytes: usize,
    scratch_layout: ScratchLayout,
    allocations: usize,
}

impl CpuBackend {
    /// `n_threads` 0 means one per available core.
    pub fn new(n_threads: usize) -> CpuBackend {
        let n_threads = if n_threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            n_threads
        };
        CpuBackend {
            n_threads,
            repack: true,
            loaded: None,
            graphs: Vec::new(),
            work: HostBuffer::new(0).expect("empty buffer"),
            arena_bytes: 0,
            scratch_layout: ScratchLayout::default(),
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

    fn load(
        &mut self,
        model: &Model,
        n_ctx: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        self.graphs.clear();
        self.loaded = None;
        let weights = MappedWeights::load(model, self.repack, progress)?;
        // The mapping is the weight region; repacked weights are a second.
        self.allocations = 1 + usize::from(weights.has_repacked_region());
        let kv_layout = KvLayout::new(&model.config, n_ctx);
        let kv = self.allocate("KV cache", kv_layout.bytes())?;
        self.loaded = Some(Loaded {
            weights,
            kv_layout,
            kv,
            n_vocab: model.config.n_vocab,
        });
        Ok(())
    }

    fn prepare(&mut self, graph: &Graph, plan: &ArenaPlan) -> Result<GraphId, BackendError> {
        let loaded = self.loaded.as_ref().ok_or(BackendError::NoModel)?;
        let views = &loaded.weights.views;
        let rope = RopeTable::try_new(
            if graph.rope.neox {
                RopeMode::NeoX
            } else {
                RopeMode::Normal
            },
            graph.rope.n_rot,
            graph.rope.freq_base,
            graph.rope.freq_scale,
            graph.rope.freq_factors.map(|id| views[id].f32s()),
        )
        .map_err(|e| BackendError::Device(format!("rope parameters: {e}")))?;
        let layout =
            ScratchLayout::for_graph(graph, views, loaded.kv_layout.n_ctx).max(self.scratch_layout);
        let arena_bytes = plan.arena_bytes.max(self.arena_bytes).next_multiple_of(64);
        let needed = arena_bytes + layout.total(self.n_threads);
        if needed > self.work.len() {
            self.work = self.allocate("activation arena and scratch", needed)?;
        }
        self.arena_bytes = arena_bytes;
        self.scratch_layout = layout;
        self.graphs.push(Prepared {
            graph: graph.clone(),
            plan: plan.clone(),
            rope,
        });
        Ok(GraphId(self.graphs.len() - 1))
    }

    fn execute(
        &mut self,
        id: GraphId,
        tokens: &[u32],
        pos0: usize,
        logits: &mut [f32],
    ) -> Result<(), BackendError> {
        let loaded = self.loaded.as_mut().ok_or(BackendError::NoModel)?;
        let p = self
            .graphs
            .get(id.0)
            .ok_or(BackendError::UnknownGraph(id))?;
        let g = &p.graph;
        if tokens.len() != g.n_tokens {
            return Err(BackendError::TokenCount {
                expected: g.n_tokens,
                got: tokens.len(),
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= loaded.n_vocab) {
            return Err(BackendError::TokenOutOfRange {
                id: bad,
                n_vocab: loaded.n_vocab,
            });
        }
        let end = pos0 + tokens.len();
        if end > loaded.kv_layout.n_ctx {
            return Err(BackendError::ContextOverflow {
                pos0,
                end,
                n_ctx: loaded.kv_layout.n_ctx,
            });
        }
        let out = g.tensor(g.logits);
        if logits.len() != out.rows * out.cols {
            return Err(BackendError::LogitsBuffer {
                expected: out.rows * out.cols,
                got: logits.len(),
            });
        }
        let step = Step {
            graph: g,
            plan: &p.plan,
            rope: &p.rope,
            weights: &loaded.weights.views,
            kv_layout: loaded.kv_layout,
            kv: loaded.kv.shared(),
            arena: self.work.shared().sub(0, self.arena_bytes),
            scratch: self
                .work
                .shared()
                .sub(self.arena_bytes, self.scratch_layout.total(self.n_threads)),
            scratch_layout: self.scratch_layout,
            tokens,
            pos0,
            next_chunk: Default::default(),
        };
        run_team(self.n_threads, |m, barrier| step.run(m, barrier));
        // SAFETY: the team has finished; nothing else touches the arena.
        let src = unsafe { step.arena.f32s(p.plan.offsets[g.logits], logits.len()) };
        logits.copy_from_slice(src);
        Ok(())
    }

    fn allocations(&self) -> AllocationStats {
        AllocationStats {
            device_allocations: self.allocations,
            weight_bytes: self.loaded.as_ref().map_or(0, |l| l.weights.bytes),
            kv_bytes: self.loaded.as_ref().map_or(0, |l| l.kv.len() as u64),
            arena_bytes: self.arena_bytes as u64,
            scratch_bytes: (self.work.len() - self.arena_bytes) as u64,
        }
    }
}
