//! Device memory, pinned host memory and the copies between them: the
//! allocation calls that [`Runtime::allocation_calls`] counts.

use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use crate::error::HipError;
use crate::hip;
use crate::runtime::{Api, Runtime};
use crate::types::{DevicePtr, MemInfo, Stream};

impl Runtime {
    /// Free and total memory of the current device.
    pub fn mem_get_info(&self) -> Result<MemInfo, HipError> {
        let (mut free, mut total) = (0usize, 0usize);
        match self.api {
            Api::Hip(h) => {
                // SAFETY: writes two size_t through valid pointers.
                let status = unsafe { (h.mem_get_info)(&mut free, &mut total) };
                h.check("hipMemGetInfo", status)?;
            }
            Api::Cuda(c) => {
                // SAFETY: writes two size_t through valid pointers.
                let status = unsafe { (c.mem_get_info)(&mut free, &mut total) };
                c.check("cuMemGetInfo_v2", status)?;
            }
        }
        Ok(MemInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    /// Allocates `bytes` of device memory on the current device
    /// (`hipMalloc` / `cuMemAlloc_v2`). Counted in
    /// [`allocation_calls`](Runtime::allocation_calls).
    pub fn malloc(&self, bytes: usize) -> Result<DevicePtr, HipError> {
        self.allocation_calls.fetch_add(1, Ordering::Relaxed);
        match self.api {
            Api::Hip(h) => {
                let mut p = null_mut();
                // SAFETY: writes one pointer through a valid pointer.
                let status = unsafe { (h.malloc)(&mut p, bytes) };
                h.check_alloc("hipMalloc", status, Some(bytes as u64))?;
                Ok(DevicePtr(p as usize as u64))
            }
            Api::Cuda(c) => {
                let mut p: u64 = 0;
                // SAFETY: writes one CUdeviceptr through a valid pointer.
                let status = unsafe { (c.mem_alloc)(&mut p, bytes) };
                c.check_alloc("cuMemAlloc_v2", status, Some(bytes as u64))?;
                Ok(DevicePtr(p))
            }
        }
    }

    /// Frees device memory (`hipFree` / `cuMemFree_v2`).
    ///
    /// # Safety
    ///
    /// - `ptr` came from [`malloc`](Runtime::malloc) of this runtime and is
    ///   not freed twice.
    /// - No pending or later work (copies, kernels, recorded graphs) reads or
    ///   writes it.
    pub unsafe fn free(&self, ptr: DevicePtr) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.free)(ptr.as_void()) };
                h.check("hipFree", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.mem_free)(ptr.0) };
                c.check("cuMemFree_v2", status)
            }
        }
    }

    /// Allocates `bytes` of pinned (page-locked) host memory, the staging
    /// buffer for uploads (`hipHostMalloc` with default flags /
    /// `cuMemAllocHost_v2`). Counted in
    /// [`allocation_calls`](Runtime::allocation_calls).
    pub fn host_malloc(&self, bytes: usize) -> Result<*mut u8, HipError> {
        self.allocation_calls.fetch_add(1, Ordering::Relaxed);
        let mut p = null_mut();
        match self.api {
            Api::Hip(h) => {
                // SAFETY: writes one pointer through a valid pointer.
                let status = unsafe { (h.host_malloc)(&mut p, bytes, hip::HOST_MALLOC_DEFAULT) };
                h.check_alloc("hipHostMalloc", status, Some(bytes as u64))?;
            }
            Api::Cuda(c) => {
                // SAFETY: writes one pointer through a valid pointer.
                let status = unsafe { (c.mem_alloc_host)(&mut p, bytes) };
                c.check_alloc("cuMemAllocHost_v2", status, Some(bytes as u64))?;
            }
        }
        Ok(p.cast())
    }

    /// Frees pinned host memory (`hipHostFree` / `cuMemFreeHost`).
    ///
    /// # Safety
    ///
    /// - `ptr` came from [`host_malloc`](Runtime::host_malloc) of this
    ///   runtime and is not freed twice.
    /// - No pending copy reads or writes it, and no Rust reference into it
    ///   outlives the call.
    pub unsafe fn host_free(&self, ptr: *mut u8) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.host_free)(ptr.cast()) };
                h.check("hipHostFree", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.mem_free_host)(ptr.cast()) };
                c.check("cuMemFreeHost", status)
            }
        }
    }

    /// Queues a copy of `bytes` from host `src` to device `dst` on `stream`
    /// (`hipMemcpyHtoDAsync` / `cuMemcpyHtoDAsync_v2`).
    ///
    /// # Safety
    ///
    /// - `src..src + bytes` is readable host memory that stays valid and
    ///   unmodified until the copy completes (poll an event recorded after
    ///   it). Pageable memory works but may be copied synchronously; pinned
    ///   memory from [`host_malloc`](Runtime::host_malloc) is what keeps
    ///   the copy asynchronous.
    /// - `dst..dst + bytes` lies within one live device allocation.
    /// - `stream` is a live stream of this runtime.
    pub unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: Stream,
    ) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract; HIP's prototype takes a
                // non-const source but does not write it.
                let status = unsafe {
                    (h.memcpy_htod_async)(dst.as_void(), src.cast_mut().cast(), bytes, stream.0)
                };
                h.check("hipMemcpyHtoDAsync", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.memcpy_htod_async)(dst.0, src.cast(), bytes, stream.0) };
                c.check("cuMemcpyHtoDAsync_v2", status)
            }
        }
    }

    /// Queues a copy of `bytes` from device `src` to host `dst` on `stream`
    /// (`hipMemcpyDtoHAsync` / `cuMemcpyDtoHAsync_v2`).
    ///
    /// # Safety
    ///
    /// - `dst..dst + bytes` is writable host memory that nothing else reads
    ///   or writes until the copy completes, and stays valid until then.
    /// - `src..src + bytes` lies within one live device allocation.
    /// - `stream` is a live stream of this runtime.
    pub unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: Stream,
    ) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status =
                    unsafe { (h.memcpy_dtoh_async)(dst.cast(), src.as_void(), bytes, stream.0) };
                h.check("hipMemcpyDtoHAsync", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.memcpy_dtoh_async)(dst.cast(), src.0, bytes, stream.0) };
                c.check("cuMemcpyDtoHAsync_v2", status)
            }
        }
    }

    /// Queues filling `bytes` of device memory at `dst` with `value` on
    /// `stream` (`hipMemsetD8Async` / `cuMemsetD8Async`).
    ///
    /// # Safety
    ///
    /// - `dst..dst + bytes` lies within one live device allocation that no
    ///   other queued work uses concurrently.
    /// - `stream` is a live stream of this runtime.
    pub unsafe fn memset_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: Stream,
    ) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.memset_d8_async)(dst.as_void(), value, bytes, stream.0) };
                h.check("hipMemsetD8Async", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.memset_d8_async)(dst.0, value, bytes, stream.0) };
                c.check("cuMemsetD8Async", status)
            }
        }
    }
}
