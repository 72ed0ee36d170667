//! [`HipDevice`]: the [`GpuDevice`] of the HIP backend, which
//! [`GpuBackend`] turns into a [`Backend`](rocmforge_core::backend::Backend).
//!
//! Every allocation is one call counted by hip-sys (`memory.rs`). Host
//! memory is one pinned buffer: the staging buffer of the upload, then the
//! host side of every step. A part is its launches, captured into a
//! hipGraph (direct launches where capture fails or graphs are off); a run
//! queues the copies in, the replay and the copies out on one stream, and
//! polls an event after all of it against the deadline.

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use hip_sys::{Event, Flavor, HipError, Runtime, Stream};
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::cost::Rates;
use rocmforge_core::gpu::device::{Frame, InFlight, Lower, Memory, Stall, Upload};
use rocmforge_core::gpu::MatrixTiles;
use rocmforge_core::gpu::{GpuBackend, GpuDevice, GpuOptions, Lowering};

use crate::commands::{causes, stall, wait, Recorded, Recorder, Replay, CRUMB_BYTES};
use crate::device::Device;
use crate::error::Hip;
use crate::memory::{DeviceBuffer, Piece, Pinned, Uploader};
use crate::modules::Kernels;
use crate::options::HipOptions;

/// The HIP backend: core's GPU backend over this crate's device.
pub type HipBackend = GpuBackend<HipDevice>;

/// Opens the device `opts` chooses, as a backend with `gpu`'s switches.
pub fn open(opts: HipOptions, gpu: GpuOptions) -> Result<HipBackend, BackendError> {
    Ok(GpuBackend::new(HipDevice::open(opts)?, gpu))
}

pub struct HipDevice {
    pub(crate) rt: Runtime,
    dev: Device,
    pub(crate) kernels: Kernels,
    pub(crate) stream: Stream,
    /// Two, so the upload can wait for one half of the staging buffer while
    /// the other fills; a step uses the first.
    pub(crate) events: [Event; 2],
    opts: HipOptions,
    /// Memsets into pinned memory work here (probed once the host buffer
    /// is in place), so parts carry breadcrumbs.
    crumbs: bool,
    /// A failed capture was reported (once per device).
    capture_warned: bool,
    /// After a fatal failure: the drop leaks everything.
    abandoned: bool,
}

impl HipDevice {
    pub fn open(opts: HipOptions) -> Result<HipDevice, BackendError> {
        let rt = Runtime::from_env().map_err(Hip)?;
        let dev = Device::open(&rt, opts.device)?;
        rt.set_device(dev.index).map_err(Hip)?;
        let mut kernels = Kernels::load(&rt, dev.image, &dev.target)?;
        let objects = (|| {
            Ok::<_, HipError>((
                rt.stream_create()?,
                [rt.event_create()?, rt.event_create()?],
            ))
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
        Ok(HipDevice {
            rt,
            dev,
            kernels,
            stream,
            events,
            opts,
            crumbs: false,
            capture_warned: false,
            abandoned: false,
        })
    }

    /// HIP proper, or the CUDA driver standing in for it.
    pub fn flavor(&self) -> Flavor {
        self.dev.flavor
    }
}

impl Drop for HipDevice {
    fn drop(&mut self) {
        // A hung or lost device: waiting could block forever and freeing
        // what it may still use is undefined, so everything is leaked.
        if self.abandoned || self.make_current().is_err() {
            return;
        }
        // SAFETY: the backend waited for the stream and freed what it
        // made; nothing below is used again. The device's primary context
        // (CUDA mode) stays retained until the process exits, as the CUDA
        // runtime's does.
        unsafe {
            for e in self.events {
                let _ = self.rt.event_destroy(e);
            }
            let _ = self.rt.stream_destroy(self.stream);
            let _ = self.kernels.unload(&self.rt);
        }
    }
}

impl GpuDevice for HipDevice {
    type Buffer = DeviceBuffer;
    type Host = Pinned;
    type Part = Recorded;

    const NAME: &'static str = "rocm";

    /// HIP's current device and CUDA's current context are per thread, and
    /// a backend may be called from any.
    fn make_current(&self) -> Result<(), BackendError> {
        self.rt
            .set_device(self.dev.index)
            .map_err(|e| Hip(e).into())
    }

    /// The device line, saying plainly which runtime runs it.
    fn summary(&self) -> String {
        let launches = if self.opts.graphs {
            "hipGraph replay"
        } else {
            "direct launches (ROCMFORGE_HIP_GRAPHS=0)"
        };
        format!("{} | {launches}", self.dev.summary)
    }

    /// What the HIP kernels offer: integer mat-vecs named `matvec_int_*`
    /// (the prelude's `dot4` picks the instruction per target, so there
    /// are no `_dot` variants), 128×128 and 64×64 matrix-core tiles with
    /// register prefetch (`matmul_cmp_*`, `matmul_cmps_*`), Q8-packed
    /// roundings one block per wave (`kernels/ops_quantize.hip`).
    fn lowering(&self) -> Lowering {
        hip_lowering(self.dev.props.compute_units)
    }

    fn max_region(&self) -> u64 {
        self.dev.props.total_mem
    }

    fn rates(&self) -> Rates {
        if self.dev.props.integrated {
            Rates::INTEGRATED
        } else {
            Rates::DISCRETE
        }
    }

    fn free_memory(&self) -> Option<u64> {
        // A failed query skips the check rather than failing the load.
        self.make_current().ok()?;
        self.rt.mem_get_info().ok().map(|m| m.free)
    }

    fn allocation_calls(&self) -> usize {
        self.rt.allocation_calls()
    }

    fn crumb_bytes(&self) -> usize {
        CRUMB_BYTES
    }

    fn alloc(
        &mut self,
        what: &'static str,
        bytes: u64,
        _: Memory,
    ) -> Result<DeviceBuffer, BackendError> {
        DeviceBuffer::alloc(&self.rt, what, bytes)
    }

    fn alloc_host(&mut self, _what: &'static str, bytes: u64) -> Result<Pinned, BackendError> {
        let bytes = usize::try_from(bytes).map_err(|_| BackendError::OutOfMemory {
            what: "the pinned staging buffer",
            bytes,
        })?;
        Pinned::alloc(&self.rt, bytes)
    }

    unsafe fn free(&mut self, buffer: DeviceBuffer) {
        // SAFETY: the caller's contract.
        let _ = unsafe { buffer.free(&self.rt) };
    }

    unsafe fn free_host(&mut self, host: Pinned) {
        // SAFETY: the caller's contract.
        let _ = unsafe { host.free(&self.rt) };
    }

    unsafe fn upload(
        &mut self,
        staging: &mut Option<Pinned>,
        job: Upload<DeviceBuffer>,
    ) -> Result<(), BackendError> {
        let (regions, pieces, timeout, progress) =
            (job.regions, job.pieces, job.timeout, job.progress);
        if staging.is_none() {
            *staging = Some(Pinned::alloc(
                &self.rt,
                self.opts.staging_bytes.max(2 << 10),
            )?);
        }
        let pieces: Vec<Piece> = (pieces.iter())
            .map(|p| Piece {
                name: p.name,
                bytes: p.bytes,
                dst: regions[p.region].ptr.offset(p.offset),
            })
            .collect();
        let up = Uploader {
            rt: &self.rt,
            stream: self.stream,
            events: self.events,
            staging: staging.as_ref().expect("allocated above"),
            timeout,
        };
        // SAFETY: the caller's contract; the staging buffer is not in use.
        let uploaded = unsafe { up.upload(&pieces, progress) };
        uploaded.map_err(|s| {
            stall(s.error).error(format!(
                "{}; {}",
                s.what,
                self.stall_hint().unwrap_or_default()
            ))
        })
    }

    /// Probes whether a memset into pinned memory works on this runtime
    /// (one bounded wait). Breadcrumbs need it; without them a timeout names
    /// the graph but not the launch.
    fn host_ready(
        &mut self,
        host: &Pinned,
        crumbs: u64,
        timeout: Duration,
    ) -> Result<(), BackendError> {
        self.crumbs = false;
        if !self.opts.crumbs {
            return Ok(());
        }
        let at = host.device_ptr(crumbs as usize);
        // SAFETY: the crumb area lies inside the pinned buffer, which
        // nothing else uses now (the backend waited before reserving).
        match unsafe { self.rt.memset_async(at, 0, CRUMB_BYTES, self.stream) } {
            Ok(()) => {}
            // Refused (pinned memory is not a memset target here).
            Err(HipError::Call { .. }) => return Ok(()),
            Err(e) => return Err(Hip(e).into()),
        }
        let probed = self.drain(timeout);
        probed.map_err(|e| stall(e).error("the breadcrumb probe"))?;
        self.crumbs = true;
        Ok(())
    }

    fn record(&mut self, frame: &Frame<Self>, lower: &mut Lower) -> Result<Recorded, BackendError> {
        let mut rec = Recorder {
            rt: &self.rt,
            kernels: &mut self.kernels,
            launches: Vec::new(),
        };
        lower(&mut rec)?;
        let launches = rec.launches;
        let crumbs = self
            .crumbs
            .then(|| frame.host.device_ptr(frame.crumbs as usize));
        // SAFETY: the stream is idle (every run is waited for) and not
        // capturing; the graph refers to the regions, the arena and the
        // pinned buffer, which outlive it (parts are freed first).
        let replay =
            unsafe { Replay::new(&self.rt, self.stream, &launches, crumbs, self.opts.graphs) };
        if let Replay::Direct { why } = &replay {
            if self.opts.graphs && !self.capture_warned {
                eprintln!("rocmforge: rocm: replaying launches one by one, slower: {why}");
                self.capture_warned = true;
            }
        }
        Ok(Recorded {
            launches,
            replay,
            crumbs: self.crumbs,
            crumb_offset: frame.crumbs as usize,
            copies_in: frame.copies_in.to_vec(),
            copies_out: frame.copies_out.to_vec(),
        })
    }

    unsafe fn submit(
        &mut self,
        part: &Recorded,
        arena: &DeviceBuffer,
        host: &Pinned,
        timeout: Duration,
    ) -> Result<(), Stall> {
        let (rt, stream) = (&self.rt, self.stream);
        // SAFETY: the copies stay inside the arena allocation and the
        // pinned buffer (laid out by the backend); the replay's addresses
        // all lie in live allocations; the event is waited for before the
        // host touches either buffer again.
        let queued = unsafe {
            let mut q = Ok(());
            for c in &part.copies_in {
                let (dst, src) = (arena.ptr.offset(c.arena), host.at(c.host as usize));
                q = q.and_then(|()| rt.memcpy_htod_async(dst, src, c.bytes, stream));
            }
            q = q.and_then(|()| part.replay(rt, stream, host.device_ptr(part.crumb_offset)));
            for c in &part.copies_out {
                let (dst, src) = (host.at(c.host as usize), arena.ptr.offset(c.arena));
                q = q.and_then(|()| rt.memcpy_dtoh_async(dst, src, c.bytes, stream));
            }
            q.and_then(|()| rt.event_record(self.events[0], stream))
        };
        if let Err(e) = queued {
            // Part of the run may be queued: let it finish before the host
            // side is written again.
            self.drain(timeout).map_err(stall)?;
            return Err(Stall::Failed(Hip(e).into()));
        }
        wait(rt, self.events[0], timeout).map_err(stall)?;
        fence(Ordering::Acquire);
        Ok(())
    }

    fn in_flight(&self, part: &Recorded, crumbs: &[u8]) -> Option<InFlight> {
        part.in_flight(crumbs)
    }

    fn describe(&self, part: &Recorded) -> Option<String> {
        Some(part.mode())
    }

    fn stall_hint(&self) -> Option<&'static str> {
        Some(causes(self.dev.flavor))
    }

    unsafe fn free_part(&mut self, part: Recorded) {
        // SAFETY: the caller's contract.
        unsafe { part.destroy(&self.rt) }
    }

    fn idle(&mut self, timeout: Duration) -> Result<(), Stall> {
        self.drain(timeout).map_err(stall)
    }

    fn spin(&mut self, timeout: Duration) -> Result<(), Stall> {
        self.spin_test(timeout)
    }

    fn abandon(&mut self) {
        self.abandoned = true;
    }
}

/// Fewest positions a run of the split decode attention takes, as on
/// Vulkan's wide subgroups. At tg128 on the H200 through the CUDA driver:
/// qwen3-30b-a3b 335.9 / 337.5 t/s against 331.4 / 332.9 with core's 128
/// (+1.4%), gpt-oss-20b 401.5 / 397.6 against 399.0 / 395.3 (+0.6%)
/// (docs/measurements.md, session 27).
const SPLIT_MIN: u32 = 32;

fn hip_lowering(compute_units: u32) -> Lowering {
    Lowering {
        fuse: true,
        int_matvec: true,
        int_expert_matvec: true,
        grouped_experts: true,
        int_dot_names: false,
        matrix: MatrixTiles::Auto,
        matrix_prefetch: true,
        q8_packed_blocks_per_group: 2,
        // matvec_int.hip's MVI_NR: a wave per 4 rows.
        int_rows: 8,
        expert_int_rows: 8,
        row_teams: false,
        compute_units,
        // Waves of 32 (RDNA, NVIDIA).
        subgroup_decode: true,
        // A short context gets several workgroups a head.
        split_min: SPLIT_MIN,
        int_teams: 1,
        matrix_attention: true,
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
        let l = hip_lowering(96);
        assert!(!l.int_dot_names, "HIP kernels have no _dot variants");
        assert_eq!(
            l.matrix,
            MatrixTiles::Auto,
            "128x128 tiles where they fill the GPU (matmul_cmp_*), else 64x64 (matmul_cmps_*)"
        );
        assert!(l.matrix_prefetch);
        assert_eq!(
            l.q8_packed_blocks_per_group, 2,
            "ops_quantize.hip's mapping"
        );
        assert_eq!(l.compute_units, 96, "the device's, for split attention");
    }
}
