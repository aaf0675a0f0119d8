//! `gguf split` / `gguf merge` on a small generated model: shard layout and keys, the
//! reader's view of the set, merge = the original plus llama-gguf-split's three keys,
//! re-splitting, and no partial shard set on error.

use std::path::{Path, PathBuf};

use gguf_format::split::{split_path, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
use gguf_format::{GgufFile, GgufWriter, SplitGguf, Value};

use crate::gguf;

/// Seven tensors of three types (f32, f16, q8_0), in a file laid out as llama.cpp does.
fn model(dir: &Path) -> PathBuf {
    use ggml_quants as gq;
    let path = dir.join("model.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama");
    w.add_kv("general.name", "split-test");
    w.add_kv("llama.block_count", 3u32);
    for i in 0..7u32 {
        let x: Vec<f32> = (0..64 * 3).map(|j| ((i * 1000 + j) as f32).sin()).collect();
        let (ty, data) = match i % 3 {
            0 => (0, x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()),
            1 => (8, gq::by_name("q8_0").unwrap().quantize_to_vec(&x, 64, None).unwrap()),
            _ => (1, x.iter().flat_map(|v| gq::util::f32_to_fp16(*v).to_le_bytes()).collect()),
        };
        w.add_tensor_owned(&format!("blk.{i}.w"), &[64, 3], ty, data).unwrap();
    }
    w.write_to_path(&path).unwrap();
    path
}

fn keys(f: &GgufFile) -> Vec<String> {
    f.metadata().iter().map(|(k, _)| k.to_string()).collect()
}

fn no_temporaries(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "temporary left: {name}");
    }
}

#[test]
fn split_then_merge_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let orig_path = model(dir.path());
    let orig = GgufFile::open(&orig_path).unwrap();
    let prefix = dir.path().join("out/m");
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let o = gguf(&["split", "--split-max-tensors", "3", orig_path.to_str().unwrap(), prefix.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("n_split: 3\nsplit 00001: n_tensors = 3, total_size = 0M\n"), "{}", o.stdout);
    no_temporaries(&dir.path().join("out"));

    // Each shard: its tensors, and the three split keys last, in ggml's order.
    let shards: Vec<GgufFile> = (0..3).map(|i| GgufFile::open(split_path(&prefix, i, 3)).unwrap()).collect();
    let counts: Vec<usize> = shards.iter().map(|f| f.tensors().len()).collect();
    assert_eq!(counts, [3, 3, 1]);
    let tail = [KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT, KEY_SPLIT_COUNT];
    let mut first_keys = keys(&orig);
    first_keys.extend(tail.iter().map(|k| k.to_string()));
    assert_eq!(keys(&shards[0]), first_keys);
    for (i, f) in shards.iter().enumerate() {
        if i > 0 {
            assert_eq!(keys(f), tail);
        }
        assert_eq!(f.metadata().get(KEY_SPLIT_NO), Some(&Value::U16(i as u16)));
        assert_eq!(f.metadata().get(KEY_SPLIT_COUNT), Some(&Value::U16(3)));
        assert_eq!(f.metadata().get(KEY_SPLIT_TENSORS_COUNT), Some(&Value::I32(7)));
    }

    // The reader sees the whole model, from any shard, with the original bytes.
    for i in 0..3 {
        let m = SplitGguf::open(split_path(&prefix, i, 3)).unwrap();
        assert_eq!(m.tensors().len(), 7);
        for t in orig.tensors() {
            let u = m.tensor(&t.name).unwrap();
            assert_eq!((&u.dims, u.type_id), (&t.dims, t.type_id));
            assert_eq!(m.tensor_data(u).unwrap(), orig.tensor_data(t).unwrap(), "{}", t.name);
        }
    }

    // Merge: llama-gguf-split keeps the first shard's split keys (split.count set to 0), so
    // the merged file is the original plus those three keys, not the original bytes.
    let merged = dir.path().join("merged.gguf");
    let first = split_path(&prefix, 0, 3);
    let o = gguf(&["merge", first.to_str().unwrap(), merged.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut expected = Vec::new();
    let mut w = GgufWriter::from_file(&orig).unwrap();
    w.add_kv(KEY_SPLIT_NO, 0u16).add_kv(KEY_SPLIT_TENSORS_COUNT, 7i32).add_kv(KEY_SPLIT_COUNT, 0u16);
    w.write_to(&mut expected).unwrap();
    let merged_bytes = std::fs::read(&merged).unwrap();
    assert!(merged_bytes == expected, "merged file differs from the original plus the split keys");
    assert_ne!(merged_bytes, std::fs::read(&orig_path).unwrap());
    // split.count 0: a plain file to the reader.
    assert!(!SplitGguf::open(&merged).unwrap().is_split());

    // The merged file splits back into the same shards.
    let again = dir.path().join("again");
    let o = gguf(&["split", "--split-max-tensors", "3", merged.to_str().unwrap(), again.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for i in 0..3 {
        assert_eq!(std::fs::read(split_path(&again, i, 3)).unwrap(), std::fs::read(split_path(&prefix, i, 3)).unwrap());
    }

    // Merge never overwrites.
    let o = gguf(&["merge", first.to_str().unwrap(), merged.to_str().unwrap()]);
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("already exists"), "{}", o.stderr);

    // `inspect` of a shard shows the whole model.
    let o = gguf(&["inspect", "--json", split_path(&prefix, 1, 3).to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j["tensors"].as_array().unwrap().len(), 7);
    assert_eq!(j["tensors"][6]["shard"], 3);
    assert_eq!(j["split"]["count"], 3);
    assert_eq!(j["split"]["shard"], 2);
    assert_eq!(j["metadata"][1]["value"], "split-test");
    let o = gguf(&["inspect", first.to_str().unwrap()]);
    assert!(o.stdout.contains("split:     shard 1 of 3; showing the whole model: 7 tensors"), "{}", o.stdout);
}

#[test]
fn split_by_size_and_metadata_only_first_shard() {
    let dir = tempfile::tempdir().unwrap();
    let orig_path = model(dir.path());
    let prefix = dir.path().join("s");
    // --split-max-size counts whole M/G units only; everything fits in 1M here.
    let o = gguf(&[
        "split",
        "--split-max-size",
        "1M",
        "--no-tensor-first-split",
        orig_path.to_str().unwrap(),
        prefix.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let first = GgufFile::open(split_path(&prefix, 0, 2)).unwrap();
    assert!(first.tensors().is_empty());
    assert_eq!(first.metadata().get_str("general.name"), Some("split-test"));
    assert_eq!(GgufFile::open(split_path(&prefix, 1, 2)).unwrap().tensors().len(), 7);
    assert_eq!(SplitGguf::open(split_path(&prefix, 0, 2)).unwrap().tensors().len(), 7);

    let dry = dir.path().join("dry");
    let o = gguf(&["split", "--dry-run", orig_path.to_str().unwrap(), dry.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("n_split: 1\n"), "{}", o.stdout);
    assert!(!split_path(&dry, 0, 1).exists());
}

#[test]
fn a_failed_split_leaves_no_shard() {
    let dir = tempfile::tempdir().unwrap();
    let orig_path = model(dir.path());
    let prefix = dir.path().join("f");
    // Shard 2's name is taken by a directory: its rename fails after shard 1's succeeded.
    std::fs::create_dir(split_path(&prefix, 1, 3)).unwrap();
    let o = gguf(&["split", "--split-max-tensors", "3", orig_path.to_str().unwrap(), prefix.to_str().unwrap()]);
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("f-00002-of-00003.gguf"), "{}", o.stderr);
    assert!(!split_path(&prefix, 0, 3).exists(), "shard 1 left behind");
    assert!(!split_path(&prefix, 2, 3).exists(), "shard 3 left behind");
    no_temporaries(dir.path());
}

#[test]
fn merge_names_a_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    let orig_path = model(dir.path());
    let prefix = dir.path().join("x");
    let o = gguf(&["split", "--split-max-tensors", "2", orig_path.to_str().unwrap(), prefix.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    std::fs::remove_file(split_path(&prefix, 2, 4)).unwrap();
    let out = dir.path().join("merged.gguf");
    let o = gguf(&["merge", split_path(&prefix, 0, 4).to_str().unwrap(), out.to_str().unwrap()]);
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("shard 3 of 4") && o.stderr.contains("x-00003-of-00004.gguf"), "{}", o.stderr);
    assert!(!out.exists());
    // A plain file is not a split model.
    let o = gguf(&["merge", orig_path.to_str().unwrap(), out.to_str().unwrap()]);
    assert!(o.stderr.contains("not a split model"), "{}", o.stderr);
}
