//! Split models: llama.cpp's shard sets `PREFIX-00001-of-0000N.gguf` … read as one model.
//!
//! `llama-gguf-split` writes a model as N GGUF files. The first holds all metadata; every
//! shard holds some of the tensors and three keys: `split.no` (u16, 0-based), `split.count`
//! (u16, N) and `split.tensors.count` (i32, the model's tensor total). llama.cpp's loader
//! (`llama_model_loader`) treats a file as split when `split.count` > 1, derives the other
//! file names from the one given (`llama_split_prefix` / `llama_split_path`) and requires
//! each shard's `split.no` to be its position and the tensor total to match.
//!
//! [`SplitGguf`] does the same, and a plain file (no `split.count`, or one ≤ 1) opens
//! through it too as a model of one shard. Unlike llama.cpp, any shard may be given, not
//! only the first; the model's metadata is always the first shard's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::reader::{GgufFile, TensorInfo};
use crate::value::{Metadata, Value};
use crate::{Error, Result};

/// `split.no`: the 0-based position of a shard (u16).
pub const KEY_SPLIT_NO: &str = "split.no";
/// `split.count`: the number of shards (u16).
pub const KEY_SPLIT_COUNT: &str = "split.count";
/// `split.tensors.count`: the number of tensors over all shards (i32).
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// The path of shard `split_no` (0-based) of `split_count`: `PREFIX-00001-of-00003.gguf`
/// for `split_no` 0 (`llama_split_path`).
pub fn split_path(prefix: &Path, split_no: u32, split_count: u32) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(split_suffix(split_no, split_count));
    PathBuf::from(s)
}

/// The prefix of `path` if it is named as shard `split_no` (0-based) of `split_count`,
/// i.e. ends in `-NNNNN-of-MMMMM.gguf` with something before it (`llama_split_prefix`).
/// `None` otherwise, and for a path that is not UTF-8.
pub fn split_prefix(path: &Path, split_no: u32, split_count: u32) -> Option<PathBuf> {
    let s = path.to_str()?;
    let suffix = split_suffix(split_no, split_count);
    if s.len() <= suffix.len() {
        return None;
    }
    s.strip_suffix(&suffix).map(PathBuf::from)
}

fn split_suffix(split_no: u32, split_count: u32) -> String {
    format!("-{:05}-of-{:05}.gguf", split_no as u64 + 1, split_count)
}

fn u16_key(file: &GgufFile, key: &str) -> Result<Option<u16>> {
    match file.metadata().get(key) {
        None => Ok(None),
        Some(Value::U16(v)) => Ok(Some(*v)),
        Some(v) => Err(Error::Split {
            path: file.path().to_path_buf(),
            reason: format!("{key} must be of type u16, found {}", v.value_type().name()),
        }),
    }
}

/// Where `file` sits in a split model: `Some((split_no, split_count))` (0-based `split_no`)
/// when its `split.count` is above 1, `None` for a plain file. Errors for `split.*` keys of
/// the wrong type, a missing `split.no`, or a `split.no` not below `split.count`.
pub fn split_position(file: &GgufFile) -> Result<Option<(u16, u16)>> {
    let count = match u16_key(file, KEY_SPLIT_COUNT)? {
        Some(c) if c > 1 => c,
        _ => return Ok(None),
    };
    let bad = |reason: String| Error::Split { path: file.path().to_path_buf(), reason };
    let no = u16_key(file, KEY_SPLIT_NO)?
        .ok_or_else(|| bad(format!("{KEY_SPLIT_COUNT} is {count} but {KEY_SPLIT_NO} is missing")))?;
    if no >= count {
        return Err(bad(format!("{KEY_SPLIT_NO} is {no}, not below {KEY_SPLIT_COUNT} {count}")));
    }
    Ok(Some((no, count)))
}

/// A model stored as one GGUF file or as a `llama-gguf-split` shard set, opened as one:
/// the first shard's metadata, every shard's tensors in shard order, and each tensor's data
/// borrowed from the map of the shard that holds it.
#[derive(Debug)]
pub struct SplitGguf {
    shards: Vec<GgufFile>,
    /// 0 for a plain file, else `split.count`.
    split_count: u16,
    tensors: Vec<TensorInfo>,
    /// Parallel to `tensors`: the shard holding each.
    shard_of: Vec<usize>,
    index: HashMap<String, usize>,
}

impl SplitGguf {
    /// Opens `path` and, when it is a shard of a split model, every other shard (named
    /// after it), checking that they form one model.
    pub fn open(path: impl AsRef<Path>) -> Result<SplitGguf> {
        SplitGguf::from_file(GgufFile::open(path)?)
    }

    /// Like [`SplitGguf::open`], starting from a file already open (kept as its shard).
    pub fn from_file(file: GgufFile) -> Result<SplitGguf> {
        let Some((no, count)) = split_position(&file)? else {
            return Ok(SplitGguf::single(file));
        };
        let path = file.path().to_path_buf();
        let prefix = split_prefix(&path, no as u32, count as u32).ok_or_else(|| Error::Split {
            path: path.clone(),
            reason: format!(
                "it is shard {} of {count} ({KEY_SPLIT_NO} = {no}) but its name does not end in \"{}\", so the \
                 other shards cannot be found",
                no as u32 + 1,
                split_suffix(no as u32, count as u32)
            ),
        })?;
        let mut given = Some(file);
        let mut shards = Vec::with_capacity(count as usize);
        for i in 0..count as u32 {
            if i == no as u32 {
                shards.extend(given.take());
                continue;
            }
            let p = split_path(&prefix, i, count as u32);
            let f = GgufFile::open(&p).map_err(|e| Error::SplitShard {
                shard: i + 1,
                count: count as u32,
                path: p.clone(),
                cause: Box::new(e),
            })?;
            shards.push(f);
        }
        SplitGguf::from_shards(shards, count)
    }

    fn single(file: GgufFile) -> SplitGguf {
        let tensors = file.tensors().to_vec();
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        SplitGguf { shard_of: vec![0; tensors.len()], tensors, index, split_count: 0, shards: vec![file] }
    }

    /// Checks the shard set and builds the union tensor table.
    fn from_shards(shards: Vec<GgufFile>, count: u16) -> Result<SplitGguf> {
        let bad = |f: &GgufFile, reason: String| Error::Split { path: f.path().to_path_buf(), reason };
        let first = &shards[0];
        let expected = match first.metadata().get(KEY_SPLIT_TENSORS_COUNT) {
            Some(Value::I32(n)) if *n >= 0 => *n as u64,
            Some(Value::I32(n)) => return Err(bad(first, format!("{KEY_SPLIT_TENSORS_COUNT} is negative ({n})"))),
            Some(v) => {
                return Err(bad(
                    first,
                    format!("{KEY_SPLIT_TENSORS_COUNT} must be of type i32, found {}", v.value_type().name()),
                ))
            }
            None => return Err(bad(first, format!("{KEY_SPLIT_TENSORS_COUNT} is missing from the first shard"))),
        };
        let mut tensors = Vec::new();
        let mut shard_of = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, f) in shards.iter().enumerate() {
            let nth = i + 1;
            match u16_key(f, KEY_SPLIT_NO)? {
                Some(no) if no as usize == i => {}
                Some(no) => {
                    return Err(bad(
                        f,
                        format!("named as shard {nth} of {count} but its {KEY_SPLIT_NO} is {no} (expected {i})"),
                    ))
                }
                None => return Err(bad(f, format!("shard {nth} of {count} has no {KEY_SPLIT_NO} key"))),
            }
            match u16_key(f, KEY_SPLIT_COUNT)? {
                Some(c) if c == count => {}
                Some(c) => {
                    return Err(bad(
                        f,
                        format!("shard {nth} has {KEY_SPLIT_COUNT} {c}, but the set has {count} shards"),
                    ))
                }
                None => return Err(bad(f, format!("shard {nth} of {count} has no {KEY_SPLIT_COUNT} key"))),
            }
            if let Some(v) = f.metadata().get(KEY_SPLIT_TENSORS_COUNT) {
                if *v != Value::I32(expected as i32) {
                    let found = match v {
                        Value::I32(n) => n.to_string(),
                        v => format!("of type {}", v.value_type().name()),
                    };
                    return Err(bad(
                        f,
                        format!("shard {nth} has {KEY_SPLIT_TENSORS_COUNT} {found}, the first shard {expected}"),
                    ));
                }
            }
            for t in f.tensors() {
                if let Some(&j) = index.get(&t.name) {
                    return Err(bad(
                        f,
                        format!("tensor {:?} is in shard {} and again in shard {nth}", t.name, shard_of[j] + 1),
                    ));
                }
                index.insert(t.name.clone(), tensors.len());
                tensors.push(t.clone());
                shard_of.push(i);
            }
        }
        if tensors.len() as u64 != expected {
            return Err(bad(
                first,
                format!(
                    "{KEY_SPLIT_TENSORS_COUNT} is {expected} but the {count} shards hold {} tensors",
                    tensors.len()
                ),
            ));
        }
        Ok(SplitGguf { shards, split_count: count, tensors, shard_of, index })
    }

    /// Whether the model is a shard set (`split.count` > 1).
    pub fn is_split(&self) -> bool {
        self.split_count > 1
    }

    /// The shards, in order (one for a plain file).
    pub fn shards(&self) -> &[GgufFile] {
        &self.shards
    }

    /// The first shard (the file itself for a plain file): the one with the metadata.
    pub fn first(&self) -> &GgufFile {
        &self.shards[0]
    }

    /// The model's metadata: the first shard's, in file order (with its `split.*` keys).
    pub fn metadata(&self) -> &Metadata {
        self.first().metadata()
    }

    /// Every tensor, in shard order then file order. Offsets are relative to the data
    /// section of the shard holding the tensor ([`SplitGguf::shard_of`]).
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The index (0-based) of the shard holding the tensor named like `info`.
    pub fn shard_of(&self, info: &TensorInfo) -> Option<usize> {
        self.index.get(&info.name).map(|&i| self.shard_of[i])
    }

    /// The shard holding the tensor named like `info`, and that shard's own entry for it
    /// (its offset is relative to that shard's [`GgufFile::data_offset`]) — what a reader
    /// that `pread`s tensor data from the file, rather than the map, needs.
    pub fn tensor_location(&self, info: &TensorInfo) -> Option<(&GgufFile, &TensorInfo)> {
        self.index.get(&info.name).map(|&i| (&self.shards[self.shard_of[i]], &self.tensors[i]))
    }

    /// A borrowed view of the data of the tensor named like `info`, from the map of the
    /// shard that holds it. The tensor is looked up by name, so an info from another
    /// file never reads the wrong bytes.
    pub fn tensor_data(&self, info: &TensorInfo) -> Result<&[u8]> {
        self.tensor_data_by_name(&info.name)
    }

    /// A borrowed view of the data of the tensor named `name`.
    pub fn tensor_data_by_name(&self, name: &str) -> Result<&[u8]> {
        let &i = self.index.get(name).ok_or_else(|| Error::NoSuchTensor { name: name.to_string() })?;
        self.shards[self.shard_of[i]].tensor_data(&self.tensors[i])
    }

    /// Sum of the shards' file sizes.
    pub fn total_size(&self) -> u64 {
        self.shards.iter().map(GgufFile::file_size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufWriter;

    #[test]
    fn path_and_prefix_follow_llama() {
        let p = split_path(Path::new("/m/model"), 0, 3);
        assert_eq!(p, Path::new("/m/model-00001-of-00003.gguf"));
        assert_eq!(split_path(Path::new("x"), 99_999, 100_000), Path::new("x-100000-of-100000.gguf"));
        assert_eq!(split_prefix(&p, 0, 3).unwrap(), Path::new("/m/model"));
        assert_eq!(split_prefix(&p, 1, 3), None);
        assert_eq!(split_prefix(&p, 0, 4), None);
        // llama_split_prefix wants something before the suffix.
        assert_eq!(split_prefix(Path::new("-00001-of-00002.gguf"), 0, 2), None);
        assert_eq!(split_prefix(Path::new("d/-00001-of-00002.gguf"), 0, 2).unwrap(), Path::new("d/"));
    }

    /// Shard `no` of `count` of a model of `per_shard` f32 tensors each; `f` may alter it.
    fn shard(
        dir: &Path,
        prefix: &str,
        no: u16,
        count: u16,
        per_shard: usize,
        f: impl FnOnce(&mut GgufWriter<'static>),
    ) -> PathBuf {
        let mut w = GgufWriter::new();
        if no == 0 {
            w.add_kv("general.architecture", "llama");
        }
        w.add_kv(KEY_SPLIT_NO, no);
        w.add_kv(KEY_SPLIT_TENSORS_COUNT, (per_shard * count as usize) as i32);
        w.add_kv(KEY_SPLIT_COUNT, count);
        for j in 0..per_shard {
            let id = no as usize * per_shard + j;
            let data: Vec<u8> = (0..4).flat_map(|k| ((id * 10 + k) as f32).to_le_bytes()).collect();
            w.add_tensor_owned(&format!("t{id}"), &[4], 0, data).unwrap();
        }
        f(&mut w);
        let p = split_path(&dir.join(prefix), no as u32, count as u32);
        w.write_to_path(&p).unwrap();
        p
    }

    fn set3(dir: &Path) -> Vec<PathBuf> {
        (0..3).map(|i| shard(dir, "m", i, 3, 2, |_| {})).collect()
    }

    fn err(p: &Path) -> String {
        SplitGguf::open(p).unwrap_err().to_string()
    }

    #[test]
    fn opens_a_whole_set_from_any_shard() {
        let dir = tempfile::tempdir().unwrap();
        let paths = set3(dir.path());
        for p in &paths {
            let m = SplitGguf::open(p).unwrap();
            assert!(m.is_split());
            assert_eq!(m.shards().len(), 3);
            assert_eq!(m.metadata().get_str("general.architecture"), Some("llama"));
            let names: Vec<&str> = m.tensors().iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["t0", "t1", "t2", "t3", "t4", "t5"]);
            for (id, t) in m.tensors().iter().enumerate() {
                assert_eq!(m.shard_of(t), Some(id / 2));
                let (f, local) = m.tensor_location(t).unwrap();
                assert_eq!(f.path(), paths[id / 2]);
                assert_eq!(f.tensor_data(local).unwrap(), m.tensor_data(t).unwrap());
                let d = m.tensor_data(t).unwrap();
                assert_eq!(f32::from_le_bytes(d[4..8].try_into().unwrap()), (id * 10 + 1) as f32);
            }
            assert_eq!(m.total_size(), paths.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum::<u64>());
        }
    }

    #[test]
    fn a_plain_file_is_one_shard() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plain.gguf");
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "llama");
        w.add_tensor_owned("a", &[2], 0, vec![0; 8]).unwrap();
        w.write_to_path(&p).unwrap();
        let m = SplitGguf::open(&p).unwrap();
        assert!(!m.is_split());
        assert_eq!(m.shards().len(), 1);
        assert_eq!(m.tensors().len(), 1);
        assert_eq!(m.tensor_data_by_name("a").unwrap().len(), 8);
        assert!(matches!(m.tensor_data_by_name("b"), Err(Error::NoSuchTensor { .. })));
        // split.count 1 (e.g. a one-shard set) and 0 (llama-gguf-split --merge output) too.
        for c in [0u16, 1] {
            let q = dir.path().join(format!("c{c}.gguf"));
            let mut w = GgufWriter::new();
            w.add_kv(KEY_SPLIT_COUNT, c);
            w.write_to_path(&q).unwrap();
            assert!(!SplitGguf::open(&q).unwrap().is_split());
        }
    }

    #[test]
    fn a_missing_shard_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let paths = set3(dir.path());
        std::fs::remove_file(&paths[1]).unwrap();
        let e = err(&paths[0]);
        assert!(e.contains("shard 2 of 3") && e.contains("m-00002-of-00003.gguf"), "{e}");
        assert!(matches!(SplitGguf::open(&paths[2]), Err(Error::SplitShard { shard: 2, count: 3, .. })));
    }

    #[test]
    fn a_corrupt_shard_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let paths = set3(dir.path());
        std::fs::write(&paths[2], b"GGUF\x03\0\0\0").unwrap();
        let e = err(&paths[0]);
        assert!(e.contains("shard 3 of 3") && e.contains("truncated"), "{e}");
    }

    #[test]
    fn a_wrong_split_no_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        set3(dir.path());
        // Shard 2's file holds a split.no of 2: wrong place.
        let p2 = shard(dir.path(), "m", 1, 3, 2, |w| {
            w.add_kv(KEY_SPLIT_NO, 2u16);
        });
        let e = err(&dir.path().join("m-00001-of-00003.gguf"));
        assert!(e.contains("m-00002-of-00003.gguf") && e.contains("split.no is 2 (expected 1)"), "{e}");
        // Opened through that file itself, its split.no and its name disagree.
        assert!(err(&p2).contains("does not end in \"-00003-of-00003.gguf\""));
    }

    #[test]
    fn a_count_mismatch_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        set3(dir.path());
        shard(dir.path(), "m", 2, 3, 2, |w| {
            w.add_kv(KEY_SPLIT_COUNT, 4u16);
        });
        let e = err(&dir.path().join("m-00001-of-00003.gguf"));
        assert!(e.contains("m-00003-of-00003.gguf") && e.contains("split.count 4, but the set has 3"), "{e}");
    }

    #[test]
    fn a_tensor_total_mismatch_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        set3(dir.path());
        // The first shard claims 7 tensors; the others agree with it; 6 exist.
        for no in 0..3 {
            shard(dir.path(), "m", no, 3, 2, |w| {
                w.add_kv(KEY_SPLIT_TENSORS_COUNT, 7i32);
            });
        }
        let e = err(&dir.path().join("m-00002-of-00003.gguf"));
        assert!(e.contains("split.tensors.count is 7 but the 3 shards hold 6 tensors"), "{e}");
        // A shard disagreeing with the first.
        shard(dir.path(), "m", 1, 3, 2, |_| {});
        let e = err(&dir.path().join("m-00001-of-00003.gguf"));
        assert!(e.contains("shard 2 has split.tensors.count 6, the first shard 7"), "{e}");
    }

    #[test]
    fn a_duplicate_tensor_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        set3(dir.path());
        shard(dir.path(), "m", 2, 3, 2, |w| {
            w.add_tensor_owned("t1", &[1], 0, vec![0; 4]).unwrap();
        });
        let e = err(&dir.path().join("m-00001-of-00003.gguf"));
        assert!(e.contains("tensor \"t1\" is in shard 1 and again in shard 3"), "{e}");
    }

    #[test]
    fn bad_split_keys_and_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let paths = set3(dir.path());
        let renamed = dir.path().join("model.gguf");
        std::fs::copy(&paths[0], &renamed).unwrap();
        let e = err(&renamed);
        assert!(e.contains("does not end in \"-00001-of-00003.gguf\""), "{e}");

        let mut w = GgufWriter::new();
        w.add_kv(KEY_SPLIT_COUNT, 3u32);
        let p = dir.path().join("k-00001-of-00003.gguf");
        w.write_to_path(&p).unwrap();
        assert!(err(&p).contains("split.count must be of type u16, found u32"));

        let mut w = GgufWriter::new();
        w.add_kv(KEY_SPLIT_COUNT, 3u16);
        w.write_to_path(&p).unwrap();
        assert!(err(&p).contains("split.count is 3 but split.no is missing"));

        let mut w = GgufWriter::new();
        w.add_kv(KEY_SPLIT_COUNT, 3u16);
        w.add_kv(KEY_SPLIT_NO, 3u16);
        w.write_to_path(&p).unwrap();
        assert!(err(&p).contains("split.no is 3, not below split.count 3"));

        // The first shard without split.tensors.count.
        let p = shard(dir.path(), "n", 0, 2, 1, |w| {
            w.metadata_mut().remove(KEY_SPLIT_TENSORS_COUNT);
        });
        shard(dir.path(), "n", 1, 2, 1, |_| {});
        assert!(err(&p).contains("split.tensors.count is missing from the first shard"));
    }
}
