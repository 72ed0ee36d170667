//! Rounding onto an i-quant lattice: the lookup tables ggml's quantizers
//! build once (`iq2xs_init_impl`, `iq3xs_init_impl`) and the nearest-point
//! searches that use them.
//!
//! A group of 8 (or 4) magnitudes rounded coordinate by coordinate lands on a
//! point of the full level cube; only a few of those points (256 to 2048) are
//! in the lattice. `map` sends every cube point to its lattice index, or, for
//! points outside, to a precomputed list of the lattice points at the
//! smallest few squared distances (ggml keeps the `nwant` nearest distance
//! shells), and the quantizer picks the best of those by weighted error.
//!
//! Coordinates are handled as ggml does, `2l + 1` for level `l`, so the IQ2
//! levels are 1, 3, 5 and the IQ3 levels 1..15: the real IQ2/IQ3 magnitudes
//! are close to these multiplied by a constant, which the scale absorbs.

use std::sync::OnceLock;

use super::iq_grids::Lattice;

/// A lattice with its cube-point map and neighbour lists.
pub(super) struct LatticeIndex {
    dim: usize,
    bits: u32,
    /// `2l + 1` per coordinate, `dim` per point.
    coords: Vec<i8>,
    /// Per cube point: `Ok(lattice index)` or the range of its neighbours
    /// in `neighbours`.
    map: Vec<Result<u16, (u32, u32)>>,
    neighbours: Vec<u16>,
}

impl LatticeIndex {
    /// The index of `lattice`, built on first use (tens of milliseconds to a
    /// second for IQ1's 2048 points) and then shared.
    pub(super) fn get(lattice: Lattice) -> &'static LatticeIndex {
        static CELLS: [OnceLock<LatticeIndex>; 6] = [const { OnceLock::new() }; 6];
        let (slot, shells) = match lattice {
            Lattice::Iq2Xxs => (0, 2),
            Lattice::Iq2Xs => (1, 2),
            Lattice::Iq2S => (2, 1),
            Lattice::Iq1S => (3, 3),
            Lattice::Iq3Xxs => (4, 2),
            Lattice::Iq3S => (5, 3),
        };
        CELLS[slot].get_or_init(|| LatticeIndex::build(lattice, shells))
    }

    fn build(lattice: Lattice, shells: usize) -> LatticeIndex {
        let (dim, bits) = (lattice.dim(), lattice.bits());
        let mask = (1u16 << bits) - 1;
        let coords: Vec<i8> = lattice
            .points()
            .iter()
            .flat_map(|&p| {
                (0..dim).map(move |c| (2 * ((p >> (bits as usize * c)) & mask) + 1) as i8)
            })
            .collect();
        // The largest cube index uses only the levels the lattice can hold:
        // 0..=2 for 2-bit lattices (ggml's kmap_size 43692), 0..=7 for 3-bit.
        let top_level = if bits == 2 { 2 } else { 7 };
        let map_len = (0..dim).fold(0usize, |acc, c| acc | (top_level << (bits as usize * c))) + 1;
        let mut map: Vec<Result<u16, (u32, u32)>> = vec![Err((0, 0)); map_len];
        for (i, &p) in lattice.points().iter().enumerate() {
            map[p as usize] = Ok(i as u16);
        }
        let npoints = lattice.points().len();
        let mut neighbours = Vec::new();
        let mut dist: Vec<(i32, u16)> = Vec::with_capacity(npoints);
        let mut pos = [0i32; 8];
        for (u, slot) in map.iter_mut().enumerate() {
            if slot.is_ok() {
                continue;
            }
            for (c, p) in pos[..dim].iter_mut().enumerate() {
                *p = 2 * ((u >> (bits as usize * c)) & mask as usize) as i32 + 1;
            }
            dist.clear();
            for (j, g) in coords.chunks_exact(dim).enumerate() {
                let d2: i32 = g
                    .iter()
                    .zip(&pos)
                    .map(|(&a, &b)| (a as i32 - b).pow(2))
                    .sum();
                dist.push((d2, j as u16));
            }
            // The `shells` smallest distinct distances, then every point at
            // one of them, ordered by (distance, index) as ggml's qsort does.
            let mut radii: Vec<i32> = Vec::with_capacity(shells);
            for &(d2, _) in &dist {
                if radii.contains(&d2) {
                    continue;
                }
                if radii.len() < shells {
                    radii.push(d2);
                } else if let Some(max) = radii.iter_mut().max() {
                    if d2 < *max {
                        *max = d2;
                    }
                }
            }
            let limit = radii.iter().copied().max().unwrap_or(i32::MIN);
            let start = neighbours.len() as u32;
            let mut near: Vec<(i32, u16)> = dist
                .iter()
                .copied()
                .filter(|&(d2, _)| d2 <= limit)
                .collect();
            near.sort_unstable();
            neighbours.extend(near.iter().map(|&(_, j)| j));
            *slot = Err((start, neighbours.len() as u32));
        }
        LatticeIndex {
            dim,
            bits,
            coords,
            map,
            neighbours,
        }
    }

    /// `2l + 1` per coordinate of lattice point `index`.
    pub(super) fn coords(&self, index: usize) -> &[i8] {
        &self.coords[index * self.dim..(index + 1) * self.dim]
    }

    /// The cube index of per-coordinate levels `l`.
    pub(super) fn cube_index(&self, l: &[i8]) -> usize {
        l.iter().enumerate().fold(0, |u, (c, &q)| {
            u | ((q as usize) << (self.bits as usize * c))
        })
    }

    /// The lattice index of cube point `l`, or the candidates near it.
    pub(super) fn lookup(&self, l: &[i8]) -> Result<usize, &[u16]> {
        match self.map[self.cube_index(l)] {
            Ok(i) => Ok(i as usize),
            Err((a, b)) => Err(&self.neighbours[a as usize..b as usize]),
        }
    }

    /// Of `candidates`, the point closest to `x` at `scale` by weighted squared
    /// error (the first on ties), written into `l` as levels (ggml
    /// `iq2_find_best_neighbour` / `iq3_find_best_neighbour`). Where no
    /// distance is finite ggml aborts; this takes the first candidate.
    pub(super) fn nearest(
        &self,
        candidates: &[u16],
        x: &[f32],
        w: &[f32],
        scale: f32,
        l: &mut [i8],
    ) -> usize {
        let index = self.closest(candidates.iter().map(|&j| j as usize), |j| {
            let mut d2 = 0.0f32;
            for ((&q, &xv), &wv) in self.coords(j).iter().zip(x).zip(w) {
                let diff = scale * q as f32 - xv;
                d2 += wv * diff * diff;
            }
            d2
        });
        let index = index.unwrap_or(candidates[0] as usize);
        self.store_levels(index, l);
        index
    }

    /// Like [`LatticeIndex::nearest`] with level `l` worth `values[l]` (IQ1's
    /// shifted levels; ggml `iq1_find_best_neighbour2`), searching the whole
    /// lattice if no candidate has a finite distance, as ggml does.
    pub(super) fn nearest_valued(
        &self,
        candidates: &[u16],
        x: &[f32],
        w: &[f32],
        scale: f32,
        values: &[f32; 3],
        l: &mut [i8],
    ) -> usize {
        let dist = |j: usize| {
            let mut d2 = 0.0f32;
            for ((&q, &xv), &wv) in self.coords(j).iter().zip(x).zip(w) {
                let diff = scale * values[((q - 1) / 2) as usize] - xv;
                d2 += wv * diff * diff;
            }
            d2
        };
        let index = self
            .closest(candidates.iter().map(|&j| j as usize), dist)
            .or_else(|| self.closest(0..self.coords.len() / self.dim, dist))
            .unwrap_or(candidates[0] as usize);
        self.store_levels(index, l);
        index
    }

    /// The first of `points` with the smallest `dist` below `f32::MAX`.
    fn closest(
        &self,
        points: impl Iterator<Item = usize>,
        dist: impl Fn(usize) -> f32,
    ) -> Option<usize> {
        let mut best = (f32::MAX, None);
        for j in points {
            let d2 = dist(j);
            if d2 < best.0 {
                best = (d2, Some(j));
            }
        }
        best.1
    }

    fn store_levels(&self, index: usize, l: &mut [i8]) {
        for (q, &c) in l.iter_mut().zip(self.coords(index)) {
            *q = (c - 1) / 2;
        }
    }
}
