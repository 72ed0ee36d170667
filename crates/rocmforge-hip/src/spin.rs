//! The spin test: a kernel that polls a flag in pinned memory until the
//! host sets it, waited for with the bounded wait every run uses, so the
//! timeout path can be tested on any GPU.

use std::ffi::c_void;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use rocmforge_core::gpu::device::Stall;
use rocmforge_core::gpu::push::SpinPush;
use rocmforge_core::gpu::workgroup_size;

use crate::backend::HipDevice;
use crate::commands::stall;
use crate::error::Hip;
use crate::memory::Pinned;

impl HipDevice {
    pub(crate) fn spin_test(&mut self, timeout: Duration) -> Result<(), Stall> {
        let function = self.kernels.get(&self.rt, "spin").map_err(Stall::Failed)?;
        // flag[0]: set by the host; flag[1]: the kernel's poll count.
        let flag = Pinned::alloc(&self.rt, 64).map_err(Stall::Failed)?;
        let words = flag.at(0).cast::<u32>();
        // SAFETY: two aligned u32 inside the fresh allocation, unused yet.
        unsafe { std::ptr::write_bytes(words, 0, 2) };
        // Bounded only by the flag: u64::MAX polls outlast any test.
        let mut push = SpinPush {
            flag: flag.device_ptr(0).0,
            bound: u64::MAX,
        };
        let mut params: [*mut c_void; 1] = [(&mut push as *mut SpinPush).cast()];
        let block = workgroup_size("spin").unwrap_or(1);
        // SAFETY: `spin(SpinPush)`: one by-value parameter; the kernel reads
        // flag[0] and writes flag[1], inside the pinned allocation, which is
        // freed only after the kernel is seen to finish (and leaked
        // otherwise).
        let launched = unsafe {
            (self.rt).launch_kernel(
                function,
                [1, 1, 1],
                [block, 1, 1],
                0,
                self.stream,
                &mut params,
            )
        };
        if let Err(e) = launched {
            // SAFETY: the flag is pinned and mapped; a queued launch ends
            // once it is set.
            unsafe { std::ptr::write_volatile(words, 1) };
            self.drain(timeout).map_err(stall)?;
            // SAFETY: nothing uses the flag any more.
            let _ = unsafe { flag.free(&self.rt) };
            return Err(Stall::Failed(Hip(e).into()));
        }
        match self.drain(timeout) {
            Ok(()) => {
                // SAFETY: the kernel finished.
                let _ = unsafe { flag.free(&self.rt) };
                Ok(())
            }
            Err(e) => {
                // SAFETY: the flag word is pinned and mapped; the kernel
                // polls it with volatile loads. The allocation is leaked:
                // the kernel may still read it.
                unsafe { std::ptr::write_volatile(words, 1) };
                fence(Ordering::SeqCst);
                Err(stall(e))
            }
        }
    }
}
