//! Split models (`llama-gguf-split` shard sets) load as one model: the same logits, bit
//! for bit, as the unsplit file, from any shard; a missing shard is named.

use std::path::{Path, PathBuf};

use gguf_format::split::{split_path, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
use gguf_format::{GgufFile, GgufWriter};
use gguf_models::synthetic::{write, Tiny};
use gguf_models::{Logits, StateOptions};

/// Writes `src` as shards of `per_shard` tensors each (`PREFIX-0000i-of-0000N.gguf`), laid
/// out as llama-gguf-split does: all metadata in the first, the three split keys in each.
fn split_into(src: &Path, prefix: &Path, per_shard: usize) -> Vec<PathBuf> {
    let f = GgufFile::open(src).unwrap();
    let chunks: Vec<_> = f.tensors().chunks(per_shard).collect();
    let n = chunks.len() as u16;
    assert!(n > 1, "the model must need more than one shard");
    let mut paths = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut w = GgufWriter::new();
        if i == 0 {
            *w.metadata_mut() = f.metadata().clone();
        }
        w.add_kv(KEY_SPLIT_NO, i as u16);
        w.add_kv(KEY_SPLIT_COUNT, n);
        w.add_kv(KEY_SPLIT_TENSORS_COUNT, f.tensors().len() as i32);
        for t in *chunk {
            w.add_tensor(&t.name, &t.dims, t.type_id, f.tensor_data(t).unwrap()).unwrap();
        }
        let p = split_path(prefix, i as u32, n as u32);
        w.write_to_path(&p).unwrap();
        paths.push(p);
    }
    paths
}

/// A copy of `src` with every F32 matrix whose rows are whole q4_0 blocks stored as q4_0
/// (the type the engine repacks at load where the CPU has the kernel, reading it with
/// `pread` from the shard file rather than through the map).
fn to_q4_0(src: &Path, dst: &Path) {
    let q4 = ggml_quants::lookup_name("q4_0").unwrap();
    let f = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    *w.metadata_mut() = f.metadata().clone();
    for t in f.tensors() {
        let data = f.tensor_data(t).unwrap();
        if t.type_id == 0 && t.dims.len() >= 2 && t.dims[0] % 32 == 0 {
            let x: Vec<f32> = data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
            let q = q4.quantize_to_vec(&x, t.dims[0] as usize, None).unwrap();
            w.add_tensor_owned(&t.name, &t.dims, q4.id, q).unwrap();
        } else {
            w.add_tensor(&t.name, &t.dims, t.type_id, data).unwrap();
        }
    }
    w.write_to_path(dst).unwrap();
}

fn logits(path: &Path, tokens: &[u32]) -> Vec<u32> {
    let (_f, m) = gguf_models::load(path).unwrap();
    let mut st = m.new_state(&StateOptions { n_ctx: 64, n_threads: 2, ..Default::default() }).unwrap();
    m.forward(st.as_mut(), tokens, Logits::All).unwrap().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn a_split_model_gives_the_unsplit_logits_bit_for_bit() {
    let tokens: Vec<u32> = (0..10u32).map(|i| (i * 7 + 3) % 50).collect();
    for arch in ["llama", "qwen2", "qwen3", "gemma3", "qwen3moe"] {
        for ty in ["f32", "q8_0", "q4_0"] {
            let d = tempfile::tempdir().unwrap();
            let mut t = Tiny::new(arch);
            t.q8 = ty == "q8_0";
            let whole = d.path().join("whole.gguf");
            if ty == "q4_0" {
                let f = d.path().join("f32.gguf");
                write(&t, &f, None, &[]).unwrap();
                to_q4_0(&f, &whole);
            } else {
                write(&t, &whole, None, &[]).unwrap();
            }
            let shards = split_into(&whole, &d.path().join("m"), 4);
            let (f, _) = gguf_models::load(&shards[0]).unwrap();
            assert_eq!(f.shards().len(), shards.len());
            let want = logits(&whole, &tokens);
            for p in [&shards[0], shards.last().unwrap()] {
                assert!(want == logits(p, &tokens), "{arch} {ty}: logits through {} differ", p.display());
            }
        }
    }
}

#[test]
fn a_missing_shard_is_named() {
    let d = tempfile::tempdir().unwrap();
    let whole = d.path().join("whole.gguf");
    write(&Tiny::new("llama"), &whole, None, &[]).unwrap();
    let shards = split_into(&whole, &d.path().join("m"), 4);
    std::fs::remove_file(&shards[2]).unwrap();
    let err = gguf_models::load(&shards[0]).err().unwrap().to_string();
    let n = shards.len();
    assert!(err.contains(&format!("shard 3 of {n}")) && err.contains(&format!("m-00003-of-0000{n}.gguf")), "{err}");
}
