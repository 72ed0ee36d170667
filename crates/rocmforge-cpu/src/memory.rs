//! The backend's host buffers, and the raw shared views the thread team
//! writes through.

use std::alloc::{alloc_zeroed, dealloc, Layout};

/// Buffers are aligned for AVX-512 loads and cache lines.
const BUFFER_ALIGN: usize = 64;

/// One zero-initialised, 64-byte-aligned host allocation.
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain memory owned by this value.
unsafe impl Send for HostBuffer {}
// SAFETY: as above; shared access only reads the pointer and length.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// `None` when the allocator refuses (the caller reports out-of-memory
    /// instead of aborting the process).
    pub fn new(len: usize) -> Option<HostBuffer> {
        if len == 0 {
            return Some(HostBuffer {
                // Non-null and aligned, so empty views of it are valid slices.
                ptr: std::ptr::without_provenance_mut(BUFFER_ALIGN),
                len: 0,
            });
        }
        let layout = Layout::from_size_align(len, BUFFER_ALIGN).ok()?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(HostBuffer { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn shared(&mut self) -> SharedMem {
        SharedMem {
            ptr: self.ptr,
            len: self.len,
        }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this exact layout.
            unsafe {
                dealloc(
                    self.ptr,
                    Layout::from_size_align_unchecked(self.len, BUFFER_ALIGN),
                )
            }
        }
    }
}

/// A raw view of a [`HostBuffer`] handed to every thread of a team.
///
/// The graph executor guarantees that within one op the threads write
/// disjoint ranges, and that a barrier separates an op's writes from the next
/// op's reads; the arena planner guarantees that tensors alive at the same
/// time do not overlap. Under those rules the slices below never alias a
/// slice being written.
#[derive(Clone, Copy)]
pub struct SharedMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: see the type's documentation: access is partitioned by the executor.
unsafe impl Send for SharedMem {}
// SAFETY: as above.
unsafe impl Sync for SharedMem {}

impl SharedMem {
    /// # Safety
    /// No other thread may write the range while the slice lives.
    pub unsafe fn bytes<'a>(&self, offset: usize, len: usize) -> &'a mut [u8] {
        assert!(offset + len <= self.len, "buffer view out of range");
        // SAFETY: in range (checked above); exclusivity is the caller's
        // promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }

    /// # Safety
    /// As for [`SharedMem::bytes`]; `offset` must be 4-byte aligned.
    pub unsafe fn f32s<'a>(&self, offset: usize, n: usize) -> &'a mut [f32] {
        assert!(offset + n * 4 <= self.len, "buffer view out of range");
        assert_eq!(offset % 4, 0, "misaligned f32 view");
        // SAFETY: in range and aligned (checked above); exclusivity is the
        // caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset) as *mut f32, n) }
    }

    /// # Safety
    /// As for `f32s`: nobody else accesses these words meanwhile.
    pub unsafe fn u32s<'a>(&self, offset: usize, n: usize) -> &'a mut [u32] {
        assert!(offset + n * 4 <= self.len, "buffer view out of range");
        assert_eq!(offset % 4, 0, "misaligned u32 view");
        // SAFETY: in range and aligned (checked above); exclusivity is the
        // caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset) as *mut u32, n) }
    }

    /// The `len` bytes at `offset`, as a view of their own.
    pub fn sub(self, offset: usize, len: usize) -> SharedMem {
        assert!(offset + len <= self.len, "buffer view out of range");
        SharedMem {
            ptr: self.ptr.wrapping_add(offset),
            len,
        }
    }

    /// The start of `n` f32s at `offset`, for writers that share a range with
    /// other threads at a finer grain than a slice can (disjoint columns).
    pub fn f32_ptr(&self, offset: usize, n: usize) -> *mut f32 {
        assert!(offset + n * 4 <= self.len, "buffer view out of range");
        assert_eq!(offset % 4, 0, "misaligned f32 view");
        self.ptr.wrapping_add(offset) as *mut f32
    }

    /// A read-only view of bytes: other threads may read the range too.
    ///
    /// # Safety
    /// No thread may write the range while the slice lives.
    pub unsafe fn bytes_ref<'a>(&self, offset: usize, len: usize) -> &'a [u8] {
        assert!(offset + len <= self.len, "buffer view out of range");
        // SAFETY: in range (checked above); no writer is the caller's
        // promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) }
    }

    /// # Safety
    /// Nobody writes these words while the view is alive.
    pub unsafe fn u32s_ref<'a>(&self, offset: usize, n: usize) -> &'a [u32] {
        assert!(offset + n * 4 <= self.len, "buffer view out of range");
        assert_eq!(offset % 4, 0, "misaligned u32 view");
        // SAFETY: in range and aligned (checked above); no writer is the
        // caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset) as *const u32, n) }
    }

    /// A read-only view: other threads may read the range too.
    ///
    /// # Safety
    /// No thread may write the range while the slice lives; `offset` must
    /// be 4-byte aligned.
    pub unsafe fn f32s_ref<'a>(&self, offset: usize, n: usize) -> &'a [f32] {
        self.f32_ptr(offset, n);
        // SAFETY: in range and aligned (checked by `f32_ptr`); no writer is
        // the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset) as *const f32, n) }
    }

    /// As [`SharedMem::f32s_ref`], for f16 (`offset` 2-byte aligned).
    ///
    /// # Safety
    /// As for [`SharedMem::f32s_ref`].
    pub unsafe fn f16s_ref<'a>(&self, offset: usize, n: usize) -> &'a [half::f16] {
        assert!(offset + n * 2 <= self.len, "buffer view out of range");
        assert_eq!(offset % 2, 0, "misaligned f16 view");
        // SAFETY: in range and aligned (checked above); no writer is the
        // caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset) as *const half::f16, n) }
    }
}

/// Host memory this process may still use: `MemAvailable` from
/// `/proc/meminfo`, lowered to the cgroup's remaining limit where one is set
/// (containers and CI runners, where `MemAvailable` shows the whole host).
/// `None` off Linux or where neither is readable.
pub fn available_host_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let available = meminfo.as_deref().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    });
    let read_u64 = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    // cgroup v2: "max" (no limit) does not parse and is skipped.
    let cgroup = read_u64("/sys/fs/cgroup/memory.max")
        .zip(read_u64("/sys/fs/cgroup/memory.current"))
        .map(|(max, current)| max.saturating_sub(current));
    match (available, cgroup) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}
