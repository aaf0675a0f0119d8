//! The lattice search tables of the IQ quantizers: ggml's `iq2xs_init_impl` (IQ2_XXS,
//! IQ2_XS, IQ2_S, IQ1_S/IQ1_M) and `iq3xs_init_impl` (IQ3_XXS, IQ3_S), built once, lazily,
//! behind a [`OnceLock`] each (ggml builds them in `ggml_quantize_init`).
//!
//! For a grid of `G` points in `N` dimensions with `B` bits per coordinate:
//! - `grid[k]`: point `k` as odd integers `2l + 1` (`l` its level per coordinate);
//! - `map[u]` for every packed level vector `u` (`B` bits per coordinate): the index of the
//!   grid point with those levels, or `-(o + 1)` where `neighbours[o]` is a count `n`
//!   followed by `n` candidate grid indices;
//! - the candidates are every grid point at one of the `nwant` smallest distinct squared
//!   distances from `u`, ordered by (distance, index) — what ggml's `qsort` with
//!   `iq2_compare_func` produces.
//!
//! The grids themselves are derived from the dequantization tables in
//! [`super::iq_tables`] (ggml keeps a second copy, `kgrid_*`, in the init functions;
//! `cargo xtask verify quants` checks that both agree, and the quantizers' byte-identity
//! with `ggml_quantize_chunk` checks the search tables).

#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

use crate::util::nearest_int;

use super::iq_tables::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};

/// A lattice grid and its search tables (see the module docs).
#[derive(Debug)]
pub struct IqGrid<const N: usize> {
    /// Grid points as odd integers `2l + 1`.
    pub grid: Vec<[i8; N]>,
    /// Level vector → grid index, or `-(offset + 1)` into `neighbours`.
    pub map: Vec<i32>,
    /// Neighbour lists: a count, then grid indices.
    pub neighbours: Vec<u16>,
}

impl<const N: usize> IqGrid<N> {
    /// Builds the tables from the grid's level vectors (`levels[k][i]` in `0..2^bits`).
    fn build(levels: &[[u8; N]], bits: u32, map_size: usize, nwant: usize) -> Self {
        let grid: Vec<[i8; N]> = levels.iter().map(|l| l.map(|v| 2 * v as i8 + 1)).collect();
        let mut map = vec![-1i32; map_size];
        for (k, l) in levels.iter().enumerate() {
            let mut u = 0usize;
            for (i, &v) in l.iter().enumerate() {
                u |= (v as usize) << (bits as usize * i);
            }
            map[u] = k as i32;
        }
        let mask = (1usize << bits) - 1;
        let mut neighbours = Vec::new();
        let mut dist = vec![0i32; grid.len()];
        let mut cand: Vec<(i32, u16)> = Vec::new();
        for u in 0..map_size {
            if map[u] >= 0 {
                continue;
            }
            let pos: [i32; N] = std::array::from_fn(|k| 2 * ((u >> (bits as usize * k)) & mask) as i32 + 1);
            // The `nwant` smallest distinct distances, ascending.
            let mut smallest = [i32::MAX; 3];
            for (d, g) in dist.iter_mut().zip(&grid) {
                let mut d2 = 0;
                for k in 0..N {
                    let e = g[k] as i32 - pos[k];
                    d2 += e * e;
                }
                *d = d2;
                let s = &mut smallest[..nwant];
                if d2 < s[nwant - 1] && !s.contains(&d2) {
                    s[nwant - 1] = d2;
                    s.sort_unstable();
                }
            }
            let limit = smallest[..nwant].iter().copied().filter(|&d| d != i32::MAX).max().unwrap_or(i32::MAX);
            cand.clear();
            cand.extend(dist.iter().enumerate().filter(|(_, &d)| d <= limit).map(|(j, &d)| (d, j as u16)));
            cand.sort_unstable();
            map[u] = -(neighbours.len() as i32 + 1);
            neighbours.push(cand.len() as u16);
            neighbours.extend(cand.iter().map(|&(_, j)| j));
        }
        IqGrid { grid, map, neighbours }
    }

    /// The neighbour list (count first) that `map[u] < 0` points to.
    #[inline]
    pub fn neighbours_of(&self, map_value: i32) -> &[u16] {
        let start = (-map_value - 1) as usize;
        let n = self.neighbours[start] as usize;
        &self.neighbours[start + 1..start + 1 + n]
    }

    /// The scale scan every IQ2/IQ3 quantizer runs per block (ggml writes it out once per
    /// type): for `is` in `-steps..=steps`, quantize the groups of `N` at inverse scale
    /// `(2·kmax − 1 + is·step) / max` (`bits` per level), snap groups off the grid to their
    /// best neighbour, and keep the weighted least-squares scale that fits best. Updates
    /// `scale`, `l` and `on_grid` only when a candidate wins, as ggml does.
    #[allow(clippy::too_many_arguments)]
    pub fn scan_scale(
        &self,
        xval: &[f32],
        weight: &[f32],
        waux: &[f32],
        (kmax, bits): (i32, u32),
        (steps, step, max): (i32, f32, f32),
        scale: &mut f32,
        l: &mut [i8],
        on_grid: &mut [bool],
    ) {
        let n = xval.len();
        let mut laux = [0i8; 32];
        let mut on_grid_aux = [true; 8];
        let mut best = 0f32;
        for is in -steps..=steps {
            let id = ((2 * kmax - 1) as f32 + is as f32 * step) / max;
            let this_scale = 1.0 / id;
            for k in 0..n / N {
                let g = N * k..N * k + N;
                let mut u = 0usize;
                for i in 0..N {
                    let li = nearest_int(0.5 * (id * xval[N * k + i] - 1.0));
                    laux[N * k + i] = 0.max((kmax - 1).min(li)) as i8;
                    u |= (laux[N * k + i] as usize) << (bits as usize * i);
                }
                let m = self.map[u];
                on_grid_aux[k] = m >= 0;
                if m < 0 {
                    self.find_best_neighbour(m, &xval[g.clone()], &waux[g.clone()], this_scale, &mut laux[g]);
                }
            }
            let mut sumqx = 0f32;
            let mut sumq2 = 0f32;
            for i in 0..n {
                let w = weight[i];
                let q = (2 * laux[i] as i32 + 1) as f32;
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                *scale = sumqx / sumq2;
                best = *scale * sumqx;
                l.copy_from_slice(&laux[..n]);
                on_grid.copy_from_slice(&on_grid_aux[..n / N]);
            }
        }
    }

    /// After [`IqGrid::scan_scale`]: when some group's best levels were off the grid,
    /// re-quantize the groups (only those off the grid, or every group with `all`, as
    /// ggml's iq3_s does) at the chosen scale, snap to the grid, and refit the scale.
    #[allow(clippy::too_many_arguments)]
    pub fn refit_off_grid(
        &self,
        xval: &[f32],
        weight: &[f32],
        waux: &[f32],
        (kmax, bits): (i32, u32),
        all: bool,
        scale: &mut f32,
        l: &mut [i8],
        on_grid: &[bool],
    ) {
        if !(on_grid.iter().any(|&b| !b) && *scale > 0.0) {
            return;
        }
        let n = xval.len();
        let id = 1.0 / *scale;
        for k in 0..n / N {
            if on_grid[k] && !all {
                continue;
            }
            let g = N * k..N * k + N;
            let mut u = 0usize;
            for i in 0..N {
                let li = 0.max((kmax - 1).min(nearest_int(0.5 * (id * xval[N * k + i] - 1.0))));
                u |= (li as usize) << (bits as usize * i);
                l[N * k + i] = li as i8;
            }
            let m = self.map[u];
            if m < 0 {
                self.find_best_neighbour(m, &xval[g.clone()], &waux[g.clone()], *scale, &mut l[g]);
            }
        }
        let mut sumqx = 0f32;
        let mut sumq2 = 0f32;
        for i in 0..n {
            let w = weight[i];
            let q = (2 * l[i] as i32 + 1) as f32;
            sumqx += w * xval[i] * q;
            sumq2 += w * q * q;
        }
        if sumq2 > 0.0 {
            *scale = sumqx / sumq2;
        }
    }

    /// `iq2_find_best_neighbour` / `iq3_find_best_neighbour`: the candidate minimising
    /// `Σ w·(scale·q − x)²` (first on ties); writes its levels `(q − 1)/2` to `l`.
    #[inline]
    pub fn find_best_neighbour(&self, map_value: i32, xval: &[f32], weight: &[f32], scale: f32, l: &mut [i8]) -> usize {
        let mut best_d2 = f32::MAX;
        let mut grid_index = usize::MAX;
        for &j in self.neighbours_of(map_value) {
            let pg = &self.grid[j as usize];
            let mut d2 = 0f32;
            for i in 0..N {
                let q = pg[i] as f32;
                let diff = scale * q - xval[i];
                d2 += weight[i] * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                grid_index = j as usize;
            }
        }
        // ggml asserts a candidate was found; with NaN distances none is, and it aborts.
        // Here the first candidate stands in, so a NaN input cannot panic.
        if grid_index == usize::MAX {
            grid_index = self.neighbours_of(map_value)[0] as usize;
        }
        let pg = &self.grid[grid_index];
        for i in 0..N {
            l[i] = (pg[i] - 1) / 2;
        }
        grid_index
    }
}

fn levels8(grid: &[u64], level: impl Fn(u8) -> u8) -> Vec<[u8; 8]> {
    grid.iter().map(|v| v.to_le_bytes().map(&level)).collect()
}

fn levels4(grid: &[u32], level: impl Fn(u8) -> u8) -> Vec<[u8; 4]> {
    grid.iter().map(|v| v.to_le_bytes().map(&level)).collect()
}

/// The IQ2 grids' byte values 8, 25, 43 are levels 0, 1, 2.
fn iq2_level(b: u8) -> u8 {
    match b {
        8 => 0,
        25 => 1,
        _ => 2,
    }
}

/// Size of the IQ2/IQ1 level-vector map (`kmap_size` of `iq2xs_init_impl`).
const IQ2_MAP_SIZE: usize = 43692;
/// Size of the IQ3 level-vector map (`kmap_size` of `iq3xs_init_impl`).
const IQ3_MAP_SIZE: usize = 4096;

/// IQ2_XXS: 256 points, 2 nearest distances.
pub fn iq2xxs() -> &'static IqGrid<8> {
    static G: OnceLock<IqGrid<8>> = OnceLock::new();
    G.get_or_init(|| IqGrid::build(&levels8(&IQ2XXS_GRID, iq2_level), 2, IQ2_MAP_SIZE, 2))
}

/// IQ2_XS: 512 points, 2 nearest distances.
pub fn iq2xs() -> &'static IqGrid<8> {
    static G: OnceLock<IqGrid<8>> = OnceLock::new();
    G.get_or_init(|| IqGrid::build(&levels8(&IQ2XS_GRID, iq2_level), 2, IQ2_MAP_SIZE, 2))
}

/// IQ2_S: 1024 points, the nearest distance only.
pub fn iq2s() -> &'static IqGrid<8> {
    static G: OnceLock<IqGrid<8>> = OnceLock::new();
    G.get_or_init(|| IqGrid::build(&levels8(&IQ2S_GRID, iq2_level), 2, IQ2_MAP_SIZE, 1))
}

/// IQ1_S and IQ1_M: the 2048-point ternary grid (-1, 0, 1 are levels 0, 1, 2), 3 nearest
/// distances.
pub fn iq1s() -> &'static IqGrid<8> {
    static G: OnceLock<IqGrid<8>> = OnceLock::new();
    G.get_or_init(|| IqGrid::build(&levels8(&IQ1S_GRID, |b| (b as i8 + 1) as u8), 2, IQ2_MAP_SIZE, 3))
}

/// IQ3_XXS: 256 points (bytes 4, 12, …, 52, 62 are levels 0..8), 2 nearest distances.
pub fn iq3xxs() -> &'static IqGrid<4> {
    static G: OnceLock<IqGrid<4>> = OnceLock::new();
    G.get_or_init(|| {
        IqGrid::build(&levels4(&IQ3XXS_GRID, |b| if b == 62 { 7 } else { (b - 4) / 8 }), 3, IQ3_MAP_SIZE, 2)
    })
}

/// IQ3_S: 512 points (bytes 1, 3, …, 15 are levels 0..8), 3 nearest distances.
pub fn iq3s() -> &'static IqGrid<4> {
    static G: OnceLock<IqGrid<4>> = OnceLock::new();
    G.get_or_init(|| IqGrid::build(&levels4(&IQ3S_GRID, |b| (b - 1) / 2), 3, IQ3_MAP_SIZE, 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_points_map_to_themselves_and_others_to_nearest() {
        let g = iq3xxs();
        assert_eq!(g.grid.len(), 256);
        let mut on = 0;
        for u in 0..IQ3_MAP_SIZE {
            let m = g.map[u];
            if m >= 0 {
                on += 1;
                continue;
            }
            let pos: [i32; 4] = std::array::from_fn(|k| 2 * ((u >> (3 * k)) & 7) as i32 + 1);
            let d = |j: u16| -> i32 { (0..4).map(|k| (g.grid[j as usize][k] as i32 - pos[k]).pow(2)).sum() };
            let n = g.neighbours_of(m);
            assert!(!n.is_empty());
            // Sorted by (distance, index), at most 2 distinct distances, the first the minimum.
            let ds: Vec<i32> = n.iter().map(|&j| d(j)).collect();
            assert!(n.windows(2).all(|w| (d(w[0]), w[0]) < (d(w[1]), w[1])));
            let min = (0..256u16).map(d).min().unwrap();
            assert_eq!(ds[0], min);
            let mut distinct = ds.clone();
            distinct.dedup();
            assert!(distinct.len() <= 2);
            // Nothing closer than the largest listed distance is left out.
            let lim = *ds.last().unwrap();
            assert_eq!((0..256u16).filter(|&j| d(j) <= lim).count(), n.len());
        }
        assert_eq!(on, 256);
    }
}
