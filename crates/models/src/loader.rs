//! Reading hyperparameters and locating tensors in a GGUF model — one file or a
//! `llama-gguf-split` shard set, read as one through [`SplitGguf`].

use std::sync::Arc;

use gguf_format::{Array, GgufFile, SplitGguf, TensorInfo, Value};

use crate::{Error, Result};

/// A tensor located in the model's mmaps: its type and shape, the shard holding it, and
/// its byte range in that shard.
#[derive(Debug, Clone)]
pub struct TensorRef {
    /// Tensor name.
    pub name: String,
    /// ggml type id.
    pub type_id: u32,
    /// Shape in ggml order (`dims[0]` contiguous).
    pub dims: Vec<u64>,
    /// Index of the shard holding the data ([`SplitGguf::shards`]; 0 for a plain file).
    pub shard: usize,
    /// Byte offset of the data in that shard's file.
    pub start: usize,
    /// Byte length of the data.
    pub len: usize,
}

impl TensorRef {
    /// The registered type's name.
    pub fn type_name(&self) -> String {
        ggml_quants::by_id(self.type_id).map(|t| t.name.to_string()).unwrap_or_else(|| format!("type{}", self.type_id))
    }

    /// Elements along `dims[0]`.
    pub fn cols(&self) -> usize {
        self.dims[0] as usize
    }

    /// Product of the dims after the first.
    pub fn rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }

    /// The shard file holding the data.
    pub fn shard_file<'a>(&self, model: &'a SplitGguf) -> &'a GgufFile {
        &model.shards()[self.shard]
    }

    /// The data bytes, borrowed from the holding shard's map.
    pub fn data<'a>(&self, model: &'a SplitGguf) -> &'a [u8] {
        &self.shard_file(model).bytes()[self.start..self.start + self.len]
    }
}

/// Reads typed hyperparameters under an architecture prefix and finds tensors.
pub struct Loader<'a> {
    file: &'a SplitGguf,
    shared: Option<&'a Arc<SplitGguf>>,
    arch: &'a str,
}

impl<'a> Loader<'a> {
    /// A loader for `file` (a plain file or a shard set), whose `general.architecture` is
    /// `arch`.
    pub fn new(file: &'a SplitGguf, arch: &'a str) -> Loader<'a> {
        Loader { file, shared: None, arch }
    }

    /// A loader for the shared `file`, from which the blocks
    /// ([`crate::blocks::Linear`], ...) that keep the model's maps alive can load.
    pub fn with_shared(file: &'a Arc<SplitGguf>, arch: &'a str) -> Loader<'a> {
        Loader { file, shared: Some(file), arch }
    }

    /// The shared model, for blocks that keep its maps alive ([`Loader::with_shared`]).
    pub fn shared(&self) -> Result<Arc<SplitGguf>> {
        self.shared.cloned().ok_or_else(|| {
            Error::Invalid("this loader was made with Loader::new; blocks need Loader::with_shared".into())
        })
    }

    /// The model: metadata from its first shard, tensors from all.
    pub fn file(&self) -> &'a SplitGguf {
        self.file
    }

    /// The architecture name (key prefix).
    pub fn arch(&self) -> &'a str {
        self.arch
    }

    /// `"{arch}.{suffix}"`.
    pub fn key(&self, suffix: &str) -> String {
        format!("{}.{}", self.arch, suffix)
    }

    fn value(&self, suffix: &str) -> Option<(String, &'a Value)> {
        let key = self.key(suffix);
        let v = self.file.metadata().get(&key)?;
        Some((key, v))
    }

    /// An optional unsigned integer.
    pub fn opt_u32(&self, suffix: &str) -> Result<Option<u32>> {
        match self.value(suffix) {
            None => Ok(None),
            Some((key, v)) => match v.as_u64().and_then(|x| u32::try_from(x).ok()) {
                Some(x) => Ok(Some(x)),
                None => Err(Error::BadKey {
                    key,
                    msg: format!("expected an unsigned integer, found {}", v.value_type().name()),
                }),
            },
        }
    }

    /// An optional bool (llama.cpp's `get_key` into a `bool`: a bool or an integer, ≠ 0).
    pub fn opt_bool(&self, suffix: &str) -> Result<Option<bool>> {
        match self.value(suffix) {
            None => Ok(None),
            Some((key, v)) => match v.as_bool().or_else(|| v.as_u64().map(|x| x != 0)) {
                Some(b) => Ok(Some(b)),
                None => Err(Error::BadKey { key, msg: format!("expected a bool, found {}", v.value_type().name()) }),
            },
        }
    }

    /// A required unsigned integer.
    pub fn u32(&self, suffix: &str) -> Result<u32> {
        self.opt_u32(suffix)?.ok_or_else(|| Error::MissingKey(self.key(suffix)))
    }

    /// An optional float; NaN and infinities (and values beyond f32's range) are refused:
    /// no hyperparameter of any architecture is meaningful as one.
    pub fn opt_f32(&self, suffix: &str) -> Result<Option<f32>> {
        match self.value(suffix) {
            None => Ok(None),
            Some((key, v)) => match v.as_f64() {
                Some(x) if (x as f32).is_finite() => Ok(Some(x as f32)),
                Some(x) => Err(Error::BadKey { key, msg: format!("expected a finite number, found {x}") }),
                None => Err(Error::BadKey { key, msg: format!("expected a number, found {}", v.value_type().name()) }),
            },
        }
    }

    /// An optional float that must lie in `range`.
    pub fn opt_f32_in(
        &self,
        suffix: &str,
        range: impl std::ops::RangeBounds<f32> + std::fmt::Debug,
    ) -> Result<Option<f32>> {
        match self.opt_f32(suffix)? {
            Some(x) if !range.contains(&x) => {
                Err(Error::BadKey { key: self.key(suffix), msg: format!("{x} is out of range ({range:?})") })
            }
            x => Ok(x),
        }
    }

    /// A required float.
    pub fn f32(&self, suffix: &str) -> Result<f32> {
        self.opt_f32(suffix)?.ok_or_else(|| Error::MissingKey(self.key(suffix)))
    }

    /// An optional string.
    pub fn opt_str(&self, suffix: &str) -> Result<Option<&'a str>> {
        match self.value(suffix) {
            None => Ok(None),
            Some((key, v)) => str_value(&key, v).map(Some),
        }
    }

    /// A per-layer unsigned value stored either as one integer or as an array of
    /// `n_layer` integers (llama.cpp's `get_key_or_arr`).
    pub fn opt_u32_per_layer(&self, suffix: &str, n_layer: usize) -> Result<Option<Vec<u32>>> {
        let Some((key, v)) = self.value(suffix) else { return Ok(None) };
        if let Some(x) = v.as_u64() {
            let x = u32::try_from(x).map_err(|_| Error::BadKey { key, msg: "value too large".into() })?;
            return Ok(Some(vec![x; n_layer]));
        }
        let bad = |msg: String| Error::BadKey { key: key.clone(), msg };
        let Some(arr) = v.as_array() else {
            return Err(bad(format!("expected an integer or an array, found {}", v.value_type().name())));
        };
        if arr.len() != n_layer {
            return Err(bad(format!("array has {} entries, expected one per layer ({n_layer})", arr.len())));
        }
        let mut out = Vec::with_capacity(n_layer);
        for i in 0..arr.len() {
            let x = arr.get(i).and_then(|e| e.as_u64()).and_then(|x| u32::try_from(x).ok());
            out.push(x.ok_or_else(|| bad(format!("entry {i} is not an unsigned integer")))?);
        }
        Ok(Some(out))
    }

    /// An optional array of booleans (or integers read as booleans).
    pub fn opt_bool_array(&self, suffix: &str) -> Result<Option<Vec<bool>>> {
        let Some((key, v)) = self.value(suffix) else { return Ok(None) };
        let Some(arr) = v.as_array() else { return Ok(None) };
        let mut out = Vec::with_capacity(arr.len());
        match arr {
            Array::Bool(b) => out.extend(b.iter().copied()),
            _ => {
                for i in 0..arr.len() {
                    let x = arr.get(i).and_then(|e| e.as_u64());
                    out.push(
                        x.ok_or_else(|| Error::BadKey { key: key.clone(), msg: format!("entry {i} is not a bool") })?
                            != 0,
                    );
                }
            }
        }
        Ok(Some(out))
    }

    fn info(&self, name: &str) -> Option<&'a TensorInfo> {
        self.file.tensor(name)
    }

    /// Whether the file has a tensor of this name.
    pub fn has(&self, name: &str) -> bool {
        self.info(name).is_some()
    }

    /// An optional tensor with the given shape (ggml order; trailing 1s are ignored).
    pub fn opt_tensor(&self, name: &str, want: &[u64]) -> Result<Option<TensorRef>> {
        let Some(info) = self.info(name) else { return Ok(None) };
        let strip = |d: &[u64]| {
            let mut v = d.to_vec();
            while v.len() > 1 && v.last() == Some(&1) {
                v.pop();
            }
            v
        };
        if strip(&info.dims) != strip(want) {
            return Err(Error::Shape { name: name.to_string(), got: info.dims.clone(), want: want.to_vec() });
        }
        let (shard_file, local) =
            self.file.tensor_location(info).ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        let shard = self.file.shard_of(info).ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        let data = shard_file.tensor_data(local)?;
        let start = data.as_ptr() as usize - shard_file.bytes().as_ptr() as usize;
        let mut dims = strip(&info.dims);
        if dims.len() == 1 && want.len() > 1 {
            dims = want.to_vec();
        }
        Ok(Some(TensorRef { name: name.to_string(), type_id: info.type_id, dims, shard, start, len: data.len() }))
    }

    /// A required tensor with the given shape.
    pub fn tensor(&self, name: &str, want: &[u64]) -> Result<TensorRef> {
        self.opt_tensor(name, want)?.ok_or_else(|| Error::MissingTensor(name.to_string()))
    }

    /// A small tensor (norm weights, biases) decoded to `f32`.
    pub fn opt_vector(&self, name: &str, len: u64) -> Result<Option<Vec<f32>>> {
        self.opt_floats(name, &[len])
    }

    /// A small tensor of shape `want` (per-expert biases) decoded to `f32`, in ggml order.
    pub fn opt_floats(&self, name: &str, want: &[u64]) -> Result<Option<Vec<f32>>> {
        let Some(t) = self.opt_tensor(name, want)? else { return Ok(None) };
        let traits = ggml_quants::lookup_id(t.type_id)?;
        let v = traits.dequantize_to_vec(t.data(self.file))?;
        // cheap (a vector per layer) and it turns a garbage-generating file into an error
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::Invalid(format!("tensor `{name}`: element {i} is {} (must be finite)", v[i])));
        }
        Ok(Some(v))
    }

    /// A required small tensor decoded to `f32`.
    pub fn vector(&self, name: &str, len: u64) -> Result<Vec<f32>> {
        self.opt_vector(name, len)?.ok_or_else(|| Error::MissingTensor(name.to_string()))
    }
}

/// `v` as UTF-8 text, or an error naming `key` (a string that is not UTF-8 says so).
pub(crate) fn str_value<'v>(key: &str, v: &'v Value) -> Result<&'v str> {
    match v.as_str() {
        Some(s) => Ok(s),
        None if matches!(v, Value::String(_)) => {
            Err(Error::BadKey { key: key.into(), msg: "the string is not valid UTF-8".into() })
        }
        None => {
            Err(Error::BadKey { key: key.into(), msg: format!("expected a string, found {}", v.value_type().name()) })
        }
    }
}
