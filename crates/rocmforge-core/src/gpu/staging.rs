//! Where the tensors that cross between the parts of a split graph
//! ([`crate::graph::split`]) wait in a GPU backend's host-visible readback
//! region: a part's imports are written there by the host and copied into
//! the arena before its kernels, its exports copied there after them.

use crate::backend::BackendError;
use crate::graph::split::GraphPart;
use crate::graph::{Graph, TensorId};
use crate::plan::ArenaPlan;

/// Alignment padding a readback region keeps beyond a part's bytes: 256
/// for each of up to 16 tensors (a host MoE part moves four).
pub const STAGING_SLACK: u64 = 16 * 256;

/// One tensor's place in the readback region and in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staged {
    pub tensor: TensorId,
    /// Byte offset in the host-visible buffer.
    pub host: u64,
    /// Byte offset in the arena.
    pub arena: u64,
    pub bytes: usize,
}

/// A part's imports and exports, laid out one after another (256-aligned)
/// in the readback region that starts at `base` and holds `capacity`
/// bytes.
pub fn stage_part(
    graph: &Graph,
    plan: &ArenaPlan,
    part: &GraphPart,
    base: u64,
    capacity: u64,
) -> Result<(Vec<Staged>, Vec<Staged>), BackendError> {
    // `end`: the end of the last tensor placed; `at`: where the next goes.
    let (mut at, mut end) = (0u64, 0u64);
    let mut place = |list: &[TensorId]| -> Vec<Staged> {
        list.iter()
            .map(|&t| {
                let bytes = graph.tensor(t).bytes();
                let s = Staged {
                    tensor: t,
                    host: base + at,
                    arena: plan.offsets[t] as u64,
                    bytes,
                };
                end = at + bytes as u64;
                at = end.next_multiple_of(256);
                s
            })
            .collect()
    };
    let imports = place(&part.imports);
    let exports = place(&part.exports);
    if end > capacity {
        return Err(BackendError::ExceedsReservation {
            what: "readback region (a part's imports and exports)",
            needed: end,
            reserved: capacity,
        });
    }
    Ok((imports, exports))
}

/// Copies f32 values into host-visible bytes.
pub fn write_f32s(dst: &mut [u8], src: &[f32]) {
    for (d, v) in dst.chunks_exact_mut(4).zip(src) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
}

/// Copies host-visible bytes into f32 values.
pub fn read_f32s(dst: &mut [f32], src: &[u8]) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
    }
}
