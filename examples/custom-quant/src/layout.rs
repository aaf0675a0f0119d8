//! `q8_demo_x4`: the load-time layout of the AVX2 kernel. Rows are taken 4 at a time;
//! per 4-row group and 32-column block (144 bytes, the size of the 4 original blocks):
//!
//! ```text
//! [d_0 d_1 d_2 d_3]                      4 × f32: the rows' scales, together
//! [q_0[0..16] q_1[0..16] q_2[0..16] q_3[0..16]]    first halves, row after row
//! [q_0[16..32] q_1[16..32] q_2[16..32] q_3[16..32]] second halves
//! ```
//!
//! so the tile kernel reads one group's block as one 144-byte stream and converts each
//! activation block once for 4 rows. The repacked matrix keeps the original size and
//! every 4-row group in its own `4 × row_size` bytes; `matmul` starts tiles at multiples
//! of 16 rows, so a tile always begins at a group.

use quant_kernels::scalar::act::Q8_0_BYTES;
use quant_kernels::Tile;

use crate::kernels::{block_lanes, reduce8};
use crate::Q8_DEMO_BYTES;

/// Rows per group.
pub const GROUP_ROWS: usize = 4;
/// Bytes of one group's block.
pub const GROUP_BLOCK: usize = GROUP_ROWS * Q8_DEMO_BYTES;

/// The layout applies to whole groups of whole blocks.
pub fn applies(rows: usize, cols: usize) -> bool {
    rows > 0 && rows.is_multiple_of(GROUP_ROWS) && cols > 0 && cols.is_multiple_of(32)
}

/// GGUF's `q8_demo` rows → `q8_demo_x4` (see the module docs).
pub fn repack(w: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    assert!(applies(rows, cols), "q8_demo_x4: a {rows} × {cols} matrix is not whole 4-row groups of blocks");
    let nb = cols / 32;
    let row = nb * Q8_DEMO_BYTES;
    assert_eq!(w.len(), rows * row, "q8_demo_x4: bytes of a {rows} × {cols} q8_demo matrix");
    let mut out = vec![0u8; w.len()];
    for g in 0..rows / GROUP_ROWS {
        for b in 0..nb {
            let o = g * GROUP_ROWS * row + b * GROUP_BLOCK;
            for r in 0..GROUP_ROWS {
                let src = &w[(GROUP_ROWS * g + r) * row + b * Q8_DEMO_BYTES..][..Q8_DEMO_BYTES];
                out[o + 4 * r..][..4].copy_from_slice(&src[..4]);
                out[o + 16 + 16 * r..][..16].copy_from_slice(&src[4..20]);
                out[o + 80 + 16 * r..][..16].copy_from_slice(&src[20..36]);
            }
        }
    }
    out
}

/// Checks a tile over repacked rows; returns the blocks per row.
pub(crate) fn check_tile(t: &Tile<'_>, y: &[f32], y_stride: usize) -> usize {
    assert!(t.n.is_multiple_of(32), "q8_demo_x4: {} columns is not a whole number of blocks", t.n);
    assert!(t.rows.is_multiple_of(GROUP_ROWS), "q8_demo_x4: a tile of {} rows is not whole 4-row groups", t.rows);
    let nb = t.n / 32;
    let (row, x_row) = (nb * Q8_DEMO_BYTES, nb * Q8_0_BYTES);
    assert!(t.w_stride == row && t.w.len() >= t.rows * row, "q8_demo_x4: weight rows of the tile");
    if t.tokens > 0 {
        let last = (t.tokens - 1) * t.x_stride + x_row;
        assert!(t.x_stride >= x_row && t.x.len() >= last, "q8_demo_x4: activation rows of the tile");
        assert!(y_stride >= t.rows && y.len() >= (t.tokens - 1) * y_stride + t.rows, "q8_demo_x4: tile output");
    }
    nb
}

/// The portable reader of the layout: the arithmetic of [`crate::kernels::vec_dot_scalar`]
/// over repacked rows (the AVX2 tile falls back to it; tested equal).
pub fn tile_scalar(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = check_tile(t, y, y_stride);
    crate::kernels::trace(crate::kernels::Path::ScalarTile);
    let row = nb * Q8_DEMO_BYTES;
    for g in 0..t.rows / GROUP_ROWS {
        let gw = &t.w[g * GROUP_ROWS * row..][..GROUP_ROWS * row];
        for tok in 0..t.tokens {
            let x = &t.x[tok * t.x_stride..][..nb * Q8_0_BYTES];
            let mut acc = [[0f32; 8]; GROUP_ROWS];
            for b in 0..nb {
                let blk = &gw[b * GROUP_BLOCK..][..GROUP_BLOCK];
                let xb = &x[b * Q8_0_BYTES..][..Q8_0_BYTES];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let mut qw = [0u8; 32];
                    qw[..16].copy_from_slice(&blk[16 + 16 * r..][..16]);
                    qw[16..].copy_from_slice(&blk[80 + 16 * r..][..16]);
                    let d = crate::kernels::block_scale(&blk[4 * r..], xb);
                    for (a, s) in acc.iter_mut().zip(block_lanes(&qw, &xb[2..])) {
                        *a = (s as f32).mul_add(d, *a);
                    }
                }
            }
            for (r, acc) in acc.into_iter().enumerate() {
                y[tok * y_stride + g * GROUP_ROWS + r] = reduce8(acc);
            }
        }
    }
}
