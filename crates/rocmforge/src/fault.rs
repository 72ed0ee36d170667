//! Injected device faults, for the tests of what users see when a GPU
//! fails: `ROCMFORGE_INJECT_FAULT=<backend>:<fault>@<when>` wraps that
//! backend so that it fails on cue, through the same error paths a real
//! failure takes.
//!
//! - `<fault>`: `lost` (the driver reports the device lost) or `hang` (the
//!   call never returns, as a hung driver call does; only a process-level
//!   deadline gets past it).
//! - `<when>`: `load`, or `step:N` (the N-th graph execution, from 1).
//!
//! Real hangs and losses cannot be produced on demand on a healthy device,
//! and these paths decide whether output already streamed survives and
//! whether `auto` falls back, so they are tested with injected faults, the
//! way databases test with failpoints.

use rocmforge_core::backend::{
    AllocationStats, Backend, BackendError, BackendInfo, FreeMemory, GraphId, StepInputs,
};
use rocmforge_core::graph::split::{Exchange, GraphPart};
use rocmforge_core::graph::Graph;
use rocmforge_core::model::{Model, WeightId};
use rocmforge_core::plan::{ArenaPlan, KvLayout};

pub const FAULT_ENV: &str = "ROCMFORGE_INJECT_FAULT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Lost,
    Hang,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Load,
    Step(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpec {
    pub backend: String,
    pub fault: Fault,
    pub when: When,
}

impl FaultSpec {
    /// The spec in `ROCMFORGE_INJECT_FAULT`, if it names `backend`.
    pub fn from_env(backend: &str) -> Result<Option<FaultSpec>, BackendError> {
        let Some(v) = std::env::var_os(FAULT_ENV) else {
            return Ok(None);
        };
        let spec = FaultSpec::parse(&v.to_string_lossy())?;
        Ok((spec.backend == backend).then_some(spec))
    }

    pub fn parse(s: &str) -> Result<FaultSpec, BackendError> {
        let bad = || {
            BackendError::bad_option(
                FAULT_ENV,
                format!("{s:?}"),
                "expected <backend>:<lost|hang>@<load|step:N>",
            )
        };
        let (backend, rest) = s.trim().split_once(':').ok_or_else(bad)?;
        let (fault, when) = rest.split_once('@').ok_or_else(bad)?;
        let fault = match fault {
            "lost" => Fault::Lost,
            "hang" => Fault::Hang,
            _ => return Err(bad()),
        };
        let when = match when.split_once(':') {
            None if when == "load" => When::Load,
            Some(("step", n)) => When::Step(n.parse().ok().filter(|&n| n > 0).ok_or_else(bad)?),
            _ => return Err(bad()),
        };
        Ok(FaultSpec {
            backend: backend.to_string(),
            fault,
            when,
        })
    }
}

/// A backend that fails as its [`FaultSpec`] says and otherwise is `inner`.
pub struct FaultyBackend {
    inner: Box<dyn Backend>,
    spec: FaultSpec,
    steps: u64,
}

impl FaultyBackend {
    pub fn wrap(inner: Box<dyn Backend>, spec: FaultSpec) -> Box<dyn Backend> {
        Box::new(FaultyBackend {
            inner,
            spec,
            steps: 0,
        })
    }

    fn load_fault(&self) -> Result<(), BackendError> {
        match self.spec.when {
            When::Load => Err(self.trigger("load")),
            _ => Ok(()),
        }
    }

    /// Counts a graph execution and fails the one the spec names.
    fn step_fault(&mut self) -> Result<(), BackendError> {
        self.steps += 1;
        match self.spec.when {
            When::Step(n) if n == self.steps => Err(self.trigger(&format!("step {}", self.steps))),
            _ => Ok(()),
        }
    }

    fn trigger(&self, at: &str) -> BackendError {
        match self.spec.fault {
            Fault::Lost => {
                BackendError::device_lost(format!("injected fault at {at} ({FAULT_ENV})"))
            }
            Fault::Hang => loop {
                // Parked for good, like a thread in a driver call that never
                // returns; only killing the process ends it.
                std::thread::park();
            },
        }
    }
}

impl Backend for FaultyBackend {
    fn info(&self) -> BackendInfo {
        self.inner.info()
    }

    fn load_except(
        &mut self,
        model: &Model,
        kv: &KvLayout,
        kept_out: &[WeightId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        self.load_fault()?;
        self.inner.load_except(model, kv, kept_out, progress)
    }

    fn reserve_parts(
        &mut self,
        largest: &Graph,
        arena_bytes: usize,
        exchange_bytes: usize,
    ) -> Result<(), BackendError> {
        self.inner
            .reserve_parts(largest, arena_bytes, exchange_bytes)
    }

    fn prepare_parts(
        &mut self,
        graph: &Graph,
        plan: &ArenaPlan,
        parts: &[GraphPart],
    ) -> Result<GraphId, BackendError> {
        self.inner.prepare_parts(graph, plan, parts)
    }

    fn execute_part(
        &mut self,
        graph: GraphId,
        part: usize,
        inputs: &StepInputs,
        exchange: &mut Exchange,
    ) -> Result<(), BackendError> {
        // A step starts with its graph's first part (a whole graph is one).
        if part == 0 {
            self.step_fault()?;
        }
        self.inner.execute_part(graph, part, inputs, exchange)
    }

    fn allocations(&self) -> AllocationStats {
        self.inner.allocations()
    }

    fn max_sequences(&self) -> usize {
        self.inner.max_sequences()
    }

    fn launches(&self, id: GraphId) -> Option<usize> {
        self.inner.launches(id)
    }

    fn free_memory(&self) -> Option<FreeMemory> {
        self.inner.free_memory()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            FaultSpec::parse("cpu:lost@step:3").unwrap(),
            FaultSpec {
                backend: "cpu".into(),
                fault: Fault::Lost,
                when: When::Step(3)
            }
        );
        assert_eq!(
            FaultSpec::parse("vulkan:hang@load").unwrap().when,
            When::Load
        );
        for bad in [
            "cpu",
            "cpu:lost",
            "cpu:melt@load",
            "cpu:lost@step:0",
            "cpu:lost@soon",
        ] {
            assert!(FaultSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
