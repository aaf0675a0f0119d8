//! The architecture registry: architectures submit an [`Architecture`] (with
//! `gguf_registry::submit!`, which records the registering module), and [`load`] picks
//! one by `general.architecture` — the highest priority, then the module name, never
//! link order ([`gguf_registry`]'s rule); a clash is reported by [`registry_problems`].

use std::sync::{Arc, Mutex, OnceLock};

use gguf_format::SplitGguf;

use crate::model::Model;
use crate::{Error, Result};

/// Builds the model from the (mapped) file: one file or a `llama-gguf-split` shard set,
/// read as one — metadata from the first shard, tensors from all
/// ([`crate::loader::Loader`] and [`crate::loader::TensorRef`] hide which).
pub type LoadFn = fn(std::sync::Arc<SplitGguf>) -> Result<Box<dyn Model>>;

/// How to load one architecture from a GGUF model.
#[derive(Debug)]
pub struct Architecture {
    /// `general.architecture` value, e.g. `"llama"`.
    pub name: &'static str,
    /// The loader.
    pub load: LoadFn,
    /// Higher wins when two entries claim one name (a plug-in replacing a built-in);
    /// built-ins have 0.
    pub priority: i32,
    /// The module that registered it (set by `gguf_registry::submit!`).
    pub origin: &'static str,
}

impl Architecture {
    /// The fields other than `name` and `load`, for `Architecture { name, load, ..BASE }`.
    pub const BASE: Architecture =
        Architecture { name: "", load: |_| Err(Error::Invalid("no loader".into())), priority: 0, origin: "" };

    /// An entry at priority 0.
    pub const fn new(name: &'static str, load: LoadFn) -> Self {
        Architecture { name, load, priority: 0, origin: "" }
    }
}

inventory::collect!(Architecture);

gguf_registry::named_entry!(Architecture, "architecture", &'static str, |a: &Architecture| vec![a.name]);

fn index() -> &'static gguf_registry::Registry<Architecture> {
    static INDEX: OnceLock<gguf_registry::Registry<Architecture>> = OnceLock::new();
    INDEX.get_or_init(|| gguf_registry::Registry::new(inventory::iter::<Architecture>))
}

/// The architecture used for each registered name, sorted by name.
pub fn architectures() -> Vec<&'static Architecture> {
    index().winners()
}

/// The architecture registered under `name`.
pub fn lookup(name: &str) -> Result<&'static Architecture> {
    index().resolve(name).map_err(|miss| match miss {
        gguf_registry::Miss::Clash(p) => Error::Invalid(p.to_string()),
        gguf_registry::Miss::Unknown => Error::UnknownArchitecture {
            name: name.to_string(),
            known: architectures().iter().map(|a| a.name).collect::<Vec<_>>().join(", "),
        },
    })
}

/// Clashes (two architectures of one name and priority) and overrides. No problems for
/// the built-ins; tested.
pub fn registry_problems() -> gguf_registry::Report {
    index().report()
}

/// Loads the model in `file`, dispatching on `general.architecture`.
pub fn load(file: Arc<SplitGguf>) -> Result<Box<dyn Model>> {
    let arch = match file.metadata().get("general.architecture") {
        None => return Err(Error::MissingKey("general.architecture".into())),
        Some(v) => crate::loader::str_value("general.architecture", v)?,
    }
    .to_string();
    (lookup(&arch)?.load)(file)
}

/// The files (their addresses) that [`describe`] is loading now: their matrices stay in
/// place ([`crate::blocks::Linear::repack`] leaves them as stored).
static DESCRIBING: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Marks a file as loaded only to be described, until dropped.
pub(crate) struct DescribeMark(usize);

impl DescribeMark {
    /// Marks `file`, whose allocation the caller keeps alive while the mark lives.
    pub(crate) fn new(file: &Arc<SplitGguf>) -> DescribeMark {
        let at = Arc::as_ptr(file) as usize;
        DESCRIBING.lock().unwrap_or_else(|e| e.into_inner()).push(at);
        DescribeMark(at)
    }
}

impl Drop for DescribeMark {
    fn drop(&mut self) {
        let mut v = DESCRIBING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = v.iter().position(|&a| a == self.0) {
            v.swap_remove(i);
        }
    }
}

/// Whether `file` is being loaded by [`describe`].
pub(crate) fn describing(file: &Arc<SplitGguf>) -> bool {
    let at = Arc::as_ptr(file) as usize;
    DESCRIBING.lock().unwrap_or_else(|e| e.into_inner()).contains(&at)
}

/// The settings of the model in `file` ([`Model::describe`]: the family and its widths,
/// heads, experts ...), from a load that checks what every load checks — hyperparameters,
/// tensor names, shapes and types, the small vectors decoded at load — but moves no
/// matrix into a kernel's layout, so no weight matrix is read: milliseconds and a few MiB
/// whatever the file's size (a repacking load reads every repacked matrix). The model is
/// dropped before returning. Errors are the load's (naming the key or tensor).
///
/// The mark is per file (the address of `file`'s allocation, which the caller's `Arc`
/// keeps alive throughout), so loads of other files at the same time repack as usual.
pub fn describe(file: &Arc<SplitGguf>) -> Result<String> {
    let mark = DescribeMark::new(file);
    let model = load(file.clone())?;
    let text = model.describe();
    drop(model);
    drop(mark);
    Ok(text)
}
