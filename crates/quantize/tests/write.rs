//! End to end: what `gguf_quantize::write` puts in the file, and what it refuses.
mod common;

use std::sync::atomic::AtomicBool;

use gguf_format::{GgufFile, GgufWriter, SplitGguf, Value};
use gguf_quantize::{recipe, Error, Imatrix, Params};

fn model() -> (tempfile::TempDir, SplitGguf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.gguf");
    common::write_model(&path, &common::DENSE);
    let f = SplitGguf::open(&path).unwrap();
    (dir, f)
}

fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn tensors_are_the_type_registry_quantizers_output() {
    let (dir, file) = model();
    let out = dir.path().join("out.gguf");
    let p = Params { nthread: 3, ..Params::new(recipe::lookup("Q4_K_M").unwrap()) };
    let plan = gguf_quantize::plan(&file, &p).unwrap();
    gguf_quantize::write(&file, &plan, &p, &out, &AtomicBool::new(false), &|_| {}).unwrap();
    let q = GgufFile::open(&out).unwrap();
    assert_eq!(q.tensors().len(), file.tensors().len());
    for t in q.tensors() {
        let src = file.tensor(&t.name).unwrap();
        let data = file.tensor_data(src).unwrap();
        let f: Vec<f32> = data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        let traits = ggml_quants::by_id(t.type_id).unwrap();
        let want = if t.type_id == 0 {
            data.to_vec()
        } else {
            traits.quantize_to_vec(&f, src.dims[0] as usize, None).unwrap()
        };
        assert_eq!(q.tensor_data(t).unwrap(), &want[..], "{}", t.name);
    }
    assert_eq!(q.metadata().get_u64("general.file_type"), Some(15));
    assert_eq!(q.metadata().get_u64("general.quantization_version"), Some(2));
}

#[test]
fn interrupted_run_leaves_no_file() {
    let (dir, file) = model();
    let out = dir.path().join("out.gguf");
    let p = Params::new(recipe::lookup("Q4_K_M").unwrap());
    let plan = gguf_quantize::plan(&file, &p).unwrap();
    let err = gguf_quantize::write(&file, &plan, &p, &out, &AtomicBool::new(true), &|_| {}).unwrap_err();
    assert!(matches!(err, Error::Interrupted), "{err}");
    assert_eq!(files_in(dir.path()), ["in.gguf"]);
}

#[test]
fn a_non_finite_weight_is_named_with_its_first_element_and_nothing_is_left() {
    let (dir, file) = model();
    let path = dir.path().join("in.gguf");
    let t = file.tensor("blk.3.ffn_down.weight").unwrap().clone();
    let base = file.first().data_offset() + t.offset;
    let at = |i: u64| (base + 4 * i) as usize;
    let mut bytes = std::fs::read(&path).unwrap();
    drop(file);
    bytes[at(70_000)..at(70_000) + 4].copy_from_slice(&f32::INFINITY.to_le_bytes());
    bytes[at(1_000)..at(1_000) + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let file = SplitGguf::open(&path).unwrap();
    let out = dir.path().join("out.gguf");
    for nthread in [1, 4] {
        let p = Params { nthread, ..Params::new(recipe::lookup("Q4_0").unwrap()) };
        let plan = gguf_quantize::plan(&file, &p).unwrap();
        let err =
            gguf_quantize::write(&file, &plan, &p, &out, &AtomicBool::new(false), &|_| {}).unwrap_err().to_string();
        assert!(err.contains("blk.3.ffn_down.weight") && err.contains("NaN at element 1000"), "{err}");
        assert_eq!(files_in(dir.path()), ["in.gguf"]);
    }
}

#[test]
fn requantized_tensors_are_the_quantizers_output_on_the_decoded_input() {
    let (dir, file) = model();
    let q8 = dir.path().join("q8.gguf");
    let p = Params { nthread: 2, ..Params::new(recipe::lookup("Q8_0").unwrap()) };
    gguf_quantize::write(&file, &gguf_quantize::plan(&file, &p).unwrap(), &p, &q8, &AtomicBool::new(false), &|_| {})
        .unwrap();
    let q8 = SplitGguf::open(&q8).unwrap();
    let out = dir.path().join("q4.gguf");
    let p = Params { nthread: 3, allow_requantize: true, ..Params::new(recipe::lookup("Q4_0").unwrap()) };
    gguf_quantize::write(&q8, &gguf_quantize::plan(&q8, &p).unwrap(), &p, &out, &AtomicBool::new(false), &|_| {})
        .unwrap();
    let q4 = GgufFile::open(&out).unwrap();
    let mut requantized = 0;
    for t in q4.tensors() {
        let src = q8.tensor(&t.name).unwrap();
        let data = q8.tensor_data(src).unwrap();
        if src.type_id == t.type_id {
            assert_eq!(q4.tensor_data(t).unwrap(), data, "{}", t.name);
            continue;
        }
        let from = ggml_quants::by_id(src.type_id).unwrap();
        let mut f = vec![0f32; src.n_elements as usize];
        from.dequantize(data, &mut f).unwrap();
        let want = ggml_quants::by_id(t.type_id).unwrap().quantize_to_vec(&f, src.dims[0] as usize, None).unwrap();
        assert_eq!(q4.tensor_data(t).unwrap(), &want[..], "{}", t.name);
        requantized += 1;
    }
    assert!(requantized > 0);
}

#[test]
fn unwritable_output_is_an_error_naming_the_path() {
    let (_dir, file) = model();
    let p = Params::new(recipe::lookup("Q8_0").unwrap());
    let plan = gguf_quantize::plan(&file, &p).unwrap();
    let out = std::path::Path::new("/nonexistent-dir/out.gguf");
    let err = gguf_quantize::write(&file, &plan, &p, out, &AtomicBool::new(false), &|_| {}).unwrap_err();
    assert!(err.to_string().contains("nonexistent-dir"), "{err}");
}

#[test]
fn unknown_recipe_lists_the_known() {
    let err = recipe::lookup("Q4_K_X").unwrap_err().to_string();
    assert!(err.contains("Q4_K_X") && err.contains("Q4_K_M") && err.contains("IQ2_XXS"), "{err}");
}

#[test]
fn requantizing_needs_the_flag() {
    let (dir, file) = model();
    let q8 = dir.path().join("q8.gguf");
    let p = Params::new(recipe::lookup("Q8_0").unwrap());
    gguf_quantize::write(&file, &gguf_quantize::plan(&file, &p).unwrap(), &p, &q8, &AtomicBool::new(false), &|_| {})
        .unwrap();
    let q8 = SplitGguf::open(&q8).unwrap();
    let p = Params::new(recipe::lookup("Q4_K_M").unwrap());
    let err = gguf_quantize::plan(&q8, &p).unwrap_err();
    assert!(matches!(err, Error::Requantize { .. }), "{err}");
    let p = Params { allow_requantize: true, ..p };
    assert!(gguf_quantize::plan(&q8, &p).is_ok());
}

#[test]
fn low_bit_recipes_require_an_imatrix() {
    let (_dir, file) = model();
    let err = gguf_quantize::plan(&file, &Params::new(recipe::lookup("IQ2_XXS").unwrap())).unwrap_err();
    assert!(matches!(err, Error::ImatrixRequired { .. }), "{err}");
    let dry = Params { dry_run: true, ..Params::new(recipe::lookup("IQ2_XXS").unwrap()) };
    assert!(gguf_quantize::plan(&file, &dry).unwrap().needs_imatrix);
}

fn imatrix_file(dir: &std::path::Path, entries: &[(&str, usize)]) -> std::path::PathBuf {
    let mut w = GgufWriter::new();
    w.add_kv("general.type", "imatrix");
    w.add_kv("imatrix.datasets", Value::Array(gguf_format::Array::String(vec![b"test.txt".to_vec()].into())));
    w.add_kv("imatrix.chunk_count", Value::U32(3));
    w.add_kv("imatrix.chunk_size", Value::U32(512));
    for (name, n) in entries {
        let sums: Vec<u8> = (0..*n).flat_map(|i| (2.0 * (i + 1) as f32).to_le_bytes()).collect();
        w.add_tensor_owned(&format!("{name}.in_sum2"), &[*n as u64, 1], 0, sums).unwrap();
        w.add_tensor_owned(&format!("{name}.counts"), &[1, 1], 0, 2f32.to_le_bytes().to_vec()).unwrap();
    }
    let p = dir.join("imatrix.gguf");
    w.write_to_path(&p).unwrap();
    p
}

#[test]
fn imatrix_is_normalized_filtered_and_checked_against_shapes() {
    let (dir, file) = model();
    let p = imatrix_file(dir.path(), &[("blk.0.attn_q.weight", 256), ("blk.0.ffn_down.weight", 512)]);
    let mut im = Imatrix::load(&p).unwrap();
    assert_eq!(im.entries["blk.0.attn_q.weight"][..3], [1.0, 2.0, 3.0]);
    assert_eq!(im.chunk_count, 3);
    assert_eq!(im.datasets, ["test.txt"]);
    let mut params = Params::new(recipe::lookup("IQ4_XS").unwrap());
    params.imatrix = Some(im.clone());
    let plan = gguf_quantize::plan(&file, &params).unwrap();
    assert_eq!(plan.metadata.get_u64("quantize.imatrix.entries_count"), Some(2));
    assert_eq!(plan.metadata.get_u64("quantize.imatrix.chunks_count"), Some(3));
    assert_eq!(plan.metadata.get_str("quantize.imatrix.dataset"), Some("test.txt"));
    im.filter(&["ffn".into()], &[]);
    assert_eq!(im.entries.keys().collect::<Vec<_>>(), ["blk.0.ffn_down.weight"]);

    // An imatrix from another model: the row length does not match.
    let bad = imatrix_file(dir.path(), &[("blk.0.attn_q.weight", 128)]);
    params.imatrix = Some(Imatrix::load(&bad).unwrap());
    let err = gguf_quantize::plan(&file, &params).unwrap_err();
    assert!(matches!(err, Error::ImatrixSize { expected: 256, found: 128, .. }), "{err}");
}

#[test]
fn legacy_imatrix_is_divided_by_ncall() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Vec::new();
    b.extend_from_slice(&1i32.to_le_bytes());
    let name = b"blk.0.attn_q.weight";
    b.extend_from_slice(&(name.len() as i32).to_le_bytes());
    b.extend_from_slice(name);
    b.extend_from_slice(&4i32.to_le_bytes()); // ncall
    b.extend_from_slice(&2i32.to_le_bytes()); // nval
    b.extend_from_slice(&8f32.to_le_bytes());
    b.extend_from_slice(&2f32.to_le_bytes());
    b.extend_from_slice(&10i32.to_le_bytes()); // chunks
    b.extend_from_slice(&4i32.to_le_bytes());
    b.extend_from_slice(b"wiki");
    let p = dir.path().join("old.dat");
    std::fs::write(&p, &b).unwrap();
    let im = Imatrix::load(&p).unwrap();
    assert!(im.legacy);
    assert_eq!(im.entries["blk.0.attn_q.weight"], [2.0, 0.5]);
    assert_eq!((im.chunk_count, im.datasets.as_slice()), (10, &["wiki".to_string()][..]));
    // Truncated: a clear error, not a panic.
    std::fs::write(&p, &b[..20]).unwrap();
    assert!(Imatrix::load(&p).unwrap_err().to_string().contains("old.dat"));
}

#[test]
fn kv_overrides_parse_like_llama_cpp() {
    use gguf_quantize::KvOverride as K;
    assert_eq!(K::parse("a.b=int:-7").unwrap(), K::Int("a.b".into(), -7));
    assert_eq!(K::parse("a=str:x=y").unwrap(), K::Str("a".into(), "x=y".into()));
    assert_eq!(K::parse("a=bool:true").unwrap(), K::Bool("a".into(), true));
    assert!(K::parse("a=bool:yes").is_err());
    assert!(K::parse("a=num:1").is_err());
    assert!(K::parse("noequals").is_err());
}
