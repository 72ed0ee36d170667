//! [`GpuDevice`]: what a GPU backend supplies to [`super::GpuBackend`].
//!
//! A device is memory, copies and launches; everything that follows from
//! a model, a plan or a step (placement, reservation, graph checks, the
//! table of recorded graphs, step inputs, exchange, timeout messages, the
//! latch after a lost device) is [`super::GpuBackend`]'s, written once.
//! The trait is kept small and coarse on purpose, as `wgpu_hal::Api` is
//! under wgpu-core: a device decides *how* (a staging buffer or a mapped
//! write, a command buffer or a captured hipGraph), the backend decides
//! *what* and *when*.

use std::ptr::NonNull;
use std::time::Duration;

use super::cost::Rates;
use super::{KernelSink, Lowering};
use crate::backend::BackendError;

/// Device memory: kernels reach it by its 64-bit address.
pub trait DeviceMemory {
    /// The device address of byte 0.
    fn address(&self) -> u64;
    /// Its size in bytes.
    fn bytes(&self) -> u64;
}

/// Memory both the host (through [`HostMemory::host_ptr`]) and the device
/// (copies recorded in a part) reach: the step inputs, breadcrumbs and the
/// readback region live here.
pub trait HostMemory: DeviceMemory {
    /// The host address of byte 0; [`DeviceMemory::bytes`] bytes are
    /// mapped from it for as long as the memory lives.
    fn host_ptr(&self) -> NonNull<u8>;
}

/// What a device allocation holds, so a device can place it (host-visible
/// weights on a unified-memory device, for example).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    Weights,
    KvCache,
    /// The activation arena, the scratch and the device's copy of the step
    /// inputs.
    Arena,
}

/// One weight on its way to the device: `bytes` go to `offset` of weight
/// region `region`.
#[derive(Clone, Copy, Debug)]
pub struct Piece<'m> {
    pub name: &'m str,
    pub bytes: &'m [u8],
    pub region: usize,
    pub offset: u64,
}

/// What [`GpuDevice::upload`] copies: every piece into its region, every
/// wait bounded by `timeout`, `progress(done, total)` in bytes.
pub struct Upload<'a, B> {
    pub regions: &'a [B],
    pub pieces: &'a [Piece<'a>],
    pub timeout: Duration,
    pub progress: &'a mut dyn FnMut(u64, u64),
}

/// A copy between the host memory and the arena allocation, recorded into
/// a part: in before its launches, out after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCopy {
    /// Byte offset in the host memory.
    pub host: u64,
    /// Byte offset in the arena allocation.
    pub arena: u64,
    pub bytes: usize,
}

/// What a part is recorded against.
pub struct Frame<'a, D: GpuDevice + ?Sized> {
    pub arena: &'a D::Buffer,
    pub host: &'a D::Host,
    /// Host to arena before the launches: the step inputs, then the part's
    /// imports (none of zero bytes, here or in `copies_out`).
    pub copies_in: &'a [HostCopy],
    /// Arena to host after the launches: the part's exports (a whole
    /// graph's: its logits).
    pub copies_out: &'a [HostCopy],
    /// Offset in `host` of the breadcrumb area ([`GpuDevice::crumb_bytes`]).
    pub crumbs: u64,
}

/// Why a bounded wait ended without the work done.
#[derive(Debug)]
pub enum Stall {
    /// The deadline passed after `Duration` of waiting.
    Timeout(Duration),
    /// The device or its driver failed (a lost device is
    /// [`BackendError::DeviceLost`]).
    Failed(BackendError),
}

impl Stall {
    /// The error for a wait on `what` that stalled.
    pub fn error(self, what: impl Into<String>) -> BackendError {
        match self {
            Stall::Timeout(waited) => BackendError::Timeout {
                what: what.into(),
                waited,
            },
            Stall::Failed(e) => e,
        }
    }
}

/// How far a part got, read from its breadcrumbs: launches `done..done +
/// window` were in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub done: usize,
    pub window: usize,
}

/// Records the lowering's launches into a part.
pub type Lower<'l> = dyn FnMut(&mut dyn KernelSink) -> Result<(), BackendError> + 'l;

/// A GPU as [`super::GpuBackend`] drives it. Every call comes from the
/// backend, which keeps the order load → reserve → record → submit, waits
/// for every submit before the next, and frees nothing the device may
/// still use.
pub trait GpuDevice {
    /// A device allocation (weights, KV cache, arena).
    type Buffer: DeviceMemory;
    /// Host memory the device can copy to and from.
    type Host: HostMemory;
    /// A recorded part: its copies and launches, ready to replay.
    type Part;

    /// The registry name (`vulkan`, `rocm`).
    const NAME: &'static str;
    /// The one-line device summary.
    fn summary(&self) -> String;
    /// Which kernels the lowering may name on this device. The backend
    /// overrides the measurement switches of [`super::GpuOptions`].
    fn lowering(&self) -> Lowering;
    /// The largest single allocation.
    fn max_region(&self) -> u64;
    /// Memory free now, if the device can tell.
    fn free_memory(&self) -> Option<u64>;
    /// Allocation calls made since the device opened (monotonic).
    fn allocation_calls(&self) -> usize;
    /// Bytes of host memory the breadcrumbs of one part take.
    fn crumb_bytes(&self) -> usize;
    /// What the device sustains, on the low side, for the estimate that
    /// splits a long step into submissions ([`super::cost`]).
    fn rates(&self) -> Rates {
        Rates::DISCRETE
    }
    /// Makes the device current on the calling thread, where the runtime
    /// keeps such a thing per thread.
    fn make_current(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn alloc(
        &mut self,
        what: &'static str,
        bytes: u64,
        memory: Memory,
    ) -> Result<Self::Buffer, BackendError>;
    fn alloc_host(&mut self, what: &'static str, bytes: u64) -> Result<Self::Host, BackendError>;
    /// # Safety
    /// No queued work and no part that will be submitted again uses it.
    unsafe fn free(&mut self, buffer: Self::Buffer);
    /// # Safety
    /// As [`GpuDevice::free`].
    unsafe fn free_host(&mut self, host: Self::Host);

    /// Copies every piece into `regions` and returns when the copies are
    /// done, every wait bounded by `timeout`. A device that stages copies
    /// through host memory allocates it into `staging` and leaves it there
    /// (the backend reuses it for the steps).
    ///
    /// # Safety
    /// Every piece lies inside its region, and nothing is queued.
    unsafe fn upload(
        &mut self,
        staging: &mut Option<Self::Host>,
        job: Upload<Self::Buffer>,
    ) -> Result<(), BackendError>;

    /// Called once the host memory of a reservation is in place (a device
    /// may probe what it can do with it).
    fn host_ready(
        &mut self,
        _host: &Self::Host,
        _crumbs: u64,
        _timeout: Duration,
    ) -> Result<(), BackendError> {
        Ok(())
    }

    /// Records a part: `frame.copies_in`, then the launches `lower` makes
    /// (each through the sink it is given, in order, each seeing the
    /// writes of every earlier one), with breadcrumbs into `frame.crumbs`
    /// as the device keeps them, then `frame.copies_out`, visible to the
    /// host once a submit of it completes.
    fn record(
        &mut self,
        frame: &Frame<Self>,
        lower: &mut Lower,
    ) -> Result<Self::Part, BackendError>;

    /// Runs `part` once and waits for it, at most `timeout`.
    ///
    /// # Safety
    /// `part` was recorded against `arena` and `host`, which are live;
    /// nothing else is queued; the host does not touch `host` until this
    /// returns.
    unsafe fn submit(
        &mut self,
        part: &Self::Part,
        arena: &Self::Buffer,
        host: &Self::Host,
        timeout: Duration,
    ) -> Result<(), Stall>;

    /// Which launches of `part` were in flight, from its breadcrumb area
    /// as the host read it after a stalled submit; `None` where the part
    /// sets none.
    fn in_flight(&self, part: &Self::Part, crumbs: &[u8]) -> Option<InFlight>;
    /// How `part` replays, where that is worth saying in a timeout message.
    fn describe(&self, _part: &Self::Part) -> Option<String> {
        None
    }
    /// The likely causes of a timeout on this device, appended to its
    /// message.
    fn stall_hint(&self) -> Option<&'static str> {
        None
    }
    /// # Safety
    /// `part` is not pending.
    unsafe fn free_part(&mut self, part: Self::Part);

    /// Waits for everything queued, at most `timeout`.
    fn idle(&mut self, timeout: Duration) -> Result<(), Stall>;

    /// Test only: runs a kernel that spins until a flag in host memory is
    /// set, with a wait bounded by `timeout`; on a stall the flag is set
    /// (so the GPU can finish on its own) and what it touched is leaked.
    fn spin(&mut self, timeout: Duration) -> Result<(), Stall>;

    /// The device failed for good: its drop must leak everything rather
    /// than wait on a GPU that may never answer.
    fn abandon(&mut self);
}
