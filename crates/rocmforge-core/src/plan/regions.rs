//! Splitting the weight region across device allocations.
//!
//! A device caps one allocation (`maxMemoryAllocationSize`, a HIP heap's
//! largest block) below what a big model needs. Weights are then packed, in
//! order, into as few regions as that cap allows, with no tensor straddling
//! two: a kernel addresses a weight from one base. Decided here so every
//! backend splits the same way.

/// Where one weight went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionAssignment {
    pub region: usize,
    /// Byte offset inside the region, a multiple of the alignment.
    pub offset: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionSplit {
    /// One entry per input size, in order.
    pub assignments: Vec<RegionAssignment>,
    /// Bytes of each region.
    pub region_bytes: Vec<u64>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegionError {
    #[error("tensor {index} needs {bytes} bytes, more than the device's largest allocation ({max} bytes)")]
    TooLarge { index: usize, bytes: u64, max: u64 },
    #[error("alignment {0} is not a power of two")]
    Alignment(u64),
}

/// Packs tensors of `sizes` bytes, each starting at a multiple of `align`,
/// into regions of at most `max_region` bytes. The first region takes as
/// many tensors as fit, then the next, and so on: file order keeps a layer's
/// weights together.
pub fn split_regions(
    sizes: &[u64],
    align: u64,
    max_region: u64,
) -> Result<RegionSplit, RegionError> {
    if !align.is_power_of_two() {
        return Err(RegionError::Alignment(align));
    }
    let mut assignments = Vec::with_capacity(sizes.len());
    let mut region_bytes: Vec<u64> = Vec::new();
    for (index, &bytes) in sizes.iter().enumerate() {
        if bytes > max_region {
            return Err(RegionError::TooLarge {
                index,
                bytes,
                max: max_region,
            });
        }
        let fits = |used: u64| used.next_multiple_of(align) + bytes <= max_region;
        match region_bytes.last_mut() {
            Some(used) if fits(*used) => {
                let offset = used.next_multiple_of(align);
                *used = offset + bytes;
                assignments.push(RegionAssignment {
                    region: region_bytes.len() - 1,
                    offset,
                });
            }
            _ => {
                region_bytes.push(bytes);
                assignments.push(RegionAssignment {
                    region: region_bytes.len() - 1,
                    offset: 0,
                });
            }
        }
    }
    Ok(RegionSplit {
        assignments,
        region_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_in_one_region_when_it_fits() {
        let s = split_regions(&[10, 300, 5], 256, 1 << 20).unwrap();
        assert_eq!(s.region_bytes, vec![773]);
        let offsets: Vec<u64> = s.assignments.iter().map(|a| a.offset).collect();
        assert_eq!(offsets, vec![0, 256, 768]);
    }

    #[test]
    fn splits_without_straddling() {
        let s = split_regions(&[600, 600, 100, 1000], 256, 1024).unwrap();
        let got: Vec<(usize, u64)> = s.assignments.iter().map(|a| (a.region, a.offset)).collect();
        assert_eq!(got, vec![(0, 0), (1, 0), (1, 768), (2, 0)]);
        assert_eq!(s.region_bytes, vec![600, 868, 1000]);
        for (a, &size) in s.assignments.iter().zip(&[600u64, 600, 100, 1000]) {
            assert!(a.offset + size <= s.region_bytes[a.region]);
            assert_eq!(a.offset % 256, 0);
        }
    }

    #[test]
    fn a_tensor_larger_than_the_cap_is_an_error() {
        assert_eq!(
            split_regions(&[10, 2000], 256, 1024),
            Err(RegionError::TooLarge {
                index: 1,
                bytes: 2000,
                max: 1024
            })
        );
        assert_eq!(split_regions(&[1], 3, 10), Err(RegionError::Alignment(3)));
    }
}
