//! A byte-level GGUF builder, independent of `GgufWriter`, that records where every
//! field lies so that the hostile tests can truncate or corrupt one field at a time.

use std::ops::Range;

use gguf_format::{Array, Value};

/// Which part of the file a byte belongs to; hostile tests expect errors to name it.
#[derive(Debug, Clone, PartialEq)]
pub enum Owner {
    /// Magic, version and the two counts.
    Header,
    /// Metadata entry `index` with key `key` (lossy text of the key bytes).
    Kv { index: usize, key: String },
    /// Tensor-table entry `index` named `name`.
    Tensor { index: usize, name: String },
    /// Alignment padding and tensor data.
    Data,
}

impl Owner {
    /// Strings of which an error message about this part must contain one.
    pub fn labels(&self) -> Vec<String> {
        match self {
            Owner::Header => vec!["version".into(), "tensor count".into(), "metadata key/value count".into()],
            Owner::Kv { index, key } => vec![format!("metadata entry {index}"), format!("{key:?}")],
            Owner::Tensor { index, name } => vec![format!("tensor {index}"), format!("{name:?}")],
            Owner::Data => vec![],
        }
    }
}

/// What a recorded field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `u32` version.
    Version,
    /// `u64` tensor count.
    NTensors,
    /// `u64` metadata count.
    NKv,
    /// `u64` length of a key.
    KeyLen,
    /// `u64` length of a string value, top-level.
    StrLen,
    /// `u64` length of a string inside an array.
    ArrStrLen,
    /// `u32` value type of a key.
    ValueType,
    /// `u32` element type of an array.
    ElemType,
    /// `u64` element count of an array.
    ArrayCount,
    /// One bool byte.
    Bool,
    /// `u64` length of a tensor name.
    NameLen,
    /// `u32` dimension count.
    NDims,
    /// One `u64` dimension.
    Dim,
    /// `u32` ggml type id.
    TensorType,
    /// `u64` data offset.
    TensorOffset,
}

/// One recorded field.
#[derive(Debug, Clone)]
pub struct Field {
    /// Byte offset.
    pub at: usize,
    /// What it is.
    pub kind: Kind,
    /// Where it belongs.
    pub owner: Owner,
}

/// A GGUF file under construction, with its field map.
#[derive(Debug, Clone, Default)]
pub struct Raw {
    /// The bytes so far.
    pub buf: Vec<u8>,
    /// Every field written, in order.
    pub fields: Vec<Field>,
    /// The byte range of each part.
    pub parts: Vec<(Range<usize>, Owner)>,
    n_kv: usize,
    n_tensors: usize,
    owner: Option<Owner>,
}

impl Raw {
    /// Magic, `version`, and the two counts as given (they are not checked).
    pub fn new(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw { owner: Some(Owner::Header), ..Raw::default() };
        r.buf.extend_from_slice(b"GGUF");
        r.u32(Kind::Version, version);
        r.u64(Kind::NTensors, n_tensors);
        r.u64(Kind::NKv, n_kv);
        r.parts.push((0..r.buf.len(), Owner::Header));
        r
    }

    fn mark(&mut self, kind: Kind) {
        let owner = self.owner.clone().unwrap_or(Owner::Data);
        self.fields.push(Field { at: self.buf.len(), kind, owner });
    }

    fn u32(&mut self, kind: Kind, v: u32) {
        self.mark(kind);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, kind: Kind, v: u64) {
        self.mark(kind);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn str(&mut self, kind: Kind, s: &[u8]) {
        self.u64(kind, s.len() as u64);
        self.buf.extend_from_slice(s);
    }

    /// A key/value pair with a key given as raw bytes.
    pub fn kv_bytes(&mut self, key: &[u8], value: &Value) -> &mut Self {
        let start = self.buf.len();
        let owner = Owner::Kv { index: self.n_kv, key: String::from_utf8_lossy(key).into_owned() };
        self.owner = Some(owner.clone());
        self.str(Kind::KeyLen, key);
        self.u32(Kind::ValueType, value.value_type() as u32);
        self.value(value);
        self.parts.push((start..self.buf.len(), owner));
        self.n_kv += 1;
        self
    }

    /// A key/value pair.
    pub fn kv(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.kv_bytes(key.as_bytes(), &value.into())
    }

    /// A key with a raw value type id and raw value bytes.
    pub fn kv_raw(&mut self, key: &str, type_id: u32, payload: &[u8]) -> &mut Self {
        let start = self.buf.len();
        let owner = Owner::Kv { index: self.n_kv, key: key.to_string() };
        self.owner = Some(owner.clone());
        self.str(Kind::KeyLen, key.as_bytes());
        self.u32(Kind::ValueType, type_id);
        self.buf.extend_from_slice(payload);
        self.parts.push((start..self.buf.len(), owner));
        self.n_kv += 1;
        self
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::U8(x) => self.buf.push(*x),
            Value::I8(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::U16(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::I32(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::F32(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::U64(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::I64(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(b) => {
                self.mark(Kind::Bool);
                self.buf.push(*b as u8);
            }
            Value::String(s) => self.str(Kind::StrLen, s),
            Value::Array(a) => self.array(a),
        }
    }

    fn array(&mut self, a: &Array) {
        self.u32(Kind::ElemType, a.elem_type() as u32);
        self.u64(Kind::ArrayCount, a.len() as u64);
        match a {
            Array::String(v) => {
                for s in v {
                    self.str(Kind::ArrStrLen, s);
                }
            }
            Array::Array(v) => {
                for inner in v {
                    self.array(inner);
                }
            }
            _ => {
                for i in 0..a.len() {
                    self.value(&a.get(i).expect("in range"));
                }
            }
        }
    }

    /// A tensor-table entry with a raw name.
    pub fn tensor_bytes(&mut self, name: &[u8], dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        let start = self.buf.len();
        let owner = Owner::Tensor { index: self.n_tensors, name: String::from_utf8_lossy(name).into_owned() };
        self.owner = Some(owner.clone());
        self.str(Kind::NameLen, name);
        self.u32(Kind::NDims, dims.len() as u32);
        for &d in dims {
            self.u64(Kind::Dim, d);
        }
        self.u32(Kind::TensorType, type_id);
        self.u64(Kind::TensorOffset, offset);
        self.parts.push((start..self.buf.len(), owner));
        self.n_tensors += 1;
        self
    }

    /// A tensor-table entry.
    pub fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.tensor_bytes(name.as_bytes(), dims, type_id, offset)
    }

    /// Zero padding up to a multiple of `alignment`; starts the data section.
    pub fn align(&mut self, alignment: usize) -> &mut Self {
        self.owner = Some(Owner::Data);
        let start = self.buf.len();
        while !self.buf.len().is_multiple_of(alignment) {
            self.buf.push(0);
        }
        self.parts.push((start..self.buf.len(), Owner::Data));
        self
    }

    /// Raw bytes at the end.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.owner = Some(Owner::Data);
        let start = self.buf.len();
        self.buf.extend_from_slice(b);
        self.parts.push((start..self.buf.len(), Owner::Data));
        self
    }

    /// The part that byte `at` belongs to.
    pub fn owner_at(&self, at: usize) -> Owner {
        self.parts.iter().find(|(r, _)| r.contains(&at)).map(|(_, o)| o.clone()).unwrap_or(Owner::Data)
    }

    /// The fields of one kind.
    pub fn fields_of(&self, kind: Kind) -> impl Iterator<Item = &Field> {
        self.fields.iter().filter(move |f| f.kind == kind)
    }

    /// The bytes with the `u64` at `at` replaced.
    pub fn with_u64(&self, at: usize, v: u64) -> Vec<u8> {
        let mut b = self.buf.clone();
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        b
    }

    /// The bytes with the `u32` at `at` replaced.
    pub fn with_u32(&self, at: usize, v: u32) -> Vec<u8> {
        let mut b = self.buf.clone();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        b
    }

    /// The bytes with the byte at `at` replaced.
    pub fn with_u8(&self, at: usize, v: u8) -> Vec<u8> {
        let mut b = self.buf.clone();
        b[at] = v;
        b
    }

    /// The bytes, finished.
    pub fn finish(&self) -> Vec<u8> {
        self.buf.clone()
    }
}

/// Deterministic pseudo-random bytes (xorshift), so tests need no `rand`.
pub fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// The exact file encoding of a value (type id excluded), for bit-exact comparisons that
/// `PartialEq` cannot make (NaN payloads, `-0.0`).
pub fn encode_value(v: &Value) -> Vec<u8> {
    let mut r = Raw::default();
    r.u32(Kind::ValueType, v.value_type() as u32);
    r.value(v);
    r.buf
}
