//! A few big allocations, and the weight upload through pinned memory.
//!
//! Many small `hipMalloc`s hang RDNA3 cards (MES/CWSR firmware), so there
//! is ONE `hipMalloc` per region: the weights (split only where a device
//! caps one allocation below their size), the KV cache, and the activation
//! arena with its scratch and the device copy of the step inputs. Tensors
//! are offsets chosen by the core planners. `hipMallocAsync` pools are not
//! used at all (hang reports on RX 7900 XTX and gfx1151; hip-sys does not
//! even bind them).
//!
//! Host memory is ONE pinned buffer (`hipHostMalloc`): the staging buffer
//! weights are uploaded through at load, then the host side of every step
//! (step inputs, breadcrumbs, logits). Weights are never copied to the
//! device straight from the file mapping: on APUs such a copy pins the
//! mapping's pages and stalls (gfx1151).

use std::ptr::NonNull;
use std::time::Duration;

use hip_sys::{DevicePtr, Event, Runtime, Stream};
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::device::{DeviceMemory, HostMemory};

use crate::commands::{wait, Stalled, WaitError};
use crate::error::Hip;

/// One `hipMalloc`.
pub struct DeviceBuffer {
    pub ptr: DevicePtr,
    pub bytes: u64,
}

impl DeviceBuffer {
    /// Allocates at least `bytes` (256 for an empty region) of device
    /// memory. Running out of memory names `what`.
    pub fn alloc(
        rt: &Runtime,
        what: &'static str,
        bytes: u64,
    ) -> Result<DeviceBuffer, BackendError> {
        let bytes = bytes.max(256);
        let n = usize::try_from(bytes).map_err(|_| BackendError::OutOfMemory { what, bytes })?;
        let ptr = rt.malloc(n).map_err(|e| match BackendError::from(Hip(e)) {
            BackendError::OutOfMemory { bytes, .. } => BackendError::OutOfMemory { what, bytes },
            other => other,
        })?;
        Ok(DeviceBuffer { ptr, bytes })
    }

    /// # Safety
    ///
    /// No queued work, instantiated graph or recorded launch that will run
    /// again uses the buffer.
    pub unsafe fn free(&self, rt: &Runtime) -> Result<(), BackendError> {
        // SAFETY: from `alloc` of this runtime; the caller's contract.
        unsafe { rt.free(self.ptr) }.map_err(Hip)?;
        Ok(())
    }
}

/// The pinned host buffer (`hipHostMalloc`).
pub struct Pinned {
    ptr: NonNull<u8>,
    pub bytes: usize,
}

// SAFETY: pinned memory is ordinary process memory; the backend owning this
// reaches it only through `&mut self` methods, and any thread may pass its
// address to the runtime (the backend makes its device current first).
unsafe impl Send for Pinned {}

impl Pinned {
    pub fn alloc(rt: &Runtime, bytes: usize) -> Result<Pinned, BackendError> {
        let p = rt
            .host_malloc(bytes)
            .map_err(|e| match BackendError::from(Hip(e)) {
                BackendError::OutOfMemory { bytes, .. } => BackendError::OutOfMemory {
                    what: "the pinned staging buffer",
                    bytes,
                },
                other => other,
            })?;
        let ptr = NonNull::new(p).ok_or_else(|| {
            BackendError::Device(format!("pinned allocation of {bytes} bytes returned null"))
        })?;
        Ok(Pinned { ptr, bytes })
    }

    /// The host address of byte `offset`.
    pub fn at(&self, offset: usize) -> *mut u8 {
        assert!(
            offset <= self.bytes,
            "offset {offset} past the pinned buffer"
        );
        // SAFETY: within (or one past) the allocation, asserted above.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    /// The address kernels and memsets use for byte `offset`: pinned memory
    /// is mapped into the device's address space at its host address
    /// (unified addressing, both in HIP and in the CUDA driver).
    pub fn device_ptr(&self, offset: usize) -> DevicePtr {
        DevicePtr(self.at(offset) as usize as u64)
    }

    /// # Safety
    ///
    /// No queued copy, memset or kernel uses the buffer, and no recorded
    /// launch or instantiated graph that will run again refers to it.
    pub unsafe fn free(&self, rt: &Runtime) -> Result<(), BackendError> {
        // SAFETY: from `alloc` of this runtime; the caller's contract.
        unsafe { rt.host_free(self.ptr.as_ptr()) }.map_err(Hip)?;
        Ok(())
    }
}

/// A weight on its way: its name, its bytes in the file mapping, where it
/// goes on the device.
pub(crate) struct Piece<'m> {
    pub name: &'m str,
    pub bytes: &'m [u8],
    pub dst: DevicePtr,
}

/// What an upload runs on.
pub(crate) struct Uploader<'a> {
    pub rt: &'a Runtime,
    pub stream: Stream,
    pub events: [Event; 2],
    pub staging: &'a Pinned,
    pub timeout: Duration,
}

impl Uploader<'_> {
    /// Copies every piece to the device through the staging buffer, used
    /// as two halves in turn: the CPU fills one (reading the mapping, which
    /// is where the time goes for a cold file) while the GPU drains the
    /// other. Every wait is bounded. Returns when the last copy is done.
    ///
    /// # Safety
    ///
    /// Every `dst..dst + bytes.len()` lies inside one live device
    /// allocation that no queued work uses; the staging buffer is not in
    /// use; `stream` and `events` are live objects of `rt`.
    pub unsafe fn upload(
        &self,
        pieces: &[Piece],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), Stalled> {
        let half = self.staging.bytes / 2;
        assert!(half > 0, "staging buffer too small");
        let total: u64 = pieces.iter().map(|p| p.bytes.len() as u64).sum();
        let (mut done, mut h, mut fill) = (0u64, 0usize, 0usize);
        // Half i has copies queued since its event was last waited for.
        let mut busy = [false; 2];
        let mut current = "";
        let stalled = |error: WaitError, tensor: &str, done: u64| Stalled {
            error,
            what: format!(
                "the weight upload (copies through the pinned staging buffer, up to tensor \
                 '{tensor}', {done} of {total} bytes queued)"
            ),
        };
        progress(0, total);
        for p in pieces {
            current = p.name;
            let mut at = 0;
            while at < p.bytes.len() {
                if fill == half {
                    // Hand this half to the GPU and take the other one,
                    // once the copies reading it have finished.
                    self.record(h).map_err(|e| stalled(e, current, done))?;
                    busy[h] = true;
                    h ^= 1;
                    fill = 0;
                    if busy[h] {
                        wait(self.rt, self.events[h], self.timeout)
                            .map_err(|e| stalled(e, current, done))?;
                        busy[h] = false;
                    }
                }
                let n = (p.bytes.len() - at).min(half - fill);
                let stage = self.staging.at(h * half + fill);
                // SAFETY: `h * half + fill + n <= 2 * half <= bytes`, and no
                // queued copy reads this part of the half (its event was
                // waited for before the half was taken again).
                unsafe { std::ptr::copy_nonoverlapping(p.bytes[at..].as_ptr(), stage, n) };
                // SAFETY: the source is pinned and left alone until the
                // half's event is waited for; the destination lies inside
                // the piece's range (the caller's contract).
                unsafe {
                    self.rt
                        .memcpy_htod_async(p.dst.offset(at as u64), stage, n, self.stream)
                }
                .map_err(|e| stalled(WaitError::Hip(e), current, done))?;
                fill += n;
                at += n;
                done += n as u64;
                progress(done, total);
            }
        }
        // The stream runs in order: the last event covers every copy.
        self.record(h).map_err(|e| stalled(e, current, done))?;
        wait(self.rt, self.events[h], self.timeout).map_err(|e| stalled(e, current, done))
    }

    fn record(&self, h: usize) -> Result<(), WaitError> {
        // SAFETY: live event and stream (the caller's contract).
        unsafe { self.rt.event_record(self.events[h], self.stream) }.map_err(WaitError::Hip)
    }
}

impl DeviceMemory for DeviceBuffer {
    fn address(&self) -> u64 {
        self.ptr.0
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl DeviceMemory for Pinned {
    fn address(&self) -> u64 {
        self.device_ptr(0).0
    }

    fn bytes(&self) -> u64 {
        self.bytes as u64
    }
}

impl HostMemory for Pinned {
    fn host_ptr(&self) -> NonNull<u8> {
        NonNull::new(self.at(0)).expect("pinned memory is not null")
    }
}
