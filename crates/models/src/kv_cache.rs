//! The KV cache: per layer, one row per position holding every KV head, stored as F16
//! (llama.cpp's default) or Q8_0 (`--cache-type-k/v q8_0`).

use half::f16;

use crate::{Error, Result};

/// Element type of a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheType {
    /// IEEE half.
    F16,
    /// F32 (for checks).
    F32,
    /// ggml Q8_0 blocks of 32.
    Q8_0,
}

impl CacheType {
    /// Parses a llama.cpp `--cache-type-*` value.
    pub fn parse(s: &str) -> Result<CacheType> {
        match s {
            "f16" => Ok(CacheType::F16),
            "f32" => Ok(CacheType::F32),
            "q8_0" => Ok(CacheType::Q8_0),
            _ => Err(Error::Unsupported(format!("unsupported cache type `{s}` (supported: f16, f32, q8_0)"))),
        }
    }
}

const Q8_BLOCK: usize = 32;
const Q8_BYTES: usize = 34;

/// An empty vector with room for `n` elements, or an error if the allocator refuses
/// (never an abort). The room is address space only: rows are zero-filled as they are
/// first written, so resident memory follows the positions actually used.
fn reserved<T>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::Invalid(format!(
            "cannot allocate {} for the KV cache; use a smaller -c",
            human(n as u64 * std::mem::size_of::<T>() as u64)
        ))
    })?;
    Ok(v)
}

/// Grows `v` (within its reserved room) to at least `end` elements.
#[inline]
fn grow<T: Clone>(v: &mut Vec<T>, end: usize, zero: T) {
    if v.len() < end {
        debug_assert!(end <= v.capacity(), "KV cache row past its reserved room");
        v.resize(end, zero);
    }
}

fn human(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// Bytes of one cache row of `width` elements.
fn row_bytes(ty: CacheType, width: usize) -> u64 {
    match ty {
        CacheType::F16 => width as u64 * 2,
        CacheType::F32 => width as u64 * 4,
        CacheType::Q8_0 => (width / Q8_BLOCK * Q8_BYTES) as u64,
    }
}

/// Memory this process can still get: `MemAvailable + SwapFree` from `/proc/meminfo`
/// (`None` where that is not readable).
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    };
    Some(field("MemAvailable:")? + field("SwapFree:").unwrap_or(0))
}

/// One layer's K or V storage: `n_ctx` rows of `width` elements.
#[derive(Debug)]
pub enum CacheRows {
    /// Half floats.
    F16(Vec<f16>),
    /// Full floats.
    F32(Vec<f32>),
    /// Q8_0 bytes.
    Q8_0(Vec<u8>),
}

/// A cache matrix with fixed row width.
#[derive(Debug)]
pub struct CacheMatrix {
    width: usize,
    /// Positions the matrix has room for.
    cap_rows: usize,
    /// Rows `0..len/row` have been written (or zero-filled below a written one).
    rows: CacheRows,
}

impl CacheMatrix {
    /// Storage for `n_ctx` rows of `width`; Q8_0 needs `width % 32 == 0`.
    pub fn new(ty: CacheType, n_ctx: usize, width: usize) -> Result<CacheMatrix> {
        let n = n_ctx.checked_mul(width).ok_or_else(|| Error::Invalid("KV cache size overflows".into()))?;
        let rows = match ty {
            CacheType::F16 => CacheRows::F16(reserved(n)?),
            CacheType::F32 => CacheRows::F32(reserved(n)?),
            CacheType::Q8_0 => {
                if !width.is_multiple_of(Q8_BLOCK) {
                    return Err(Error::Unsupported(format!(
                        "q8_0 cache needs a row width that is a multiple of 32 (this model: {width})"
                    )));
                }
                CacheRows::Q8_0(reserved(n / Q8_BLOCK * Q8_BYTES)?)
            }
        };
        Ok(CacheMatrix { width, cap_rows: n_ctx, rows })
    }

    /// Rows (positions) held.
    pub fn n_rows(&self) -> usize {
        if self.width == 0 {
            return 0;
        }
        self.cap_rows
    }

    /// The element type.
    pub fn cache_type(&self) -> CacheType {
        match &self.rows {
            CacheRows::F16(_) => CacheType::F16,
            CacheRows::F32(_) => CacheType::F32,
            CacheRows::Q8_0(_) => CacheType::Q8_0,
        }
    }

    /// Bytes reserved (all `n_ctx` positions).
    pub fn bytes(&self) -> usize {
        row_bytes(self.cache_type(), self.width) as usize * self.cap_rows
    }

    /// Bytes of the rows written so far (what is resident).
    pub fn bytes_used(&self) -> usize {
        match &self.rows {
            CacheRows::F16(v) => v.len() * 2,
            CacheRows::F32(v) => v.len() * 4,
            CacheRows::Q8_0(v) => v.len(),
        }
    }

    /// Rows `from..` as one f16 slice starting at element `off` of row `from` (row `j`
    /// then starts at `(j - from)·width`), and the row width — when the cache holds f16.
    /// The slice ends where the written rows end.
    pub fn f16_rows_from(&self, from: usize, off: usize) -> Option<(&[f16], usize)> {
        match &self.rows {
            CacheRows::F16(v) => Some((v.get(from * self.width + off..).unwrap_or(&[]), self.width)),
            _ => None,
        }
    }

    /// `len` f16 elements of row `pos` from `off`, when the cache holds f16.
    #[inline]
    pub fn f16_slice(&self, pos: usize, off: usize, len: usize) -> Option<&[f16]> {
        match &self.rows {
            // a row never written (padding of a tile) reads as absent
            CacheRows::F16(v) => {
                let base = pos * self.width + off;
                v.get(base..base + len)
            }
            _ => None,
        }
    }

    /// The Q8_0 blocks of row `pos` covering elements `off..off + len` (both multiples of
    /// 32), when the cache holds Q8_0 and the row was written.
    #[inline]
    pub fn q8_0_blocks(&self, pos: usize, off: usize, len: usize) -> Option<&[u8]> {
        match &self.rows {
            CacheRows::Q8_0(v) => {
                let rb = self.width / Q8_BLOCK * Q8_BYTES;
                let base = pos * rb + off / Q8_BLOCK * Q8_BYTES;
                v.get(base..base + len / Q8_BLOCK * Q8_BYTES)
            }
            _ => None,
        }
    }

    /// Stores row `pos`.
    pub fn write(&mut self, pos: usize, x: &[f32]) {
        let w = self.width;
        match &mut self.rows {
            CacheRows::F16(v) => {
                grow(v, (pos + 1) * w, f16::ZERO);
                for (d, s) in v[pos * w..(pos + 1) * w].iter_mut().zip(x) {
                    *d = f16::from_f32(*s);
                }
            }
            CacheRows::F32(v) => {
                grow(v, (pos + 1) * w, 0.0);
                v[pos * w..(pos + 1) * w].copy_from_slice(x)
            }
            CacheRows::Q8_0(v) => {
                let rb = w / Q8_BLOCK * Q8_BYTES;
                grow(v, (pos + 1) * rb, 0);
                let dst = &mut v[pos * rb..(pos + 1) * rb];
                // ggml's SET_ROWS converts with the CPU backend's `from_float`
                // (`quantize_row_q8_0`, which rounds ties to even on x86), not the reference
                // quantizer.
                match quant_kernels::registry::act_quantizer_for(8) {
                    Some(q) => (q.quantize)(&x[..w], dst),
                    None => {
                        let q8 = ggml_quants::by_name("q8_0").expect("q8_0 is a built-in type");
                        q8.quantize_ref(x, dst).expect("row width is a multiple of 32");
                    }
                }
            }
        }
    }

    /// Dot product of `q` (length `len`) with the slice `[off, off+len)` of row `pos`.
    /// For F16 rows `q` must already be rounded to f16 (as ggml does for F16 K).
    #[inline]
    pub fn dot(&self, pos: usize, off: usize, q: &[f32], scratch: &mut [f32]) -> f32 {
        let w = self.width;
        let base = pos * w + off;
        match &self.rows {
            CacheRows::F16(v) => quant_kernels::ops::dot_f16_f32(&v[base..base + q.len()], q),
            CacheRows::F32(v) => quant_kernels::ops::dot_f32(&v[base..base + q.len()], q),
            CacheRows::Q8_0(_) => {
                self.read(pos, off, &mut scratch[..q.len()]);
                quant_kernels::ops::dot_f32(&scratch[..q.len()], q)
            }
        }
    }

    /// `y += a * row[pos][off..off+y.len()]`.
    #[inline]
    pub fn axpy(&self, pos: usize, off: usize, a: f32, y: &mut [f32], scratch: &mut [f32]) {
        let base = pos * self.width + off;
        match &self.rows {
            CacheRows::F16(v) => quant_kernels::ops::axpy_f16(y, a, &v[base..base + y.len()]),
            CacheRows::F32(v) => quant_kernels::ops::axpy_f32(y, a, &v[base..base + y.len()]),
            CacheRows::Q8_0(_) => {
                let n = y.len();
                self.read(pos, off, &mut scratch[..n]);
                for (d, s) in y.iter_mut().zip(&scratch[..n]) {
                    *d += a * s;
                }
            }
        }
    }

    /// Rows written so far (a row past them was never stored).
    pub fn rows_written(&self) -> usize {
        if self.width == 0 {
            return 0;
        }
        match &self.rows {
            CacheRows::F16(v) => v.len() / self.width,
            CacheRows::F32(v) => v.len() / self.width,
            CacheRows::Q8_0(v) => v.len() / (self.width / Q8_BLOCK * Q8_BYTES),
        }
    }

    /// Copies rows `src..src + n` to `dst..dst + n` (the ranges may overlap); rows past
    /// the written ones are an error naming the range.
    pub fn move_rows(&mut self, src: usize, dst: usize, n: usize) -> Result<()> {
        let have = self.rows_written();
        if src.checked_add(n).is_none_or(|e| e > have) || dst.checked_add(n).is_none_or(|e| e > self.cap_rows) {
            return Err(Error::Invalid(format!(
                "KV cache rows {src}..{} to {dst}..: {have} rows written, room for {}",
                src.saturating_add(n),
                self.cap_rows
            )));
        }
        let rb = match &self.rows {
            CacheRows::Q8_0(_) => self.width / Q8_BLOCK * Q8_BYTES,
            _ => self.width,
        };
        let end = (dst + n) * rb;
        match &mut self.rows {
            CacheRows::F16(v) => {
                grow(v, end, f16::ZERO);
                v.copy_within(src * rb..(src + n) * rb, dst * rb)
            }
            CacheRows::F32(v) => {
                grow(v, end, 0.0);
                v.copy_within(src * rb..(src + n) * rb, dst * rb)
            }
            CacheRows::Q8_0(v) => {
                grow(v, end, 0);
                v.copy_within(src * rb..(src + n) * rb, dst * rb)
            }
        }
        Ok(())
    }

    /// Rewrites rows `start..start + n` through `f` in f32, as ggml's in-place rope of a
    /// cache view does: F16 and F32 rows are converted element-wise (f16 back with
    /// round-to-nearest-even), Q8_0 rows are dequantized and quantized again.
    pub fn map_rows(&mut self, start: usize, n: usize, mut f: impl FnMut(&mut [f32])) -> Result<()> {
        let have = self.rows_written();
        if start.checked_add(n).is_none_or(|e| e > have) {
            return Err(Error::Invalid(format!(
                "KV cache rows {start}..{}: only {have} rows written",
                start.saturating_add(n)
            )));
        }
        let mut row = vec![0f32; self.width];
        for pos in start..start + n {
            self.read(pos, 0, &mut row);
            f(&mut row);
            self.write(pos, &row);
        }
        Ok(())
    }

    /// Decodes `out.len()` elements of row `pos` starting at `off` (a multiple of 32 for Q8_0).
    pub fn read(&self, pos: usize, off: usize, out: &mut [f32]) {
        let w = self.width;
        match &self.rows {
            CacheRows::F16(v) => {
                for (d, s) in out.iter_mut().zip(&v[pos * w + off..]) {
                    *d = s.to_f32();
                }
            }
            CacheRows::F32(v) => out.copy_from_slice(&v[pos * w + off..pos * w + off + out.len()]),
            CacheRows::Q8_0(v) => {
                let rb = w / Q8_BLOCK * Q8_BYTES;
                let b0 = off / Q8_BLOCK;
                let nb = out.len().div_ceil(Q8_BLOCK);
                let src = &v[pos * rb + b0 * Q8_BYTES..pos * rb + (b0 + nb) * Q8_BYTES];
                // ggml's `dequantize_row_q8_0`: q · d per element
                let dq = |blk: &[u8], o: &mut [f32]| {
                    let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    for (o, &q) in o.iter_mut().zip(&blk[2..]) {
                        *o = (q as i8) as f32 * d;
                    }
                };
                for (o, blk) in out.chunks_mut(Q8_BLOCK).zip(src.chunks_exact(Q8_BYTES)) {
                    dq(blk, o);
                }
            }
        }
    }
}

/// Refuses a quantized cache type whose block does not divide the head width, as
/// `llama_init_from_model` does: flash attention takes one head's row of K (or V) as whole
/// blocks.
pub fn check_head_widths(tk: CacheType, tv: CacheType, head_k: usize, head_v: usize) -> Result<()> {
    for (what, t, w) in [("K", tk, head_k), ("V", tv, head_v)] {
        if t == CacheType::Q8_0 && !w.is_multiple_of(Q8_BLOCK) {
            let dim = if what == "K" { "n_embd_head_k" } else { "n_embd_head_v" };
            return Err(Error::Unsupported(format!(
                "{what} cache type q8_0 with block size {Q8_BLOCK} does not divide {dim}={w}"
            )));
        }
    }
    Ok(())
}

/// K and V for every layer.
#[derive(Debug)]
pub struct KvCache {
    /// Per layer K.
    pub k: Vec<CacheMatrix>,
    /// Per layer V.
    pub v: Vec<CacheMatrix>,
    /// Capacity in positions.
    pub n_ctx: usize,
}

impl KvCache {
    /// A cache with per-layer widths `(k_width, v_width)`.
    ///
    /// The whole size is checked before anything is allocated: more than the machine has
    /// available ([`available_memory`]) is an error naming the context size.
    pub fn new(widths: &[(usize, usize)], n_ctx: usize, tk: CacheType, tv: CacheType) -> Result<KvCache> {
        let need = Self::bytes_for(widths, n_ctx, tk, tv)
            .ok_or_else(|| Error::OutOfMemory(format!("the KV cache for a context of {n_ctx} overflows")))?;
        if let Some(avail) = available_memory() {
            if need > avail {
                let per_pos = Self::bytes_for(widths, 1, tk, tv).unwrap_or(1).max(1);
                return Err(Error::OutOfMemory(format!(
                    "the KV cache for a context of {n_ctx} needs {}, more than the {} available; \
                     the largest -c that fits is {} (or use -ctk/-ctv q8_0)",
                    human(need),
                    human(avail),
                    avail / per_pos
                )));
            }
        }
        let mut k = Vec::with_capacity(widths.len());
        let mut v = Vec::with_capacity(widths.len());
        for &(wk, wv) in widths {
            k.push(CacheMatrix::new(tk, n_ctx, wk)?);
            v.push(CacheMatrix::new(tv, n_ctx, wv)?);
        }
        Ok(KvCache { k, v, n_ctx })
    }

    /// Bytes a cache of these widths and `n_ctx` positions takes (`None` on overflow).
    pub fn bytes_for(widths: &[(usize, usize)], n_ctx: usize, tk: CacheType, tv: CacheType) -> Option<u64> {
        widths.iter().try_fold(0u64, |acc, &(wk, wv)| {
            let layer = row_bytes(tk, wk).checked_add(row_bytes(tv, wv))?.checked_mul(n_ctx as u64)?;
            acc.checked_add(layer)
        })
    }

    /// Bytes of the rows written so far (resident), over all layers.
    pub fn bytes_used(&self) -> usize {
        self.k.iter().chain(&self.v).map(CacheMatrix::bytes_used).sum()
    }

    /// Bytes reserved for all `n_ctx` positions.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(CacheMatrix::bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_larger_than_the_machine_is_an_error_not_an_abort() {
        let w = [(4096, 4096); 32];
        let e = KvCache::new(&w, 10_000_000, CacheType::F16, CacheType::F16).unwrap_err().to_string();
        assert!(e.contains("context of 10000000") && e.contains("-c"), "{e}");
        let e = KvCache::new(&w, usize::MAX / 2, CacheType::F16, CacheType::F16).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");
        assert_eq!(KvCache::bytes_for(&[(64, 32)], 10, CacheType::F16, CacheType::Q8_0), Some(10 * (128 + 34)));
    }

    #[test]
    fn rows_are_resident_only_once_written() {
        let mut c = KvCache::new(&[(64, 64); 2], 1000, CacheType::F16, CacheType::Q8_0).unwrap();
        assert_eq!(c.bytes(), 2 * 1000 * (128 + 68));
        assert_eq!(c.bytes_used(), 0);
        c.k[0].write(9, &[1.0; 64]);
        assert_eq!(c.k[0].bytes_used(), 10 * 128, "rows below a written one are zero-filled");
        assert_eq!(c.k[0].f16_slice(3, 0, 4), Some(&[f16::ZERO; 4][..]));
        assert_eq!(c.k[0].f16_slice(10, 0, 4), None, "a row never written reads as absent");
        assert_eq!(c.k[0].f16_slice(9, 60, 4), Some(&[f16::ONE; 4][..]));
    }

    #[test]
    fn rows_round_trip() {
        for ty in [CacheType::F16, CacheType::F32, CacheType::Q8_0] {
            let mut m = CacheMatrix::new(ty, 4, 64).unwrap();
            let x: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) / 8.0).collect();
            m.write(2, &x);
            let mut out = vec![0.0; 32];
            m.read(2, 32, &mut out);
            for (a, b) in out.iter().zip(&x[32..]) {
                assert!((a - b).abs() < 0.04, "{ty:?}: {a} vs {b}");
            }
            let q = vec![1.0; 32];
            let mut scratch = vec![0.0; 64];
            let d = m.dot(2, 32, &q, &mut scratch);
            let want: f32 = x[32..].iter().sum();
            assert!((d - want).abs() < 0.5, "{ty:?}: {d} vs {want}");
        }
    }

    #[test]
    fn rows_move_and_map_in_place() {
        for ty in [CacheType::F16, CacheType::F32, CacheType::Q8_0] {
            let mut m = CacheMatrix::new(ty, 8, 32).unwrap();
            for pos in 0..6 {
                let row: Vec<f32> = (0..32).map(|i| (pos * 32 + i) as f32 / 64.0).collect();
                m.write(pos, &row);
            }
            let read = |m: &CacheMatrix, pos: usize| {
                let mut out = vec![0f32; 32];
                m.read(pos, 0, &mut out);
                out
            };
            let (r3, r4) = (read(&m, 3), read(&m, 4));
            // overlapping move down: rows 3..5 to 2..4
            m.move_rows(3, 2, 2).unwrap();
            assert_eq!(read(&m, 2), r3, "{ty:?}");
            assert_eq!(read(&m, 3), r4, "{ty:?}");
            m.map_rows(2, 1, |r| r.iter_mut().for_each(|x| *x = -*x)).unwrap();
            let neg: Vec<f32> = r3.iter().map(|x| -x).collect();
            assert_eq!(read(&m, 2), neg, "{ty:?}");
            assert_eq!(read(&m, 3), r4, "{ty:?}: a row outside the range is untouched");
            assert!(m.move_rows(5, 0, 2).is_err(), "past the written rows");
            assert!(m.move_rows(0, 7, 2).is_err(), "past the capacity");
            assert!(m.map_rows(6, 1, |_| {}).is_err());
        }
    }

    #[test]
    fn q8_0_needs_multiple_of_32() {
        assert!(CacheMatrix::new(CacheType::Q8_0, 4, 40).is_err());
        assert!(CacheType::parse("q4_0").unwrap_err().to_string().contains("q4_0"));
    }
}
