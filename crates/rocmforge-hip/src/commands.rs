//! Recording and replay, and the one way this backend waits.
//!
//! A graph is lowered once, at `prepare`, by core's shared GPU lowering
//! into a list of launches (function, grid, block, argument block).
//! That list is then captured into a hipGraph (`hipStreamBeginCapture` ..
//! `hipStreamEndCapture`, `hipGraphInstantiate`) so a step is one
//! `hipGraphLaunch` instead of ~300 launches at ~3 µs each on RDNA. If the
//! runtime refuses the capture, or `ROCMFORGE_HIP_GRAPHS=0`, the list is
//! replayed launch by launch: same work, same order, one stream.
//!
//! Every wait polls an event against a deadline ([`wait`]): KFD user queues
//! have no kernel-side timeout, so a blocking synchronize on a hung GPU
//! never returns. A breadcrumb (one byte of pinned host memory set by a
//! 1-byte memset after every [`CRUMB_EVERY`] launches) tells a timeout
//! which window of launches was in flight.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use hip_sys::{DevicePtr, Event, EventStatus, Flavor, GraphExec, HipError, Runtime, Stream};
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::device::{HostCopy, InFlight, Stall};
use rocmforge_core::gpu::push::PUSH_BYTES;
use rocmforge_core::gpu::{grid, workgroup_size, Dispatch, KernelSink};

use crate::error::Hip;
use crate::modules::Kernels;

/// Launches per breadcrumb. A breadcrumb is a memset node between kernels;
/// on the Vulkan backend one fill per 32 dispatches cost 0.27 ms of a 7B
/// decode step and one per dispatch 2.1 ms (docs/vulkan.md).
pub(crate) const CRUMB_EVERY: usize = 32;
/// Bytes of breadcrumbs, one per window of [`CRUMB_EVERY`] launches: 131072
/// launches, far more than any graph has (a 7B decode step: ~200).
pub(crate) const CRUMB_BYTES: usize = 4096;
/// Every API's minimum for the grid's x size; kernels flatten (x, y) back
/// into one workgroup index.
const MAX_GRID_X: u32 = 65535;
/// How long a wait polls without sleeping: a decode step is a few
/// milliseconds, and sleeping (≥ 50 µs on Linux) would add to every one.
const SPIN: Duration = Duration::from_millis(20);
/// Between polls after that.
const NAP: Duration = Duration::from_micros(100);

/// Why a bounded wait ended without the work done.
#[derive(Debug)]
pub(crate) enum WaitError {
    Timeout(Duration),
    Hip(HipError),
}

/// A wait that failed, and what was being waited for.
#[derive(Debug)]
pub(crate) struct Stalled {
    pub error: WaitError,
    pub what: String,
}

/// Polls `event` until the work before its last record is done, or
/// `timeout` has passed. A faulted kernel shows up as
/// `WaitError::Hip(HipError::DeviceLost)`.
pub(crate) fn wait(rt: &Runtime, event: Event, timeout: Duration) -> Result<(), WaitError> {
    let start = Instant::now();
    loop {
        // SAFETY: the caller passes a live event of `rt` (every event of
        // the backend lives until its drop).
        match unsafe { rt.event_query(event) } {
            Ok(EventStatus::Ready) => return Ok(()),
            Ok(EventStatus::NotReady) => {}
            Err(e) => return Err(WaitError::Hip(e)),
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(WaitError::Timeout(waited));
        }
        if waited < SPIN {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
    }
}

impl crate::backend::HipDevice {
    /// Records an event after everything queued and waits for it.
    pub(crate) fn drain(&self, timeout: Duration) -> Result<(), WaitError> {
        // SAFETY: live event and stream.
        unsafe { self.rt.event_record(self.events[0], self.stream) }.map_err(WaitError::Hip)?;
        wait(&self.rt, self.events[0], timeout)
    }
}

/// A failed wait as core's GPU backend takes it.
pub(crate) fn stall(e: WaitError) -> Stall {
    match e {
        WaitError::Timeout(waited) => Stall::Timeout(waited),
        WaitError::Hip(e) => Stall::Failed(Hip(e).into()),
    }
}

/// The likely causes of a GPU that stopped answering, for timeout messages.
pub(crate) fn causes(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Hip => {
            "likely causes: the RDNA3 MES/CWSR firmware hang (fixed by booting with \
             amdgpu.cwsr_enable=0, with MES firmware 0x80), or stalled SDMA copies on gfx1151 \
             (run with HSA_ENABLE_SDMA=0); see `rocmforge doctor` once it exists"
        }
        Flavor::CudaDriver => {
            "hip via CUDA driver, so a kernel that never ends (on AMD GPUs the likely causes \
             are the MES/CWSR firmware hang, amdgpu.cwsr_enable=0 with MES firmware 0x80, and \
             gfx1151 copy stalls, HSA_ENABLE_SDMA=0; `rocmforge doctor` once it exists)"
        }
    }
}

/// One recorded kernel launch.
pub struct Launch {
    function: hip_sys::Function,
    grid: [u32; 3],
    block: [u32; 3],
    /// The argument block, 8-aligned: the kernel's one by-value parameter.
    /// The runtime copies it at every launch (and into a graph at capture),
    /// so direct replays need it kept here.
    push: Box<[u64]>,
}

/// Collects the lowering's launches: core's `record_graph` calls
/// [`KernelSink::dispatch`] once per launch, in order.
pub(crate) struct Recorder<'a> {
    pub rt: &'a Runtime,
    pub kernels: &'a mut Kernels,
    pub launches: Vec<Launch>,
}

impl KernelSink for Recorder<'_> {
    fn launch(&mut self, d: Dispatch) -> Result<(), BackendError> {
        let Dispatch {
            kernel,
            push,
            groups,
            label,
        } = d;
        if groups == 0 {
            return Ok(());
        }
        let block = workgroup_size(kernel).ok_or_else(|| {
            BackendError::missing_kernel(
                kernel,
                format!("rocmforge_core::gpu has no workgroup size for it; needed by {label}"),
            )
        })?;
        if push.len() > PUSH_BYTES {
            return Err(BackendError::unsupported(
                "argument block",
                format!(
                    "{label} passes {} bytes, HIP launches take at most {PUSH_BYTES}",
                    push.len()
                ),
            ));
        }
        let function = self.kernels.get(self.rt, kernel).map_err(|e| match e {
            BackendError::MissingKernel { kernel, detail } => BackendError::MissingKernel {
                kernel,
                detail: format!("{detail}; needed by {label}"),
            },
            BackendError::Device(m) => BackendError::Device(format!("{m}; needed by {label}")),
            other => other,
        })?;
        let mut words = vec![0u64; push.len().div_ceil(8)].into_boxed_slice();
        // SAFETY: `words` holds at least `push.len()` bytes; u64 has no
        // invalid bit patterns.
        unsafe {
            std::ptr::copy_nonoverlapping(push.as_ptr(), words.as_mut_ptr().cast(), push.len())
        };
        let (x, y) = grid(groups, MAX_GRID_X);
        self.launches.push(Launch {
            function,
            grid: [x, y, 1],
            block: [block, 1, 1],
            push: words,
        });
        Ok(())
    }
}

/// Queues `launches` in order on `stream`, with breadcrumb `w` (a byte at
/// `crumbs + w`) set to 1 after launch `(w + 1) * CRUMB_EVERY`.
///
/// # Safety
///
/// `stream` is a live stream of `rt`; the launches' functions are live;
/// every address in their argument blocks lies in live allocations until
/// the work completes; `crumbs`, if given, is `CRUMB_BYTES` of live memory
/// the device can write (pinned host memory).
unsafe fn enqueue(
    rt: &Runtime,
    stream: Stream,
    launches: &[Launch],
    crumbs: Option<DevicePtr>,
) -> Result<(), HipError> {
    for (i, l) in launches.iter().enumerate() {
        // The kernel's only parameter is the argument block itself.
        let mut params = [l.push.as_ptr().cast_mut().cast::<c_void>()];
        // SAFETY: one parameter, pointing to the block the kernel takes by
        // value (its layout is `kernels/push.h`'s, pinned by static asserts
        // on both sides); the caller's contract for the rest.
        unsafe { rt.launch_kernel(l.function, l.grid, l.block, 0, stream, &mut params) }?;
        let done = i + 1;
        if let Some(c) = crumbs {
            if done.is_multiple_of(CRUMB_EVERY) && done / CRUMB_EVERY <= CRUMB_BYTES {
                let at = c.offset((done / CRUMB_EVERY - 1) as u64);
                // SAFETY: one byte inside the crumb area (checked above).
                unsafe { rt.memset_async(at, 1, 1, stream) }?;
            }
        }
    }
    Ok(())
}

/// Captures `launches` (as [`enqueue`] queues them) into an executable
/// graph. The stream leaves capture mode whatever happens.
///
/// # Safety
///
/// As [`enqueue`], and the stream is idle and not capturing; the returned
/// graph keeps the addresses, so everything it touches must outlive it.
unsafe fn capture(
    rt: &Runtime,
    stream: Stream,
    launches: &[Launch],
    crumbs: Option<DevicePtr>,
) -> Result<GraphExec, HipError> {
    // SAFETY: the caller's contract; capture ends on this thread below.
    unsafe { rt.stream_begin_capture(stream) }?;
    // SAFETY: the caller's contract; while capturing, nothing runs.
    let queued = unsafe { enqueue(rt, stream, launches, crumbs) };
    // SAFETY: capturing since the begin above, on this thread.
    let ended = unsafe { rt.stream_end_capture(stream) };
    let graph = match (queued, ended) {
        (Ok(()), Ok(g)) => g,
        (Err(e), Ok(g)) => {
            if !g.as_raw().is_null() {
                // SAFETY: a graph just returned and never instantiated.
                let _ = unsafe { rt.graph_destroy(g) };
            }
            return Err(e);
        }
        (Err(e), Err(_)) | (Ok(()), Err(e)) => return Err(e),
    };
    // SAFETY: a live graph; the caller keeps what it refers to alive.
    let exec = unsafe { rt.graph_instantiate(graph) };
    // SAFETY: the executable graph does not depend on the graph it came
    // from, which is not used again.
    let _ = unsafe { rt.graph_destroy(graph) };
    exec
}

/// How a recorded graph replays.
pub enum Replay {
    /// A captured hipGraph, with breadcrumbs or without.
    Graph { exec: GraphExec, crumbs: bool },
    /// Launch by launch: graphs turned off, or the capture was refused
    /// (the reason is kept for messages).
    Direct { why: String },
}

impl Replay {
    /// Captures `launches` with breadcrumbs if `crumbs` is given, else (or
    /// if that capture fails) without; direct launches if both fail or
    /// `graphs` is off.
    ///
    /// # Safety
    ///
    /// As [`capture`].
    pub unsafe fn new(
        rt: &Runtime,
        stream: Stream,
        launches: &[Launch],
        crumbs: Option<DevicePtr>,
        graphs: bool,
    ) -> Replay {
        if !graphs {
            return Replay::Direct {
                why: "ROCMFORGE_HIP_GRAPHS=0".into(),
            };
        }
        if let Some(c) = crumbs {
            // SAFETY: the caller's contract.
            if let Ok(exec) = unsafe { capture(rt, stream, launches, Some(c)) } {
                return Replay::Graph { exec, crumbs: true };
            }
        }
        // SAFETY: the caller's contract.
        match unsafe { capture(rt, stream, launches, None) } {
            Ok(exec) => Replay::Graph {
                exec,
                crumbs: false,
            },
            Err(e) => Replay::Direct {
                why: format!("hipGraph capture failed: {e}"),
            },
        }
    }
}

/// A part recorded at `prepare`.
pub struct Recorded {
    pub(crate) launches: Vec<Launch>,
    pub(crate) replay: Replay,
    /// Whether direct replays set breadcrumbs (memsets into pinned memory
    /// work on this runtime).
    pub(crate) crumbs: bool,
    /// Offset of the breadcrumb area in the pinned buffer.
    pub(crate) crumb_offset: usize,
    /// Copied from the pinned buffer into the arena before the launches
    /// (the step inputs, the part's imports), and back after them (its
    /// exports).
    pub(crate) copies_in: Vec<HostCopy>,
    pub(crate) copies_out: Vec<HostCopy>,
}

impl Recorded {
    /// Queues one run of the graph's launches.
    ///
    /// # Safety
    ///
    /// As [`enqueue`]; `crumbs` is the area the graph was captured with.
    pub unsafe fn replay(
        &self,
        rt: &Runtime,
        stream: Stream,
        crumbs: DevicePtr,
    ) -> Result<(), HipError> {
        match self.replay {
            // SAFETY: the caller's contract; the executable graph is live
            // until `destroy`.
            Replay::Graph { exec, .. } => unsafe { rt.graph_launch(exec, stream) },
            // SAFETY: the caller's contract.
            Replay::Direct { .. } => unsafe {
                enqueue(rt, stream, &self.launches, self.crumbs.then_some(crumbs))
            },
        }
    }

    /// Whether a run sets breadcrumbs.
    pub fn has_crumbs(&self) -> bool {
        match self.replay {
            Replay::Graph { crumbs, .. } => crumbs,
            Replay::Direct { .. } => self.crumbs,
        }
    }

    /// "replayed as a captured hipGraph" or "direct launches: why".
    pub fn mode(&self) -> String {
        match &self.replay {
            Replay::Graph { .. } => "replayed as a captured hipGraph".into(),
            Replay::Direct { why } => format!("direct launches: {why}"),
        }
    }

    /// How far a run got, from the crumb area as the host read it back.
    pub fn in_flight(&self, crumbs: &[u8]) -> Option<InFlight> {
        if !self.has_crumbs() {
            return None;
        }
        // Only full windows end in a breadcrumb (see `enqueue`).
        let windows = (self.launches.len() / CRUMB_EVERY).min(crumbs.len());
        let done = crumbs[..windows].iter().take_while(|&&b| b != 0).count();
        Some(InFlight {
            done: done * CRUMB_EVERY,
            window: CRUMB_EVERY,
        })
    }

    /// Destroys the executable graph.
    ///
    /// # Safety
    ///
    /// No run of it is pending, and it is not replayed again.
    pub unsafe fn destroy(&self, rt: &Runtime) {
        if let Replay::Graph { exec, .. } = self.replay {
            // SAFETY: the caller's contract.
            let _ = unsafe { rt.graph_exec_destroy(exec) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_name_the_known_hangs() {
        for f in [Flavor::Hip, Flavor::CudaDriver] {
            let c = causes(f);
            for needle in [
                "MES/CWSR",
                "amdgpu.cwsr_enable=0",
                "0x80",
                "HSA_ENABLE_SDMA=0",
                "rocmforge doctor",
            ] {
                assert!(c.contains(needle), "{f}: {c}");
            }
            assert!(!c.contains('\n'));
        }
    }
}
