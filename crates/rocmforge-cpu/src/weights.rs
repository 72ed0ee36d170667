//! Weights as views into the mapped GGUF file: the CPU backend's "upload" is
//! resolving each weight to a pointer once.
//!
//! On CPUs with the interleaved Q4_0 kernels, the file is mapped a second
//! time copy-on-write and the Q4_0 matrices are rewritten in place into the
//! eight-row layout of `quant_dot::q4_0x8`: the pages of those matrices
//! become private copies of the same size (resident memory stays the file
//! size) and every other weight is still read straight from the file.

use std::fs::File;
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};
use rocmforge_core::backend::BackendError;
use rocmforge_core::gguf::GgufFile;
use rocmforge_core::model::{Model, WeightId};
use rocmforge_core::quant::QuantType;

use crate::kernels::quant_dot::q4_0x8;

#[derive(Clone, Copy)]
pub struct WeightView {
    pub ty: QuantType,
    pub cols: usize,
    pub rows: usize,
    /// Stored in the `q4_0x8` layout rather than in file order.
    pub interleaved: bool,
    ptr: *const u8,
    len: usize,
}

// SAFETY: points into the read-only mapping kept alive by `MappedWeights`.
unsafe impl Send for WeightView {}
unsafe impl Sync for WeightView {}

impl WeightView {
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: ptr/len came from a slice of the mapping, which outlives
        // every WeightView (both are owned by the same `MappedWeights`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn row_bytes(&self) -> usize {
        self.len / self.rows
    }

    /// An F32 vector (norm, bias, rope factors); alignment checked at load.
    pub fn f32s(&self) -> &[f32] {
        // SAFETY: checked at load: F32, 4-aligned, len a multiple of 4.
        unsafe { std::slice::from_raw_parts(self.ptr as *const f32, self.len / 4) }
    }
}

/// The mapped file and a view per weight id.
pub struct MappedWeights {
    _file: Arc<GgufFile>,
    /// The copy-on-write mapping holding interleaved matrices, if any.
    _private: Option<MmapMut>,
    pub views: Vec<WeightView>,
    pub bytes: u64,
}

impl MappedWeights {
    pub fn new(model: &Model) -> Result<MappedWeights, BackendError> {
        let packable = packable_weights(model);
        let mut private = match (packable.iter().any(|&p| p), model.file.path()) {
            (true, Some(path)) => Some(map_private(path, model.file.file_size())?),
            _ => None,
        };
        let base = model.file.as_bytes().as_ptr();
        let mut views = Vec::with_capacity(model.weights.table.len());
        for (id, w) in model.weights.table.iter().enumerate() {
            let data = model.weight_bytes(id);
            if w.ty == QuantType::F32 && !(data.as_ptr() as usize).is_multiple_of(4) {
                return Err(BackendError::Device(format!(
                    "tensor '{}' is not 4-byte aligned in memory",
                    w.name
                )));
            }
            let mut view = WeightView {
                ty: w.ty,
                cols: w.cols,
                rows: w.rows,
                interleaved: false,
                ptr: data.as_ptr(),
                len: data.len(),
            };
            if let (true, Some(map)) = (packable[id], private.as_mut()) {
                // The same bytes at the same offset in the private mapping.
                let at = data.as_ptr() as usize - base as usize;
                let bytes = &mut map[at..at + data.len()];
                q4_0x8::pack_in_place(bytes, w.rows, w.cols);
                view.ptr = bytes.as_ptr();
                view.interleaved = true;
            }
            views.push(view);
        }
        Ok(MappedWeights {
            _file: Arc::clone(&model.file),
            _private: private,
            views,
            bytes: model.weights.table.iter().map(|w| w.n_bytes).sum(),
        })
    }

    /// Touches every page of the weights so the first token doesn't pay for
    /// page faults and the load time printed is the real one.
    pub fn prefault(&self, progress: &mut dyn FnMut(u64, u64)) {
        const PAGE: usize = 4096;
        let mut done = 0u64;
        let mut sink = 0u8;
        for v in &self.views {
            let bytes = v.bytes();
            for i in (0..bytes.len()).step_by(PAGE) {
                // SAFETY: in bounds; volatile so the read isn't optimised away.
                sink ^= unsafe { std::ptr::read_volatile(bytes.as_ptr().add(i)) };
            }
            done += bytes.len() as u64;
            progress(done, self.bytes);
        }
        std::hint::black_box(sink);
    }
}

/// Which weights get the interleaved layout: Q4_0 matrices that only ever
/// meet matmuls (the embedding table too when the output head shares it,
/// since the embedding lookup can read the layout).
fn packable_weights(model: &Model) -> Vec<bool> {
    let w = &model.weights;
    let mut matmul: Vec<WeightId> = vec![w.output];
    for l in &w.layers {
        matmul.extend([l.wq, l.wk, l.wv, l.wo, l.w_gate, l.w_up, l.w_down]);
    }
    let mut packable = vec![false; w.table.len()];
    for id in matmul {
        let r = &w.table[id];
        packable[id] = q4_0x8::can_pack(r.ty, r.rows, r.cols);
    }
    packable
}

fn map_private(path: &std::path::Path, size: u64) -> Result<MmapMut, BackendError> {
    let err =
        |e: String| BackendError::Device(format!("mapping {} copy-on-write: {e}", path.display()));
    let file = File::open(path).map_err(|e| err(e.to_string()))?;
    // SAFETY: a private mapping: our writes never reach the file. As with
    // the read-only mapping, another process changing the file while it is
    // mapped could change the weights we read.
    let map = unsafe { MmapOptions::new().map_copy(&file) }.map_err(|e| err(e.to_string()))?;
    if map.len() as u64 != size {
        return Err(err(format!(
            "the file changed size since it was opened ({} bytes, was {size})",
            map.len()
        )));
    }
    Ok(map)
}
