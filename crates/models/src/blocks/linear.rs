//! Weight matrices: [`Linear`] (a product, quantized in place, with its bias) and
//! [`Embedding`] (row lookup).

use std::sync::Arc;

use gguf_format::SplitGguf;
use quant_kernels::{matmul, matmul_rowwise, matmul_rowwise_group, ops, Matrix, Repacked};

use super::{add_bias, Pass};
use crate::loader::{Loader, TensorRef};
use crate::{Error, Result};

/// `y = x · Wᵀ (+ b)`: a 2-D weight of the model file, read in place from its map — or,
/// after [`Linear::repack`], from the layout the chosen kernel repacked it into (as
/// llama.cpp repacks the same types and shapes at load) or from a copy in process memory
/// ([`crate::residency`]).
pub struct Linear {
    file: Arc<SplitGguf>,
    weight: TensorRef,
    bias: Option<Vec<f32>>,
    repacked: Option<Repacked>,
    resident: Option<memmap2::MmapMut>,
}

impl Linear {
    /// The weight `{name}.weight` of shape `[cols, rows]` and its optional bias
    /// `{name}.bias` (`rows` long).
    pub fn load(ld: &Loader<'_>, name: &str, cols: usize, rows: usize) -> Result<Linear> {
        let weight = ld.tensor(&format!("{name}.weight"), &[cols as u64, rows as u64])?;
        let bias = ld.opt_vector(&format!("{name}.bias"), rows as u64)?;
        Linear::new(ld.shared()?, weight, bias)
    }

    /// [`Linear::load`] when the file has `{name}.weight`, else `None`.
    pub fn load_opt(ld: &Loader<'_>, name: &str, cols: usize, rows: usize) -> Result<Option<Linear>> {
        if ld.has(&format!("{name}.weight")) {
            Linear::load(ld, name, cols, rows).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A weight already located (a tied output is the token embedding's tensor); checks
    /// its type has a decoder now, not at the first token.
    pub fn new(file: Arc<SplitGguf>, weight: TensorRef, bias: Option<Vec<f32>>) -> Result<Linear> {
        let l = Linear { file, weight, bias, repacked: None, resident: None };
        l.matrix()?;
        Ok(l)
    }

    /// Rows `r0..r0 + n` of the weight as a weight of its own, read in place (no bias):
    /// one part of a fused matrix (phi3's `attn_qkv`, gate and up halves of `ffn_up`).
    /// Before any [`Linear::repack`].
    pub fn rows_view(&self, r0: usize, n: usize) -> Result<Linear> {
        let t = &self.weight;
        let moved = self.repacked.is_some() || self.resident.is_some();
        if moved || r0.checked_add(n).is_none_or(|end| end > t.rows()) || t.rows() == 0 {
            return Err(Error::Invalid(format!("rows {r0}..+{n} of `{}` ({} rows)", t.name, t.rows())));
        }
        let row_bytes = t.len / t.rows();
        let mut view = t.clone();
        view.dims[1] = n as u64;
        view.start += r0 * row_bytes;
        view.len = n * row_bytes;
        Linear::new(self.file.clone(), view, None)
    }

    /// The output matrix of a model whose embeddings are `tok_embd`: the file's own
    /// `output.weight` (`[n_embd, n_vocab]`) in its kernel's layout, else `token_embd` tied
    /// and read as stored (llama.cpp repacks the weights of `MUL_MAT`, not the `GET_ROWS`
    /// input it duplicates) — from a copy in memory when [`crate::residency`] says so.
    pub fn output(ld: &Loader<'_>, tok_embd: &Embedding) -> Result<Linear> {
        let (e, n_vocab) = (tok_embd.tensor().cols(), tok_embd.n_vocab());
        match ld.opt_tensor("output.weight", &[e as u64, n_vocab as u64])? {
            Some(t) => {
                let mut l = Linear::new(ld.shared()?, t, None)?;
                l.repack()?;
                Ok(l)
            }
            None => {
                // tied: the products read a copy (or the map, per `crate::residency`); the
                // embedding rows are still read through the map
                let mut l = Linear::new(ld.shared()?, tok_embd.tensor().clone(), None)?;
                l.make_resident()?;
                Ok(l)
            }
        }
    }

    /// Moves the weight into the layout of the kernel that will read it, when that kernel
    /// repacks this type and shape on this CPU — else into process memory as stored, when
    /// [`crate::residency`] keeps this file's matrices resident. The bytes are read from
    /// the (shard) file, not through the map, so the original pages never become resident.
    /// Returns whether it was repacked. A weight of a file that [`crate::describe`] is
    /// loading stays as stored.
    pub fn repack(&mut self) -> Result<bool> {
        let t = &self.weight;
        if self.repacked.is_some() || self.resident.is_some() || crate::registry::describing(&self.file) {
            return Ok(self.repacked.is_some());
        }
        if quant_kernels::registry::repack_for(t.type_id, t.rows(), t.cols()).is_none() {
            self.make_resident()?;
            return Ok(false);
        }
        let mut buf = Vec::new();
        read_tensor(&self.file, t, &mut buf)?;
        let m = Matrix::new(t.type_id, &buf, t.rows(), t.cols()).map_err(|e| type_error(t, e.into()))?;
        self.repacked = Repacked::new(&m);
        Ok(self.repacked.is_some())
    }

    /// Reads the weight as stored into memory of its own when [`crate::residency`] says so
    /// (never for a file [`crate::describe`] is loading, nor twice, nor once repacked).
    fn make_resident(&mut self) -> Result<()> {
        let moved = self.repacked.is_some() || self.resident.is_some();
        if !moved && crate::residency::keep_resident() && !crate::registry::describing(&self.file) {
            self.resident = Some(read_resident(&self.file, &self.weight)?);
        }
        Ok(())
    }

    /// The weight as the kernels see it.
    pub fn matrix(&self) -> Result<Matrix<'_>> {
        let t = &self.weight;
        match (&self.repacked, &self.resident) {
            (Some(r), _) => Ok(r.matrix()),
            (None, Some(bytes)) => {
                Matrix::new(t.type_id, &bytes[..t.len], t.rows(), t.cols()).map_err(|e| type_error(t, e.into()))
            }
            (None, None) => mat(&self.file, t),
        }
    }

    /// The weight tensor.
    pub fn tensor(&self) -> &TensorRef {
        &self.weight
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&[f32]> {
        self.bias.as_deref()
    }

    /// Input width.
    pub fn cols(&self) -> usize {
        self.weight.cols()
    }

    /// Output width.
    pub fn rows(&self) -> usize {
        self.weight.rows()
    }

    /// `y = x · Wᵀ` for the pass's rows (the bias is not added: see
    /// [`Linear::forward`]). The observer sees `x` first.
    pub fn product(&self, pass: &Pass<'_>, x: &[f32], y: &mut Vec<f32>) -> Result<()> {
        if let Some(o) = pass.observer {
            o.matmul(&self.weight.name, x, pass.rows.n_rows());
        }
        let m = self.matrix()?;
        let (c, r) = (m.cols(), m.rows());
        let rows = pass.rows;
        y.resize(rows.n_rows() * r, 0.0);
        let ns = rows.n_single();
        if ns > 0 {
            matmul_rowwise(pass.pool, &m, &x[..ns * c], ns, &mut y[..ns * r])?;
        }
        for &(r0, n) in rows.multi() {
            matmul(pass.pool, &m, &x[r0 * c..(r0 + n) * c], n, &mut y[r0 * r..(r0 + n) * r])?;
        }
        Ok(())
    }

    /// [`Linear::forward`] of several layers that read the same `x` (a layer's Q, K and V,
    /// its gate and up), the same results: a pass of one token runs them as one product
    /// over all of their rows ([`matmul_rowwise_group`]), others one by one.
    pub fn forward_group(pass: &Pass<'_>, x: &[f32], items: &mut [(&Linear, &mut Vec<f32>)]) -> Result<()> {
        let one_width = items.windows(2).all(|p| p[0].0.cols() == p[1].0.cols());
        if pass.rows.n_rows() != 1 || pass.rows.n_single() != 1 || items.len() < 2 || !one_width {
            for (l, y) in items.iter_mut() {
                l.forward(pass, x, y)?;
            }
            return Ok(());
        }
        let mut ms = Vec::with_capacity(items.len());
        for (l, y) in items.iter_mut() {
            if let Some(o) = pass.observer {
                o.matmul(&l.weight.name, x, 1);
            }
            let m = l.matrix()?;
            y.resize(m.rows(), 0.0);
            ms.push(m);
        }
        let c = ms[0].cols();
        let mut ys: Vec<&mut [f32]> = items.iter_mut().map(|(_, y)| &mut y[..]).collect();
        matmul_rowwise_group(pass.pool, &ms, &x[..c], &mut ys)?;
        for (l, y) in items.iter_mut() {
            add_bias(y, l.bias());
        }
        Ok(())
    }

    /// `y = x · Wᵀ + b` for the pass's rows.
    pub fn forward(&self, pass: &Pass<'_>, x: &[f32], y: &mut Vec<f32>) -> Result<()> {
        self.product(pass, x, y)?;
        add_bias(y, self.bias());
        Ok(())
    }
}

/// Token embeddings: one row of the matrix per token id (ggml's `get_rows`), optionally
/// scaled (gemma's √n_embd).
pub struct Embedding {
    file: Arc<SplitGguf>,
    weight: TensorRef,
    /// Scale applied to every embedding.
    pub scale: Option<f32>,
}

impl Embedding {
    /// `token_embd.weight`-style tensor `name` of `n_embd` columns; its row count is the
    /// vocabulary.
    pub fn load(ld: &Loader<'_>, name: &str, n_embd: usize) -> Result<Embedding> {
        let t = ld.file().tensor(name).ok_or_else(|| Error::MissingTensor(name.into()))?;
        let n_vocab = t.dims.get(1).copied().unwrap_or(0);
        if n_vocab == 0 {
            return Err(Error::Shape { name: name.into(), got: t.dims.clone(), want: vec![n_embd as u64, 0] });
        }
        let weight = ld.tensor(name, &[n_embd as u64, n_vocab])?;
        let file = ld.shared()?;
        mat(&file, &weight)?;
        Ok(Embedding { file, weight, scale: None })
    }

    /// The tensor (for an output matrix tied to it).
    pub fn tensor(&self) -> &TensorRef {
        &self.weight
    }

    /// Rows of the matrix: the vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.weight.rows()
    }

    /// Writes token `id`'s embedding into `out` (`n_embd` long), unscaled.
    pub fn row(&self, id: u32, out: &mut [f32]) -> Result<()> {
        if id as usize >= self.n_vocab() {
            return Err(Error::TokenOutOfRange { id, n_vocab: self.n_vocab() });
        }
        mat(&self.file, &self.weight)?.dequantize_row(id as usize, out)?;
        Ok(())
    }

    /// The scaled embeddings of `tokens` placed at rows `row0..` of `x`.
    pub fn forward(&self, tokens: &[u32], row0: usize, x: &mut [f32]) -> Result<()> {
        let e = self.weight.cols();
        for (t, &id) in tokens.iter().enumerate() {
            let r = row0 + t;
            self.row(id, &mut x[r * e..(r + 1) * e])?;
            if let Some(s) = self.scale {
                ops::scale_inplace(&mut x[r * e..(r + 1) * e], s);
            }
        }
        Ok(())
    }
}

pub(crate) fn mat<'a>(file: &'a SplitGguf, t: &TensorRef) -> Result<Matrix<'a>> {
    Matrix::new(t.type_id, t.data(file), t.rows(), t.cols()).map_err(|e| type_error(t, e.into()))
}

pub(crate) fn type_error(t: &TensorRef, e: Error) -> Error {
    Error::TensorType { name: t.name.clone(), type_name: t.type_name(), why: e.to_string() }
}

/// The data bytes of `t` read from the shard file holding it into an anonymous map of
/// their own, asked for transparent huge pages (fewer page faults while reading, fewer TLB
/// misses while decoding; the kernel falls back to small pages when it has none).
pub(crate) fn read_resident(file: &SplitGguf, t: &TensorRef) -> Result<memmap2::MmapMut> {
    let io = |source| Error::Read { name: t.name.clone(), source };
    let mut map = memmap2::MmapMut::map_anon(t.len.max(1)).map_err(io)?;
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        let path = t.shard_file(file).path();
        std::fs::File::open(path).and_then(|f| f.read_exact_at(&mut map[..t.len], t.start as u64)).map_err(io)?;
    }
    #[cfg(not(unix))]
    map[..t.len].copy_from_slice(t.data(file));
    Ok(map)
}

/// The data bytes of `t`, read from the shard file holding it (not through the mmap).
pub(crate) fn read_tensor(file: &SplitGguf, t: &TensorRef, buf: &mut Vec<u8>) -> Result<()> {
    buf.clear();
    #[cfg(unix)]
    {
        use std::io::{Read, Seek, SeekFrom};
        // Into the vector's spare capacity (`read_to_end` does not zero it first: the
        // whole file goes through here once at load time).
        buf.reserve_exact(t.len);
        let path = t.shard_file(file).path();
        let read = std::fs::File::open(path).and_then(|mut f| {
            f.seek(SeekFrom::Start(t.start as u64))?;
            let n = f.take(t.len as u64).read_to_end(buf)?;
            if n == t.len {
                Ok(())
            } else {
                Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("{n} of {} bytes", t.len)))
            }
        });
        if let Err(source) = read {
            return Err(Error::Read { name: t.name.clone(), source });
        }
    }
    #[cfg(not(unix))]
    buf.extend_from_slice(t.data(file));
    Ok(())
}

#[cfg(test)]
mod tests {
    use gguf_format::split::{split_path, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
    use gguf_format::GgufWriter;

    use super::*;

    /// A matrix of a file being described stays as stored; the same matrix of the same
    /// file repacks (where this CPU's kernel repacks it) once the mark is gone.
    #[test]
    fn a_file_being_described_is_not_repacked() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("m.gguf");
        let q4_0 = ggml_quants::lookup_name("q4_0").unwrap();
        let x: Vec<f32> = (0..8 * 256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let mut w = GgufWriter::new();
        w.add_tensor_owned("w.weight", &[256, 8], q4_0.id, q4_0.quantize_to_vec(&x, 256, None).unwrap()).unwrap();
        w.write_to_path(&path).unwrap();
        let f = Arc::new(SplitGguf::open(&path).unwrap());
        let ld = Loader::with_shared(&f, "x");
        let repacks = quant_kernels::registry::repack_for(q4_0.id, 8, 256).is_some();
        let mark = crate::registry::DescribeMark::new(&f);
        let mut l = Linear::load(&ld, "w", 256, 8).unwrap();
        assert!(!l.repack().unwrap());
        // another allocation of the same file is not marked
        let g = Arc::new(SplitGguf::open(&path).unwrap());
        assert_eq!(Linear::load(&Loader::with_shared(&g, "x"), "w", 256, 8).unwrap().repack().unwrap(), repacks);
        drop(mark);
        assert_eq!(l.repack().unwrap(), repacks);
    }

    /// A resident copy ([`read_resident`], `--no-mmap`) holds the map's bytes and gives the
    /// same products; a matrix moved into memory is not cut into row views.
    #[test]
    fn a_resident_matrix_is_the_mapped_one() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("m.gguf");
        let q6_k = ggml_quants::lookup_name("q6_K").unwrap();
        let x: Vec<f32> = (0..16 * 512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let mut w = GgufWriter::new();
        w.add_tensor_owned("pad", &[3], 24, vec![1, 2, 3]).unwrap();
        w.add_tensor_owned("w.weight", &[512, 16], q6_k.id, q6_k.quantize_to_vec(&x, 512, None).unwrap()).unwrap();
        w.write_to_path(&path).unwrap();
        let f = Arc::new(SplitGguf::open(&path).unwrap());
        let ld = Loader::with_shared(&f, "x");
        let mapped = Linear::load(&ld, "w", 512, 16).unwrap();
        let mut resident = Linear::load(&ld, "w", 512, 16).unwrap();
        let t = resident.tensor().clone();
        let copy = read_resident(&f, &t).unwrap();
        assert_eq!(&copy[..t.len], t.data(&f));
        resident.resident = Some(copy);
        let pool = quant_kernels::Pool::new(2);
        let a: Vec<f32> = (0..2 * 512).map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0).collect();
        let (mut y0, mut y1) = (vec![0f32; 32], vec![1f32; 32]);
        matmul(&pool, &mapped.matrix().unwrap(), &a, 2, &mut y0).unwrap();
        matmul(&pool, &resident.matrix().unwrap(), &a, 2, &mut y1).unwrap();
        assert_eq!(y0, y1);
        assert!(mapped.rows_view(0, 8).is_ok());
        assert!(resident.rows_view(0, 8).is_err());
    }

    /// `read_tensor` (the repacking path's `pread`) finds each tensor in its own shard's
    /// file at its shard-relative offset: the same bytes as the map.
    #[test]
    fn read_tensor_reads_from_the_holding_shard() {
        let d = tempfile::tempdir().unwrap();
        let prefix = d.path().join("m");
        for no in 0..3u16 {
            let mut w = GgufWriter::new();
            w.add_kv(KEY_SPLIT_NO, no);
            w.add_kv(KEY_SPLIT_COUNT, 3u16);
            w.add_kv(KEY_SPLIT_TENSORS_COUNT, 6i32);
            // Different sizes per shard, so equal offsets in two shards hold different data.
            for j in 0..2u16 {
                let id = no * 2 + j;
                let data: Vec<u8> = (0..(8 + 4 * id as usize)).map(|k| (id as usize * 31 + k) as u8).collect();
                w.add_tensor_owned(&format!("t{id}"), &[data.len() as u64], 24, data).unwrap();
            }
            w.write_to_path(split_path(&prefix, no as u32, 3)).unwrap();
        }
        let m = SplitGguf::open(split_path(&prefix, 1, 3)).unwrap();
        let ld = Loader::new(&m, "x");
        let mut buf = Vec::new();
        for id in 0..6usize {
            let name = format!("t{id}");
            let t = ld.tensor(&name, &[8 + 4 * id as u64]).unwrap();
            assert_eq!(t.shard, id / 2);
            read_tensor(&m, &t, &mut buf).unwrap();
            assert_eq!(buf, t.data(&m));
            assert_eq!(buf, m.tensor_data_by_name(&name).unwrap());
            assert_eq!(buf[0], (id * 31) as u8);
        }
    }
}
