//! Compares this crate with ggml-cpu on data written by a libggml-cpu driver (one
//! directory per type: `meta` = "type rows cols vec_dot_type", `w.bin` quantized rows,
//! `x.bin` f32 activations, `xq.bin` ggml's `from_float(x)`, `dots.bin` ggml's
//! `vec_dot` per row; optionally `xt.bin` all tokens' f32 activations and `mm.bin`
//! ggml's `mul_mat` of them, tokens × rows, with the token count as a fifth `meta` field —
//! `scripts/ggml_dots.c` writes all of it). Usage: `cargo run --release -p quant-kernels --example
//! ggml_compare -- DIR`. Not a `cargo test`: it needs llama.cpp's libraries to make DIR.

fn main() {
    let dir = std::env::args().nth(1).expect("usage: ggml_compare DIR");
    let mut entries: Vec<_> = std::fs::read_dir(&dir).expect("read dir").flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let meta = std::fs::read_to_string(p.join("meta")).unwrap();
        let v: Vec<usize> = meta.split_whitespace().map(|s| s.parse().unwrap()).collect();
        let (tid, rows, cols, vdt) = (v[0] as u32, v[1], v[2], v[3] as u32);
        let w = std::fs::read(p.join("w.bin")).unwrap();
        let x: Vec<f32> = std::fs::read(p.join("x.bin"))
            .unwrap()
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let xq_ggml = std::fs::read(p.join("xq.bin")).unwrap();
        let dots: Vec<f32> = std::fs::read(p.join("dots.bin"))
            .unwrap()
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let mut xq = vec![0u8; xq_ggml.len()];
        quant_kernels::quantize_row(vdt, &x, &mut xq).unwrap();
        let act_diff = xq.iter().zip(&xq_ggml).filter(|(a, b)| a != b).count();
        let k = quant_kernels::registry::kernel_for(tid).unwrap();
        assert_eq!(k.vec_dot_type, vdt, "vec_dot_type differs from ggml's");
        let m = quant_kernels::Matrix::new(tid, &w, rows, cols).unwrap();
        let mut y = vec![0f32; rows];
        quant_kernels::matmul(&quant_kernels::Pool::new(1), &m, &x, 1, &mut y).unwrap();
        let (mut max_rel, mut exact) = (0f64, 0);
        for (a, b) in y.iter().zip(&dots) {
            if a == b {
                exact += 1;
            }
            let rel = ((a - b).abs() / b.abs().max(1e-6)) as f64;
            max_rel = max_rel.max(rel);
        }
        // The multi-token tiles (T = 2..4 plus a remainder, and the token-block split):
        // the same activation row repeated must give ggml's result in every column.
        let mut tile_exact = 0;
        for n_tokens in [5usize, 19] {
            let xs: Vec<f32> = (0..n_tokens).flat_map(|_| x.iter().copied()).collect();
            let mut ys = vec![0f32; rows * n_tokens];
            quant_kernels::matmul(&quant_kernels::Pool::new(2), &m, &xs, n_tokens, &mut ys).unwrap();
            tile_exact += ys.chunks(rows).filter(|yt| yt.iter().zip(&dots).all(|(a, b)| a == b)).count();
        }
        // The scalar twin on ggml's own activations too.
        let sc = quant_kernels::registry::kernels_of(tid).iter().find(|k| k.backend == "scalar").unwrap();
        let rb = m.row_bytes();
        let mut max_rel_sc = 0f64;
        for (r, b) in dots.iter().enumerate() {
            let s = (sc.vec_dot)(cols, &w[r * rb..(r + 1) * rb], &xq_ggml);
            max_rel_sc = max_rel_sc.max(((s - b).abs() / b.abs().max(1e-6)) as f64);
        }
        // ggml's own `mul_mat` over all tokens (its batched paths), when the driver wrote it.
        let mut mm = String::new();
        if let (Some(&nt), Ok(xt), Ok(want)) =
            (v.get(4), std::fs::read(p.join("xt.bin")), std::fs::read(p.join("mm.bin")))
        {
            let f32s =
                |b: Vec<u8>| -> Vec<f32> { b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect() };
            let (xt, want) = (f32s(xt), f32s(want));
            let mut got = vec![0f32; rows * nt];
            quant_kernels::matmul(&quant_kernels::Pool::new(2), &m, &xt, nt, &mut got).unwrap();
            let same = got.iter().zip(&want).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
            let rel =
                got.iter().zip(&want).map(|(a, b)| ((a - b).abs() / b.abs().max(1e-6)) as f64).fold(0f64, f64::max);
            mm = format!("; mul_mat {nt} tokens: {same}/{} bit-identical, max rel {rel:.2e}", rows * nt);
        }
        println!(
            "{:>5} ({}): activation bytes differing {act_diff}/{}, matmul vs ggml vec_dot: {exact}/{rows} exact, max rel {max_rel:.2e}; batched tokens bit-identical {tile_exact}/24; scalar twin max rel {max_rel_sc:.2e}{mm}",
            ggml_quants::lookup_id(tid).unwrap().name,
            quant_kernels::kernel_info(tid),
            xq.len()
        );
    }
}
