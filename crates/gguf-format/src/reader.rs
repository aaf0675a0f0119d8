//! Parsing: [`Gguf::parse`] over bytes, [`GgufFile`] over a memory-mapped file.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use ggml_quants::TypeTraits;

use crate::mmap::Bytes;
use crate::value::{Array, Metadata, StringArray, Value, ValueType};
use crate::{Error, Result, DEFAULT_ALIGNMENT, KEY_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Shape in ggml order: `dims[0]` (`ne[0]`) varies fastest.
    pub dims: Vec<u64>,
    /// ggml type id.
    pub type_id: u32,
    /// Offset of the data, relative to the start of the data section.
    pub offset: u64,
    /// Element count (product of `dims`).
    pub n_elements: u64,
    /// Data size in bytes; `None` when the type is not registered.
    pub size: Option<u64>,
    /// Where this entry starts in the file (for error messages).
    pub info_offset: u64,
}

impl TensorInfo {
    /// The registered type of this tensor, if any.
    pub fn type_traits(&self) -> Option<&'static TypeTraits> {
        ggml_quants::by_id(self.type_id)
    }

    /// The type's ggml name, or `type<N>` for an unknown id.
    pub fn type_name(&self) -> String {
        match self.type_traits() {
            Some(t) => t.name.to_string(),
            None => format!("type{}", self.type_id),
        }
    }

    /// The registered type, or an error naming this tensor and the unknown id.
    pub fn require_type(&self) -> Result<&'static TypeTraits> {
        self.type_traits().ok_or_else(|| Error::UnknownType { name: self.name.clone(), type_id: self.type_id })
    }
}

/// A parsed GGUF header: version, metadata, tensor table and data-section placement.
/// It owns no tensor data; [`Gguf::tensor_data`] slices it out of the file's bytes.
#[derive(Debug, Clone)]
pub struct Gguf {
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    data_offset: u64,
    header_end: u64,
    file_size: u64,
}

/// Most tensor-table entries reserved before they are parsed.
const MAX_TENSOR_RESERVE: u64 = 1024;

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A `u64` count of items of at least `min_size` bytes each, checked against the
    /// bytes left so that no allocation is sized by an unchecked number.
    fn count(&mut self, min_size: u64, what: &dyn Fn() -> String) -> Result<u64> {
        let at = self.pos as u64;
        let n = self.u64(what)?;
        if n.checked_mul(min_size).is_none_or(|b| b > self.remaining()) {
            return Err(Error::CountTooLarge { what: what(), offset: at, count: n, available: self.remaining() });
        }
        Ok(n)
    }

    fn bytes_string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let n = self.count(1, what)?;
        self.take(n, what)
    }

    fn utf8_string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let at = self.pos as u64;
        let b = self.bytes_string(what)?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(Error::InvalidUtf8 { what: what(), offset: at }),
        }
    }
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    x.checked_add(a - 1).map(|v| v / a * a)
}

macro_rules! read_fixed_array {
    ($cur:expr, $n:expr, $t:ty, $what:expr) => {{
        const SZ: usize = std::mem::size_of::<$t>();
        let bytes = $cur.take($n * SZ as u64, $what)?;
        bytes.chunks_exact(SZ).map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or([0; SZ]))).collect::<Vec<$t>>()
    }};
}

fn read_scalar(cur: &mut Cursor<'_>, t: ValueType, key: &str, what: &dyn Fn() -> String) -> Result<Value> {
    Ok(match t {
        ValueType::U8 => Value::U8(cur.array::<1>(what)?[0]),
        ValueType::I8 => Value::I8(cur.array::<1>(what)?[0] as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array(what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(cur.array(what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array(what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array(what)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(cur.array(what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array(what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array(what)?)),
        ValueType::Bool => {
            let at = cur.pos as u64;
            let b = cur.array::<1>(what)?[0];
            Value::Bool(parse_bool(b, key, at)?)
        }
        ValueType::String => Value::String(cur.bytes_string(what)?.to_vec()),
        ValueType::Array => Value::Array(read_array(cur, key, 1)?),
    })
}

fn parse_bool(b: u8, key: &str, at: u64) -> Result<bool> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Error::InvalidBool { key: key.to_string(), value: v, offset: at }),
    }
}

fn read_array(cur: &mut Cursor<'_>, key: &str, depth: usize) -> Result<Array> {
    let at = cur.pos as u64;
    if depth > MAX_ARRAY_DEPTH {
        return Err(Error::TooDeep { key: key.to_string(), max: MAX_ARRAY_DEPTH, offset: at });
    }
    let what = || format!("array element type of key {key:?}");
    let type_id = cur.u32(&what)?;
    let et = ValueType::from_u32(type_id).ok_or_else(|| Error::InvalidValueType {
        key: key.to_string(),
        type_id,
        offset: at,
    })?;
    let what = || format!("array of {} of key {key:?}", et.name());
    let n = cur.count(et.min_size(), &what)?;
    Ok(match et {
        ValueType::U8 => Array::U8(cur.take(n, &what)?.to_vec()),
        ValueType::I8 => Array::I8(cur.take(n, &what)?.iter().map(|&b| b as i8).collect()),
        ValueType::U16 => Array::U16(read_fixed_array!(cur, n, u16, &what)),
        ValueType::I16 => Array::I16(read_fixed_array!(cur, n, i16, &what)),
        ValueType::U32 => Array::U32(read_fixed_array!(cur, n, u32, &what)),
        ValueType::I32 => Array::I32(read_fixed_array!(cur, n, i32, &what)),
        ValueType::F32 => Array::F32(read_fixed_array!(cur, n, f32, &what)),
        ValueType::U64 => Array::U64(read_fixed_array!(cur, n, u64, &what)),
        ValueType::I64 => Array::I64(read_fixed_array!(cur, n, i64, &what)),
        ValueType::F64 => Array::F64(read_fixed_array!(cur, n, f64, &what)),
        ValueType::Bool => {
            let start = cur.pos as u64;
            let bytes = cur.take(n, &what)?;
            let mut v = Vec::with_capacity(bytes.len());
            for (i, &b) in bytes.iter().enumerate() {
                v.push(parse_bool(b, key, start + i as u64)?);
            }
            Array::Bool(v)
        }
        ValueType::String => {
            // `n` is bounded by the bytes left (each string takes at least its 8-byte length)
            let mut v = StringArray::with_capacity(n as usize, 0);
            for _ in 0..n {
                v.push(cur.bytes_string(&|| format!("string in array of key {key:?}"))?);
            }
            v.shrink_to_fit();
            Array::String(v)
        }
        ValueType::Array => {
            // No reservation: every nesting level may claim the same remaining bytes, so
            // trusting each count would reserve about 2.7x the input per level.
            let mut v = Vec::new();
            for _ in 0..n {
                v.push(read_array(cur, key, depth + 1)?);
            }
            Array::Array(v)
        }
    })
}

impl Gguf {
    /// Parses the header, metadata and tensor table of a whole GGUF file held in `buf`,
    /// and checks every tensor's placement against `buf.len()`. Never panics.
    pub fn parse(buf: &[u8]) -> Result<Gguf> {
        let mut cur = Cursor { buf, pos: 0 };
        let magic = cur.take(4, &|| "magic".into()).map_err(|_| Error::BadMagic { found: buf.to_vec() })?;
        if magic != MAGIC {
            return Err(Error::BadMagic { found: magic.to_vec() });
        }
        let version = cur.u32(&|| "version".into())?;
        match version {
            2 | 3 => {}
            v if (1..=3).contains(&v.swap_bytes()) => return Err(Error::BigEndian { version: v.swap_bytes() }),
            v => return Err(Error::UnsupportedVersion { version: v }),
        }
        // A tensor info takes at least 24 bytes (name length, n_dims, type, offset); a
        // key/value pair at least 13 (key length, type, one byte of value).
        let n_tensors = cur.count(24, &|| "tensor count".into())?;
        let n_kv = cur.count(13, &|| "metadata key/value count".into())?;

        let mut metadata = Metadata::new();
        for i in 0..n_kv {
            let at = cur.pos as u64;
            let key = cur.utf8_string(&|| format!("key of metadata entry {i}"))?;
            let tat = cur.pos as u64;
            let type_id = cur.u32(&|| format!("value type of key {key:?}"))?;
            let t = ValueType::from_u32(type_id).ok_or_else(|| Error::InvalidValueType {
                key: key.clone(),
                type_id,
                offset: tat,
            })?;
            let value = read_scalar(&mut cur, t, &key, &|| format!("value of key {key:?}"))?;
            if metadata.get(&key).is_some() {
                return Err(Error::DuplicateKey { key, offset: at });
            }
            metadata.insert_new(key, value);
        }

        let alignment = match metadata.get(KEY_ALIGNMENT) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) => {
                let a = *a as u64;
                if a == 0 || !a.is_power_of_two() {
                    return Err(Error::BadAlignment { reason: format!("{a} is not a power of two") });
                }
                a
            }
            Some(v) => {
                return Err(Error::BadAlignment {
                    reason: format!("must be of type u32, found {}", v.value_type().name()),
                })
            }
        };

        // An entry is at least 24 bytes in the file but ~150 in memory (with its name in
        // the set), so reserve only up to a cap and let longer tables grow as they parse.
        let reserve = n_tensors.min(MAX_TENSOR_RESERVE) as usize;
        let mut tensors = Vec::with_capacity(reserve);
        let mut names = HashSet::with_capacity(reserve);
        for i in 0..n_tensors {
            let info_offset = cur.pos as u64;
            let name = cur.utf8_string(&|| format!("name of tensor {i}"))?;
            if !names.insert(name.clone()) {
                return Err(Error::DuplicateTensor { name, offset: info_offset });
            }
            let what = || format!("info of tensor {name:?}");
            let n_dims = cur.u32(&what)?;
            let bad = |reason: String| Error::BadShape { name: name.clone(), offset: info_offset, reason };
            if n_dims as usize > MAX_DIMS {
                return Err(bad(format!("{n_dims} dimensions, at most {MAX_DIMS}")));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            let mut n_elements: u64 = 1;
            for d in 0..n_dims {
                let v = cur.u64(&what)?;
                if v > i64::MAX as u64 {
                    return Err(bad(format!("dimension {d} is negative ({})", v as i64)));
                }
                n_elements = n_elements
                    .checked_mul(v)
                    .filter(|&n| n <= i64::MAX as u64)
                    .ok_or_else(|| bad("element count overflows int64".into()))?;
                dims.push(v);
            }
            let type_id = cur.u32(&what)?;
            let offset = cur.u64(&what)?;
            let size = match ggml_quants::by_id(type_id) {
                None => None,
                Some(t) => {
                    let ne0 = dims.first().copied().unwrap_or(1);
                    if ne0 % t.block_size as u64 != 0 {
                        return Err(Error::NotWholeBlocks { name, ne0, type_name: t.name, block_size: t.block_size });
                    }
                    Some(t.bytes_for(n_elements).ok_or_else(|| bad("byte size overflows".into()))?)
                }
            };
            if offset % alignment != 0 {
                return Err(Error::MisalignedTensor { name, offset, alignment });
            }
            tensors.push(TensorInfo { name, dims, type_id, offset, n_elements, size, info_offset });
        }

        let file_size = buf.len() as u64;
        let header_end = cur.pos as u64;
        // Like llama.cpp's gguf_init, the data section is aligned only when there are
        // tensors; a tensor-less file's data offset is the end of its header.
        let data_offset = if tensors.is_empty() {
            header_end
        } else {
            align_up(header_end, alignment)
                .ok_or_else(|| Error::BadAlignment { reason: "data offset overflows".into() })?
        };
        let data_len = file_size.saturating_sub(data_offset);
        let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            let end = t.offset.checked_add(t.size.unwrap_or(0));
            match end {
                Some(end) if end <= data_len => spans.push((t.offset, end, i)),
                _ => {
                    return Err(Error::TensorOutOfBounds {
                        name: t.name.clone(),
                        start: t.offset,
                        end: end.unwrap_or(u64::MAX),
                        data_len,
                    })
                }
            }
        }
        spans.retain(|s| s.1 > s.0);
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(Error::OverlappingTensors {
                    first: tensors[w[0].2].name.clone(),
                    second: tensors[w[1].2].name.clone(),
                    offset: w[1].0,
                    first_end: w[0].1,
                });
            }
        }
        Ok(Gguf { version, metadata, tensors, alignment, data_offset, header_end, file_size })
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The metadata, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Data alignment (`general.alignment` or 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// File offset where the data section starts.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// File offset just past the tensor table (before the alignment padding).
    pub fn header_end(&self) -> u64 {
        self.header_end
    }

    /// Size of the file that was parsed.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The bytes of `info`'s data within `file` (the same bytes given to
    /// [`Gguf::parse`]). Fails for a tensor whose type is not registered.
    pub fn tensor_data<'a>(&self, file: &'a [u8], info: &TensorInfo) -> Result<&'a [u8]> {
        let size = info.size.ok_or_else(|| Error::UnknownType { name: info.name.clone(), type_id: info.type_id })?;
        if size == 0 {
            // An empty tensor has no bytes to be out of bounds, even where the data
            // section would start past the end of the file (as `parse` accepts).
            return Ok(&[]);
        }
        let start = self.data_offset.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(size));
        match (start, end) {
            (Some(s), Some(e)) if e <= file.len() as u64 => Ok(&file[s as usize..e as usize]),
            _ => Err(Error::TensorOutOfBounds {
                name: info.name.clone(),
                start: info.offset,
                end: info.offset.saturating_add(size),
                data_len: (file.len() as u64).saturating_sub(self.data_offset),
            }),
        }
    }
}

/// A GGUF file, memory-mapped. Tensor data is borrowed from the map, never copied.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    bytes: Bytes,
    gguf: Gguf,
}

impl GgufFile {
    /// Maps and parses `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let io = |source| Error::Io { path: path.clone(), source };
        let file = File::open(&path).map_err(io)?;
        let bytes = Bytes::map(&file).map_err(io)?;
        let gguf = Gguf::parse(&bytes)?;
        Ok(GgufFile { path, bytes, gguf })
    }

    /// Parses a file held in memory.
    pub fn from_vec(bytes: Vec<u8>) -> Result<GgufFile> {
        let gguf = Gguf::parse(&bytes)?;
        Ok(GgufFile { path: PathBuf::from("<memory>"), bytes: Bytes::Owned(bytes), gguf })
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed header.
    pub fn header(&self) -> &Gguf {
        &self.gguf
    }

    /// All bytes of the file.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.gguf.version
    }

    /// The metadata, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.gguf.metadata
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.gguf.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.gguf.tensor(name)
    }

    /// Data alignment.
    pub fn alignment(&self) -> u64 {
        self.gguf.alignment
    }

    /// File offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.gguf.data_offset
    }

    /// File size in bytes.
    pub fn file_size(&self) -> u64 {
        self.gguf.file_size
    }

    /// A borrowed view of `info`'s data.
    pub fn tensor_data(&self, info: &TensorInfo) -> Result<&[u8]> {
        self.gguf.tensor_data(&self.bytes, info)
    }

    /// A borrowed view of the data of the tensor named `name`.
    pub fn tensor_data_by_name(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensor(name).ok_or_else(|| Error::NoSuchTensor { name: name.to_string() })?;
        self.tensor_data(info)
    }
}
