//! The architecture registry: architectures submit an [`Architecture`] with
//! `inventory::submit!`, and [`load`] picks one by `general.architecture`.

use gguf_format::SplitGguf;

use crate::model::Model;
use crate::{Error, Result};

/// How to load one architecture from a GGUF model.
pub struct Architecture {
    /// `general.architecture` value, e.g. `"llama"`.
    pub name: &'static str,
    /// Builds the model from the (mapped) model: one file or a `llama-gguf-split` shard
    /// set, read as one — metadata from the first shard, tensors from all
    /// ([`crate::loader::Loader`] and [`crate::loader::TensorRef`] hide which).
    pub load: fn(std::sync::Arc<SplitGguf>) -> Result<Box<dyn Model>>,
}

inventory::collect!(Architecture);

/// Every registered architecture, sorted by name.
pub fn architectures() -> Vec<&'static Architecture> {
    let mut v: Vec<_> = inventory::iter::<Architecture>.into_iter().collect();
    v.sort_by_key(|a| a.name);
    v
}

/// The architecture registered under `name`.
pub fn lookup(name: &str) -> Result<&'static Architecture> {
    inventory::iter::<Architecture>.into_iter().find(|a| a.name == name).ok_or_else(|| Error::UnknownArchitecture {
        name: name.to_string(),
        known: architectures().iter().map(|a| a.name).collect::<Vec<_>>().join(", "),
    })
}

/// Loads the model in `file`, dispatching on `general.architecture`.
pub fn load(file: std::sync::Arc<SplitGguf>) -> Result<Box<dyn Model>> {
    let arch = match file.metadata().get("general.architecture") {
        None => return Err(Error::MissingKey("general.architecture".into())),
        Some(v) => crate::loader::str_value("general.architecture", v)?,
    }
    .to_string();
    (lookup(&arch)?.load)(file)
}
