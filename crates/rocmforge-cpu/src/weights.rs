//! Weights as views into the mapped GGUF file: the CPU backend's "upload" is
//! resolving each weight to a pointer once.
//!
//! On CPUs with the interleaved Q4_0 kernels, Q4_0 matrices are copied once
//! into one anonymous region (huge pages where the OS gives them) in the
//! eight-row layout of `quant_dot::q4_0x8`, and their pages of the file
//! mapping are released: resident memory stays the file size. Every other
//! weight is read straight from the file, its pages touched at load so the
//! first step does not fault them in, except mixture-of-experts stacks,
//! which fault in as steps route to them.

use std::sync::Arc;

use memmap2::{Advice, MmapMut};
use rocmforge_core::backend::BackendError;
use rocmforge_core::gguf::GgufFile;
use rocmforge_core::model::{FfnWeights, Model, WeightId};
use rocmforge_core::quant::QuantType;

use crate::kernels::quant_dot::q4_0x8;

#[derive(Clone, Copy)]
pub struct WeightView {
    pub ty: QuantType,
    pub cols: usize,
    pub rows: usize,
    /// Stacked matrices (experts); `rows` counts the rows of all of them.
    pub experts: usize,
    /// Stored in the `q4_0x8` layout rather than in file order.
    pub interleaved: bool,
    ptr: *const u8,
    len: usize,
}

// SAFETY: points into the read-only mapping kept alive by `MappedWeights`.
unsafe impl Send for WeightView {}
// SAFETY: as above: the mapping is only ever read.
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

    /// Rows of one expert.
    pub fn expert_rows(&self) -> usize {
        self.rows / self.experts
    }

    /// An F32 vector (norm, bias, rope factors); alignment checked at load.
    pub fn f32s(&self) -> &[f32] {
        // SAFETY: checked at load: F32, 4-aligned, len a multiple of 4.
        unsafe { std::slice::from_raw_parts(self.ptr as *const f32, self.len / 4) }
    }
}

/// The mapped file, the repacked region and a view per weight id.
pub struct MappedWeights {
    _file: Arc<GgufFile>,
    /// Interleaved copies of the Q4_0 matrices, if any.
    repacked: Option<MmapMut>,
    pub views: Vec<WeightView>,
    pub bytes: u64,
}

impl MappedWeights {
    /// Views of every weight; with `repack`, Q4_0 matrices in the
    /// interleaved layout. Every page is touched before this returns, so the
    /// first token doesn't pay for page faults and the load time printed is
    /// the real one; `progress(done, total)` follows the bytes.
    pub fn load(
        model: &Model,
        repack: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<MappedWeights, BackendError> {
        let packable = if repack {
            packable_weights(model)
        } else {
            vec![false; model.weights.table.len()]
        };
        let packed_bytes: usize = (0..packable.len())
            .filter(|&id| packable[id])
            .map(|id| model.weight_bytes(id).len().next_multiple_of(64))
            .sum();
        let mut repacked = (packed_bytes > 0)
            .then(|| {
                let map =
                    MmapMut::map_anon(packed_bytes).map_err(|_| BackendError::OutOfMemory {
                        what: "repacked weights",
                        bytes: packed_bytes as u64,
                    })?;
                // Fewer page faults while filling it, fewer TLB misses after;
                // only advice.
                let _ = map.advise(Advice::HugePage);
                Ok::<_, BackendError>(map)
            })
            .transpose()?;
        let file_start = model.file.as_bytes().as_ptr() as usize;
        let total = model.weights.table.iter().map(|w| w.n_bytes).sum();
        let mut done = 0;
        let mut at = 0;
        let mut views = Vec::with_capacity(model.weights.table.len());
        for (id, w) in model.weights.table.iter().enumerate() {
            let data = model.weight_bytes(id);
            if w.ty == QuantType::F32 && !(data.as_ptr() as usize).is_multiple_of(4) {
                return Err(BackendError::Alignment {
                    tensor: w.name.clone(),
                    reason: "F32 data must be 4-byte aligned in memory".into(),
                });
            }
            let mut view = WeightView {
                ty: w.ty,
                cols: w.cols,
                rows: w.rows,
                experts: w.experts,
                interleaved: false,
                ptr: data.as_ptr(),
                len: data.len(),
            };
            if let (true, Some(map)) = (packable[id], repacked.as_mut()) {
                let dst = &mut map[at..at + data.len()];
                q4_0x8::pack(data, w.rows, w.cols, dst);
                view.ptr = dst.as_ptr();
                view.interleaved = true;
                at += data.len().next_multiple_of(64);
                let offset = (data.as_ptr() as usize - file_start) as u64;
                model.file.release_pages(offset..offset + data.len() as u64);
            } else if w.experts == 1 {
                prefault(data);
            }
            // Expert stacks stay unread: a step reads only its tokens'
            // experts, so of a 30B-A3B file mostly the experts in use
            // become resident, and a file larger than RAM still runs (at
            // the page cache's speed for the cold experts).
            views.push(view);
            done += data.len() as u64;
            progress(done, total);
        }
        Ok(MappedWeights {
            _file: Arc::clone(&model.file),
            repacked,
            views,
            bytes: total,
        })
    }

    /// Whether some weights live in a region of their own (a second
    /// allocation besides the file mapping).
    pub fn has_repacked_region(&self) -> bool {
        self.repacked.is_some()
    }
}

/// Touches every page of `data`.
fn prefault(data: &[u8]) {
    const PAGE: usize = 4096;
    let mut sink = 0u8;
    for i in (0..data.len()).step_by(PAGE) {
        // SAFETY: in bounds; volatile so the read isn't optimised away.
        sink ^= unsafe { std::ptr::read_volatile(data.as_ptr().add(i)) };
    }
    std::hint::black_box(sink);
}

/// Which weights get the interleaved layout: Q4_0 matrices that only ever
/// meet matmuls (the embedding table too when the output head shares it,
/// since the embedding lookup can read the layout).
fn packable_weights(model: &Model) -> Vec<bool> {
    let w = &model.weights;
    let mut matmul: Vec<WeightId> = vec![w.output];
    for l in &w.layers {
        matmul.extend([l.wq, l.wk, l.wv, l.wo]);
        // Experts keep the file's layout: `matmul_id` reads one expert's
        // rows at a time.
        if let FfnWeights::Dense { gate, up, down } = l.ffn {
            matmul.extend([gate, up, down]);
        }
    }
    let mut packable = vec![false; w.table.len()];
    for id in matmul {
        let r = &w.table[id];
        packable[id] = q4_0x8::can_pack(r.ty, r.rows, r.cols);
    }
    packable
}
