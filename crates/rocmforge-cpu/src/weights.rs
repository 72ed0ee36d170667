//! Weights as views into the mapped GGUF file: the CPU backend's "upload" is
//! resolving each weight to a pointer once.

use std::sync::Arc;

use rocmforge_core::backend::BackendError;
use rocmforge_core::gguf::GgufFile;
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;

#[derive(Clone, Copy)]
pub struct WeightView {
    pub ty: QuantType,
    pub cols: usize,
    pub rows: usize,
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
    pub views: Vec<WeightView>,
    pub bytes: u64,
}

impl MappedWeights {
    pub fn new(model: &Model) -> Result<MappedWeights, BackendError> {
        let mut views = Vec::with_capacity(model.weights.table.len());
        for (id, w) in model.weights.table.iter().enumerate() {
            let data = model.weight_bytes(id);
            if w.ty == QuantType::F32 && !(data.as_ptr() as usize).is_multiple_of(4) {
                return Err(BackendError::Device(format!(
                    "tensor '{}' is not 4-byte aligned in memory",
                    w.name
                )));
            }
            views.push(WeightView {
                ty: w.ty,
                cols: w.cols,
                rows: w.rows,
                ptr: data.as_ptr(),
                len: data.len(),
            });
        }
        Ok(MappedWeights {
            _file: Arc::clone(&model.file),
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
