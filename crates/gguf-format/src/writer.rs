//! Writing: [`GgufWriter`] lays out a GGUF file the way llama.cpp's `gguf_write_out` does
//! and streams tensor data into a temporary file that is renamed into place at the end.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::reader::GgufFile;
use crate::value::{Array, Metadata, Value};
use crate::{Error, Result, DEFAULT_ALIGNMENT, KEY_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};

/// A tensor-data producer: called once at write time, it must write exactly the
/// tensor's size.
pub type StreamFn<'a> = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + 'a>;

/// Where a tensor's bytes come from when the file is written.
pub enum TensorSource<'a> {
    /// Borrowed bytes (e.g. a view into a memory-mapped input file).
    Borrowed(&'a [u8]),
    /// Owned bytes.
    Owned(Vec<u8>),
    /// A producer called once, at write time, to stream exactly the tensor's size into
    /// the writer — so a converter never holds more than one tensor in memory.
    Stream(StreamFn<'a>),
}

impl std::fmt::Debug for TensorSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TensorSource::Borrowed(b) => write!(f, "Borrowed({} bytes)", b.len()),
            TensorSource::Owned(b) => write!(f, "Owned({} bytes)", b.len()),
            TensorSource::Stream(_) => write!(f, "Stream"),
        }
    }
}

#[derive(Debug)]
struct PendingTensor<'a> {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    size: u64,
    source: TensorSource<'a>,
}

/// Builds a GGUF file: metadata in insertion order, then tensors in insertion order, each
/// at the next aligned offset — the layout llama.cpp and gguf-py write.
#[derive(Debug)]
pub struct GgufWriter<'a> {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor<'a>>,
    pad_empty: bool,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl<'a> GgufWriter<'a> {
    /// An empty GGUF v3 file.
    pub fn new() -> GgufWriter<'a> {
        GgufWriter { version: 3, metadata: Metadata::new(), tensors: Vec::new(), pad_empty: true }
    }

    /// A writer that reproduces `file`: same version, metadata and tensors, with the data
    /// borrowed from its map. Writing it unchanged gives a byte-identical file for every
    /// file laid out as llama.cpp lays them out.
    pub fn from_file(file: &'a GgufFile) -> Result<GgufWriter<'a>> {
        // With no tensors, llama.cpp still pads the header to the alignment while gguf-py
        // does not; keep whichever the input did.
        let pad_empty = file.file_size() > file.header().header_end();
        let mut w =
            GgufWriter { version: file.version(), metadata: file.metadata().clone(), tensors: Vec::new(), pad_empty };
        for t in file.tensors() {
            let data = file.tensor_data(t)?;
            w.add_tensor_source(&t.name, &t.dims, t.type_id, data.len() as u64, TensorSource::Borrowed(data))?;
        }
        Ok(w)
    }

    /// Sets the GGUF version written (2 or 3; default 3).
    pub fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Whether a file with no tensors still gets its header padded to the alignment
    /// (llama.cpp: yes, the default; gguf-py: no).
    pub fn with_empty_padding(mut self, pad: bool) -> Self {
        self.pad_empty = pad;
        self
    }

    /// Sets `general.alignment` (must be a power of two).
    pub fn with_alignment(mut self, alignment: u32) -> Self {
        self.metadata.set(KEY_ALIGNMENT, Value::U32(alignment));
        self
    }

    /// The metadata to be written.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Mutable metadata.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// Sets a key (replacing its value in place if present).
    pub fn add_kv(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.metadata.set(key, value.into());
        self
    }

    /// Adds a tensor with borrowed data, checked against its type and shape.
    pub fn add_tensor(&mut self, name: &str, dims: &[u64], type_id: u32, data: &'a [u8]) -> Result<()> {
        self.add_tensor_source(name, dims, type_id, data.len() as u64, TensorSource::Borrowed(data))
    }

    /// Adds a tensor with owned data, checked against its type and shape.
    pub fn add_tensor_owned(&mut self, name: &str, dims: &[u64], type_id: u32, data: Vec<u8>) -> Result<()> {
        self.add_tensor_source(name, dims, type_id, data.len() as u64, TensorSource::Owned(data))
    }

    /// Adds a tensor whose `size` bytes come from `source` at write time.
    pub fn add_tensor_source(
        &mut self,
        name: &str,
        dims: &[u64],
        type_id: u32,
        size: u64,
        source: TensorSource<'a>,
    ) -> Result<()> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(Error::DuplicateTensor { name: name.to_string(), offset: 0 });
        }
        let bad = |reason: String| Error::BadShape { name: name.to_string(), offset: 0, reason };
        if dims.len() > MAX_DIMS {
            return Err(bad(format!("{} dimensions, at most {MAX_DIMS}", dims.len())));
        }
        let n = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d).filter(|&v| v <= i64::MAX as u64))
            .ok_or_else(|| bad("element count overflows int64".into()))?;
        let t = ggml_quants::by_id(type_id).ok_or_else(|| Error::UnknownType { name: name.to_string(), type_id })?;
        let ne0 = dims.first().copied().unwrap_or(1);
        if ne0 % t.block_size as u64 != 0 {
            return Err(Error::NotWholeBlocks {
                name: name.to_string(),
                ne0,
                type_name: t.name,
                block_size: t.block_size,
            });
        }
        let expected = t.bytes_for(n).ok_or_else(|| bad("byte size overflows".into()))?;
        if expected != size {
            return Err(Error::TensorSize { name: name.to_string(), expected, found: size });
        }
        self.tensors.push(PendingTensor { name: name.to_string(), dims: dims.to_vec(), type_id, size, source });
        Ok(())
    }

    fn alignment(&self) -> Result<u64> {
        match self.metadata.get(KEY_ALIGNMENT) {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => Ok(*a as u64),
            Some(v) => Err(Error::BadAlignment { reason: format!("cannot write alignment {v:?}") }),
        }
    }

    /// Writes the whole file to `out`.
    pub fn write_to(self, out: &mut dyn Write) -> Result<()> {
        let io = |source| Error::Io { path: PathBuf::from("<output>"), source };
        self.write_inner(out).map_err(|e| match e {
            WriteError::Io(source) => io(source),
            WriteError::Gguf(e) => e,
        })
    }

    /// Bytes before the first tensor's data: header, metadata, tensor table and the
    /// padding to the alignment (llama.cpp's `gguf_get_meta_size`).
    pub fn header_len(&self) -> Result<u64> {
        let mut sink = io::sink();
        let mut w = Counting { inner: &mut sink, written: 0 };
        self.write_header(&mut w).map_err(|e| match e {
            WriteError::Io(source) => Error::Io { path: PathBuf::from("<sink>"), source },
            WriteError::Gguf(e) => e,
        })?;
        Ok(w.written)
    }

    fn write_header(&self, w: &mut Counting<'_>) -> Result<(), WriteError> {
        let alignment = self.alignment()?;
        // Refuse, before writing anything, what the reader would reject.
        if !(2..=3).contains(&self.version) {
            return Err(Error::UnsupportedVersion { version: self.version }.into());
        }
        for (k, v) in self.metadata.iter() {
            if let Value::Array(a) = v {
                if array_depth(a) > MAX_ARRAY_DEPTH {
                    let reason = format!("arrays nested deeper than {MAX_ARRAY_DEPTH} cannot be read back");
                    return Err(Error::InvalidValue { key: k.to_string(), reason }.into());
                }
            }
        }
        w.write_all(&MAGIC)?;
        w.write_all(&self.version.to_le_bytes())?;
        w.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
        w.write_all(&(self.metadata.len() as u64).to_le_bytes())?;
        for (k, v) in self.metadata.iter() {
            write_str(w, k.as_bytes())?;
            w.write_all(&(v.value_type() as u32).to_le_bytes())?;
            write_value(w, v)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_str(w, t.name.as_bytes())?;
            w.write_all(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                w.write_all(&d.to_le_bytes())?;
            }
            w.write_all(&t.type_id.to_le_bytes())?;
            w.write_all(&offset.to_le_bytes())?;
            offset += pad_len(t.size, alignment) + t.size;
        }
        if !self.tensors.is_empty() || self.pad_empty {
            pad(w, alignment)?;
        }
        Ok(())
    }

    fn write_inner(self, out: &mut dyn Write) -> Result<(), WriteError> {
        let alignment = self.alignment()?;
        let mut w = Counting { inner: out, written: 0 };
        self.write_header(&mut w)?;
        for t in self.tensors {
            let before = w.written;
            match t.source {
                TensorSource::Borrowed(b) => w.write_all(b)?,
                TensorSource::Owned(b) => w.write_all(&b)?,
                TensorSource::Stream(f) => f(&mut w)?,
            }
            let got = w.written - before;
            if got != t.size {
                return Err(Error::TensorSize { name: t.name, expected: t.size, found: got }.into());
            }
            pad(&mut w, alignment)?;
        }
        w.flush()?;
        Ok(())
    }

    /// Writes the file to `path` atomically: into a temporary file in the same directory,
    /// synced, then renamed over `path`. On any error the temporary is removed and `path`
    /// is left as it was.
    pub fn write_to_path(self, path: impl AsRef<Path>) -> Result<()> {
        let mut out = crate::AtomicFile::create(path)?;
        let tmp = out.temp_path().to_path_buf();
        let io = |source| Error::Io { path: tmp.clone(), source };
        let mut buf = BufWriter::with_capacity(1 << 20, out.file());
        self.write_inner(&mut buf).map_err(|e| match e {
            WriteError::Io(source) => io(source),
            WriteError::Gguf(e) => e,
        })?;
        buf.flush().map_err(io)?;
        drop(buf);
        out.commit()
    }
}

enum WriteError {
    Io(io::Error),
    Gguf(Error),
}

impl From<io::Error> for WriteError {
    fn from(e: io::Error) -> Self {
        WriteError::Io(e)
    }
}

impl From<Error> for WriteError {
    fn from(e: Error) -> Self {
        WriteError::Gguf(e)
    }
}

struct Counting<'w> {
    inner: &'w mut dyn Write,
    written: u64,
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn pad_len(at: u64, alignment: u64) -> u64 {
    (alignment - at % alignment) % alignment
}

fn pad(w: &mut Counting<'_>, alignment: u64) -> io::Result<()> {
    const ZEROS: [u8; 64] = [0; 64];
    let mut n = pad_len(w.written, alignment);
    while n > 0 {
        let k = n.min(64);
        w.write_all(&ZEROS[..k as usize])?;
        n -= k;
    }
    Ok(())
}

fn write_str(w: &mut dyn Write, s: &[u8]) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s)
}

fn write_value(w: &mut dyn Write, v: &Value) -> Result<(), WriteError> {
    match v {
        Value::U8(x) => w.write_all(&[*x])?,
        Value::I8(x) => w.write_all(&x.to_le_bytes())?,
        Value::U16(x) => w.write_all(&x.to_le_bytes())?,
        Value::I16(x) => w.write_all(&x.to_le_bytes())?,
        Value::U32(x) => w.write_all(&x.to_le_bytes())?,
        Value::I32(x) => w.write_all(&x.to_le_bytes())?,
        Value::F32(x) => w.write_all(&x.to_le_bytes())?,
        Value::Bool(x) => w.write_all(&[*x as u8])?,
        Value::String(s) => write_str(w, s)?,
        Value::Array(a) => write_array(w, a)?,
        Value::U64(x) => w.write_all(&x.to_le_bytes())?,
        Value::I64(x) => w.write_all(&x.to_le_bytes())?,
        Value::F64(x) => w.write_all(&x.to_le_bytes())?,
    }
    Ok(())
}

/// Nesting depth of `a`: 1 for an array of scalars or strings.
fn array_depth(a: &Array) -> usize {
    match a {
        Array::Array(v) => 1 + v.iter().map(array_depth).max().unwrap_or(0),
        _ => 1,
    }
}

fn write_array(w: &mut dyn Write, a: &Array) -> Result<(), WriteError> {
    w.write_all(&(a.elem_type() as u32).to_le_bytes())?;
    w.write_all(&(a.len() as u64).to_le_bytes())?;
    macro_rules! fixed {
        ($v:expr) => {{
            let mut buf = Vec::with_capacity($v.len() * 8);
            for x in $v.iter() {
                buf.extend_from_slice(&x.to_le_bytes());
            }
            w.write_all(&buf)?;
        }};
    }
    match a {
        Array::U8(v) => w.write_all(v)?,
        Array::I8(v) => fixed!(v),
        Array::U16(v) => fixed!(v),
        Array::I16(v) => fixed!(v),
        Array::U32(v) => fixed!(v),
        Array::I32(v) => fixed!(v),
        Array::F32(v) => fixed!(v),
        Array::U64(v) => fixed!(v),
        Array::I64(v) => fixed!(v),
        Array::F64(v) => fixed!(v),
        Array::Bool(v) => w.write_all(&v.iter().map(|&b| b as u8).collect::<Vec<_>>())?,
        Array::String(v) => {
            for s in v {
                write_str(w, s)?;
            }
        }
        Array::Array(v) => {
            for inner in v {
                write_array(w, inner)?;
            }
        }
    }
    Ok(())
}
