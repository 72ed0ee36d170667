//! Memory planning: where every tensor of a graph lives, so a backend makes a
//! few large device allocations instead of one per tensor. Many small
//! `hipMalloc` calls are what hang ROCm on MES/CWSR firmware; see
//! `docs/arena-planner.md`.

mod arena;
mod kv;
mod regions;
mod step;

pub use arena::{ArenaPlan, ARENA_ALIGN};
pub use kv::{KvLayout, KvType, KvTypes};
pub use regions::{split_regions, RegionAssignment, RegionError, RegionSplit};
pub use step::{word as step_word, StepInputLayout, COUNTED_TOKENS};
