//! The weight upload: straight from the file mapping into host-visible
//! regions on a unified-memory device, else through the staging buffer in
//! chunks, one bounded wait per chunk.

use std::time::Duration;

use ash::vk;
use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::device::Piece;

use crate::backend::VulkanDevice;
use crate::error::Check;
use crate::memory::Allocation;

/// Copies every piece into its mapped region.
///
/// # Safety
/// Every piece lies inside its region, every region is mapped, and no
/// command uses the regions yet.
pub(crate) unsafe fn upload_mapped(
    regions: &[Allocation],
    pieces: &[Piece],
    progress: &mut dyn FnMut(u64, u64),
) {
    let total: u64 = pieces.iter().map(|p| p.bytes.len() as u64).sum();
    let mut done = 0;
    progress(0, total);
    for p in pieces {
        // SAFETY: the caller's contract.
        let dst = unsafe { regions[p.region].host_slice(p.offset, p.bytes.len()) };
        dst.copy_from_slice(p.bytes);
        done += p.bytes.len() as u64;
        progress(done, total);
    }
}

impl VulkanDevice {
    /// Copies `pieces` through `staging`, flushing whenever it is full.
    pub(crate) fn upload_staged(
        &mut self,
        staging: &Allocation,
        regions: &[Allocation],
        pieces: &[Piece],
        timeout: Duration,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), BackendError> {
        let total: u64 = pieces.iter().map(|p| p.bytes.len() as u64).sum();
        let cb = self.cmds.allocate(&self.gpu.device)?;
        let mut pending: Vec<(usize, vk::BufferCopy)> = Vec::new();
        let (mut fill, mut done) = (0u64, 0u64);
        let flush = |dev: &mut Self, pending: &mut Vec<(usize, vk::BufferCopy)>| {
            let d = &dev.gpu.device;
            let begin = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            // SAFETY: `cb` is not pending (the previous flush waited), so it
            // can be re-begun (the pool allows resets); the copy ranges are
            // inside both buffers.
            unsafe {
                d.begin_command_buffer(cb, &begin)
                    .check("vkBeginCommandBuffer")?;
                for (region, copy) in pending.drain(..) {
                    d.cmd_copy_buffer(cb, staging.buffer, regions[region].buffer, &[copy]);
                }
                d.end_command_buffer(cb).check("vkEndCommandBuffer")?;
            }
            dev.wait(cb, timeout)
                .map_err(|s| s.error("the weight upload"))
        };
        progress(0, total);
        for p in pieces {
            let mut at = 0usize;
            while at < p.bytes.len() {
                if fill == staging.size {
                    flush(self, &mut pending)?;
                    fill = 0;
                }
                let n = (p.bytes.len() - at).min((staging.size - fill) as usize);
                // SAFETY: `fill + n <= staging.size`, and no copy reading
                // the staging buffer is pending (flushed above).
                unsafe { staging.host_slice(fill, n) }.copy_from_slice(&p.bytes[at..at + n]);
                let copy = vk::BufferCopy {
                    src_offset: fill,
                    dst_offset: p.offset + at as u64,
                    size: n as u64,
                };
                pending.push((p.region, copy));
                (fill, at, done) = (fill + n as u64, at + n, done + n as u64);
                progress(done, total);
            }
        }
        if !pending.is_empty() {
            flush(self, &mut pending)?;
        }
        // SAFETY: every submit of `cb` was waited for.
        unsafe { self.cmds.free(&self.gpu.device, cb) };
        Ok(())
    }
}
