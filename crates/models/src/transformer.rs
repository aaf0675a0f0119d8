//! The decoder-only transformer that llama, qwen2, qwen3, qwen3moe and gemma3 share:
//! RMSNorm, GQA attention with RoPE over a KV cache, SwiGLU/GeGLU or top-k MoE FFN.
//! Architectures differ only in the [`Spec`] they build from their metadata.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gguf_format::SplitGguf;
use half::f16;
use half::slice::HalfFloatSliceExt;
use quant_kernels::{matmul, matmul_expert, matmul_rowwise, ops, Matrix, Pool, Repacked};

use crate::hparams::Hparams;
use crate::kv_cache::{CacheMatrix, CacheType, KvCache};
use crate::loader::{Loader, TensorRef};
use crate::model::{Logits, Model, Segment, State, StateOptions};
use crate::rope::{Rope, RopeMode};
use crate::{Error, Result};

/// FFN activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) * up`.
    Silu,
    /// `gelu(gate) * up` (tanh approximation, as ggml).
    Gelu,
}

/// Sliding-window attention settings.
#[derive(Debug, Clone)]
pub struct Swa {
    /// Window in tokens: position `p1` sees `p0` when `p1 - p0 < window`.
    pub window: usize,
    /// Which layers use the window.
    pub layers: Vec<bool>,
    /// Rope base of windowed layers.
    pub rope_base: f32,
    /// Rope scale of windowed layers.
    pub rope_freq_scale: f32,
}

/// What distinguishes one architecture of the family from another.
///
/// Start from [`Spec::llama`] and change the fields that differ (the struct is
/// `#[non_exhaustive]`: new fields come with a llama default, so plug-in architectures
/// keep compiling).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Spec {
    /// Rope pairing.
    pub rope_mode: RopeMode,
    /// Per-head RMSNorm of Q and K (`attn_q_norm`, `attn_k_norm`) before rope.
    pub qk_norm: bool,
    /// RMSNorm after attention and after the FFN (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// FFN activation.
    pub activation: Activation,
    /// Scale of the token embeddings (gemma: √n_embd).
    pub embed_scale: Option<f32>,
    /// Attention scale; default `1/√head_k`.
    pub attn_scale: Option<f32>,
    /// Apply the attention scale to q after rope (gemma's `ggml_scale(Qcur)`) rather than
    /// inside attention; the rounding differs, so this follows the reference graph.
    pub scale_q: bool,
    /// Sliding-window layers.
    pub swa: Option<Swa>,
    /// Final logit soft-capping.
    pub final_softcap: Option<f32>,
    /// Normalize the top-k expert weights to sum to one.
    pub moe_norm_weights: bool,
}

impl Spec {
    /// The plain llama-style block with `rope_mode`: SwiGLU, no QK-norm, no post-norms,
    /// no embedding scale or soft-capping, attention scale `1/√head_k`, top-k expert
    /// weights normalized.
    pub const fn llama(rope_mode: RopeMode) -> Spec {
        Spec {
            rope_mode,
            qk_norm: false,
            post_norms: false,
            activation: Activation::Silu,
            embed_scale: None,
            attn_scale: None,
            scale_q: false,
            swa: None,
            final_softcap: None,
            moe_norm_weights: true,
        }
    }
}

enum Ffn {
    Dense {
        gate: TensorRef,
        up: TensorRef,
        down: TensorRef,
        b_gate: Option<Vec<f32>>,
        b_up: Option<Vec<f32>>,
        b_down: Option<Vec<f32>>,
    },
    Moe {
        router: TensorRef,
        gate: TensorRef,
        up: TensorRef,
        down: TensorRef,
    },
}

struct Layer {
    attn_norm: Vec<f32>,
    wq: TensorRef,
    wk: TensorRef,
    wv: TensorRef,
    bq: Option<Vec<f32>>,
    bk: Option<Vec<f32>>,
    bv: Option<Vec<f32>>,
    wo: TensorRef,
    bo: Option<Vec<f32>>,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    ffn: Ffn,
    post_ffn_norm: Option<Vec<f32>>,
    swa: bool,
    rope: Rope,
}

/// A loaded decoder-only transformer; weights stay in the model's mmaps (one per shard of
/// a split model), except the matrices a kernel repacks at load (as llama.cpp does for the
/// same types and shapes), which are read from the file straight into their new layout.
pub struct Transformer {
    arch: String,
    file: Arc<SplitGguf>,
    hp: Hparams,
    spec: Spec,
    n_vocab: usize,
    tok_embd: TensorRef,
    output: TensorRef,
    output_norm: Vec<f32>,
    layers: Vec<Layer>,
    /// Repacked matrices by the (shard, file offset) of their data.
    repacked: HashMap<(usize, usize), Repacked>,
}

fn mat<'a>(file: &'a SplitGguf, t: &TensorRef) -> Result<Matrix<'a>> {
    Ok(Matrix::new(t.type_id, t.data(file), t.rows(), t.cols())?)
}

fn expert_mat<'a>(file: &'a SplitGguf, t: &TensorRef, e: usize, n_expert: usize) -> Result<Matrix<'a>> {
    let per = t.len / n_expert;
    let rows = t.dims[1] as usize;
    let data = &t.data(file)[e * per..(e + 1) * per];
    Ok(Matrix::new(t.type_id, data, rows, t.cols())?)
}

impl Transformer {
    /// Loads the weights described by `hp` and `spec` (tensor names as llama.cpp's
    /// `LLM_TENSOR_NAMES`).
    /// `file` is a plain GGUF file or a shard set ([`SplitGguf::open`] opens either).
    pub fn load(file: Arc<SplitGguf>, arch: &str, hp: Hparams, spec: Spec) -> Result<Transformer> {
        let ld = Loader::new(&file, arch);
        let e = hp.n_embd as u64;
        let tok =
            ld.file().tensor("token_embd.weight").ok_or_else(|| Error::MissingTensor("token_embd.weight".into()))?;
        let n_vocab = tok.dims.get(1).copied().unwrap_or(0);
        if n_vocab == 0 {
            return Err(Error::Shape { name: "token_embd.weight".into(), got: tok.dims.clone(), want: vec![e, 0] });
        }
        let tok_embd = ld.tensor("token_embd.weight", &[e, n_vocab])?;
        let output = match ld.opt_tensor("output.weight", &[e, n_vocab])? {
            Some(t) => t,
            None => tok_embd.clone(),
        };
        let output_norm = ld.vector("output_norm.weight", e)?;
        let qw = (hp.head_k * hp.n_head) as u64;
        let kw = (hp.head_k * hp.n_head_kv) as u64;
        let vw = (hp.head_v * hp.n_head_kv) as u64;
        let ow = (hp.head_v * hp.n_head) as u64;
        let rope_freqs = ld.opt_vector("rope_freqs.weight", (hp.n_rot / 2) as u64)?;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            if ld.has(&n("attn_qkv.weight")) {
                return Err(Error::Unsupported(format!("fused `{}` is not supported yet", n("attn_qkv.weight"))));
            }
            let ffn = if hp.n_expert > 0 {
                let ff = if hp.n_ff_exp > 0 { hp.n_ff_exp } else { hp.n_ff[il] / hp.n_expert_used };
                let (ff, ne) = (ff as u64, hp.n_expert as u64);
                Ffn::Moe {
                    router: ld.tensor(&n("ffn_gate_inp.weight"), &[e, ne])?,
                    gate: ld.tensor(&n("ffn_gate_exps.weight"), &[e, ff, ne])?,
                    up: ld.tensor(&n("ffn_up_exps.weight"), &[e, ff, ne])?,
                    down: ld.tensor(&n("ffn_down_exps.weight"), &[ff, e, ne])?,
                }
            } else {
                let ff = hp.n_ff[il] as u64;
                if ff == 0 {
                    return Err(Error::MissingKey(ld.key("feed_forward_length")));
                }
                Ffn::Dense {
                    gate: ld.tensor(&n("ffn_gate.weight"), &[e, ff])?,
                    up: ld.tensor(&n("ffn_up.weight"), &[e, ff])?,
                    down: ld.tensor(&n("ffn_down.weight"), &[ff, e])?,
                    b_gate: ld.opt_vector(&n("ffn_gate.bias"), ff)?,
                    b_up: ld.opt_vector(&n("ffn_up.bias"), ff)?,
                    b_down: ld.opt_vector(&n("ffn_down.bias"), e)?,
                }
            };
            let swa = spec.swa.as_ref().is_some_and(|s| s.layers[il]);
            let (base, scale) = match (&spec.swa, swa) {
                (Some(s), true) => (s.rope_base, s.rope_freq_scale),
                _ => (hp.rope_base, hp.rope_freq_scale),
            };
            let hk = hp.head_k as u64;
            layers.push(Layer {
                attn_norm: ld.vector(&n("attn_norm.weight"), e)?,
                wq: ld.tensor(&n("attn_q.weight"), &[e, qw])?,
                wk: ld.tensor(&n("attn_k.weight"), &[e, kw])?,
                wv: ld.tensor(&n("attn_v.weight"), &[e, vw])?,
                bq: ld.opt_vector(&n("attn_q.bias"), qw)?,
                bk: ld.opt_vector(&n("attn_k.bias"), kw)?,
                bv: ld.opt_vector(&n("attn_v.bias"), vw)?,
                wo: ld.tensor(&n("attn_output.weight"), &[ow, e])?,
                bo: ld.opt_vector(&n("attn_output.bias"), e)?,
                q_norm: if spec.qk_norm { Some(ld.vector(&n("attn_q_norm.weight"), hk)?) } else { None },
                k_norm: if spec.qk_norm { Some(ld.vector(&n("attn_k_norm.weight"), hk)?) } else { None },
                post_attn_norm: if spec.post_norms {
                    Some(ld.vector(&n("post_attention_norm.weight"), e)?)
                } else {
                    None
                },
                ffn_norm: ld.vector(&n("ffn_norm.weight"), e)?,
                ffn,
                post_ffn_norm: if spec.post_norms { Some(ld.vector(&n("post_ffw_norm.weight"), e)?) } else { None },
                swa,
                rope: hp.rope(spec.rope_mode, base, scale, rope_freqs.clone()),
            });
        }
        // Check every weight's type has a decoder now, not at the first token.
        for t in std::iter::once(&tok_embd).chain(std::iter::once(&output)) {
            mat(&file, t).map_err(|e| type_error(t, e))?;
        }
        for l in &layers {
            for t in [&l.wq, &l.wk, &l.wv, &l.wo] {
                mat(&file, t).map_err(|e| type_error(t, e))?;
            }
        }
        let repacked = repack_weights(&file, &tok_embd, &output, &layers)?;
        Ok(Transformer {
            arch: arch.to_string(),
            file,
            hp,
            spec,
            n_vocab: n_vocab as usize,
            tok_embd,
            output,
            output_norm,
            layers,
            repacked,
        })
    }

    /// The hyperparameters.
    pub fn hparams(&self) -> &Hparams {
        &self.hp
    }
}

/// Repacks the dense weight matrices whose type and shape have a repacker on this CPU
/// (llama.cpp: the weights of `MUL_MAT`, not `token_embd`, which its `GET_ROWS` reads —
/// so a tied output stays as stored too). Their bytes are read from the (shard) file rather
/// than through the mmap, so the original pages are never made resident.
fn repack_weights(
    file: &SplitGguf,
    tok_embd: &TensorRef,
    output: &TensorRef,
    layers: &[Layer],
) -> Result<HashMap<(usize, usize), Repacked>> {
    let mut ts: Vec<&TensorRef> = Vec::new();
    if (output.shard, output.start) != (tok_embd.shard, tok_embd.start) {
        ts.push(output);
    }
    for l in layers {
        ts.extend([&l.wq, &l.wk, &l.wv, &l.wo]);
        if let Ffn::Dense { gate, up, down, .. } = &l.ffn {
            ts.extend([gate, up, down]);
        }
    }
    let mut out = HashMap::new();
    let mut buf = Vec::new();
    for t in ts {
        if out.contains_key(&(t.shard, t.start))
            || quant_kernels::registry::repack_for(t.type_id, t.rows(), t.cols()).is_none()
        {
            continue;
        }
        read_tensor(file, t, &mut buf)?;
        let m = Matrix::new(t.type_id, &buf, t.rows(), t.cols()).map_err(|e| type_error(t, e.into()))?;
        if let Some(r) = Repacked::new(&m) {
            out.insert((t.shard, t.start), r);
        }
    }
    Ok(out)
}

/// The data bytes of `t`, read from the shard file holding it (not through the mmap).
fn read_tensor(file: &SplitGguf, t: &TensorRef, buf: &mut Vec<u8>) -> Result<()> {
    buf.clear();
    buf.resize(t.len, 0);
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        let path = t.shard_file(file).path();
        let read = std::fs::File::open(path).and_then(|f| f.read_exact_at(buf, t.start as u64));
        if let Err(source) = read {
            return Err(Error::Read { name: t.name.clone(), source });
        }
    }
    #[cfg(not(unix))]
    buf.copy_from_slice(t.data(file));
    Ok(())
}

fn type_error(t: &TensorRef, e: Error) -> Error {
    Error::TensorType { name: t.name.clone(), type_name: t.type_name(), why: e.to_string() }
}

/// `GGUF_DUMP_DIR=DIR`: write intermediate tensors as raw f32 under llama.cpp's `cb_eval`
/// names (`attn_norm-0`, `kqv_out-0`, `l_out-0`, `result_output`, ...), to compare a forward
/// pass with `cargo xtask llama-dump` node by node. A debugging aid; off by default.
fn dump(name: &str, data: &[f32]) {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    if let Some(dir) = DIR.get_or_init(|| std::env::var_os("GGUF_DUMP_DIR").map(Into::into)) {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let _ = std::fs::create_dir_all(dir);
        let _ = std::fs::write(dir.join(format!("{name}.f32")), bytes);
    }
}

/// Per-thread attention scratch.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    tmp: Vec<f32>,
    qh: Vec<f32>,
    q16: Vec<f16>,
    acc16: Vec<f16>,
    acc: Vec<f32>,
}

/// One query head's view of a layer's cache: which KV head, widths, the score scale, and
/// the positions `lo..=pos` it attends to.
struct HeadView<'a> {
    kc: &'a CacheMatrix,
    vc: &'a CacheMatrix,
    kvh: usize,
    hk: usize,
    hv: usize,
    scale: f32,
    lo: usize,
    pos: usize,
}

/// Softmax attention of one query head in f32 (two passes: exact max, then weights).
fn attend_f32(h: &HeadView<'_>, q: &[f32], sc: &mut Scratch, out: &mut [f32]) {
    let HeadView { kc, vc, kvh, hk, hv, scale, lo, pos } = *h;
    sc.tmp.resize(hk.max(hv), 0.0);
    sc.qh.clear();
    sc.qh.extend_from_slice(q);
    if kc.cache_type() == CacheType::Q8_0 {
        // ggml quantizes q to the K cache's dot type
        let q8 = ggml_quants::by_name("q8_0").expect("q8_0 is built in");
        let mut b = vec![0u8; hk / 32 * 34];
        if q8.quantize_ref(q, &mut b).is_ok() {
            let _ = q8.dequantize(&b, &mut sc.qh);
        }
    }
    sc.scores.clear();
    let mut max = f32::NEG_INFINITY;
    for j in lo..=pos {
        let s = kc.dot(j, kvh * hk, &sc.qh, &mut sc.tmp) * scale;
        max = max.max(s);
        sc.scores.push(s);
    }
    let mut sum = 0.0f32;
    for s in sc.scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    out.fill(0.0);
    let inv = 1.0 / sum;
    for (j, s) in (lo..=pos).zip(sc.scores.iter()) {
        vc.axpy(j, kvh * hv, s * inv, out, &mut sc.tmp);
    }
}

/// `_mm512_reduce_add_ps` / the AVX2 `hadd` sequence of ggml's `ggml_vec_soft_max_f32`
/// over one chunk of 16 (or 8) lanes.
fn reduce_chunk(v: &[f32], layout: ops::DotLayout) -> f32 {
    match layout {
        ops::DotLayout::Avx512 => {
            let t3: Vec<f32> = (0..8).map(|i| v[8 + i] + v[i]).collect();
            let t6 = [t3[4] + t3[0], t3[5] + t3[1], t3[6] + t3[2], t3[7] + t3[3]];
            (t6[0] + t6[2]) + (t6[1] + t6[3])
        }
        ops::DotLayout::Avx2 => {
            let t = [v[4] + v[0], v[5] + v[1], v[6] + v[2], v[7] + v[3]];
            (t[0] + t[2]) + (t[1] + t[3])
        }
    }
}

/// Rows and columns of one tiled-attention task.
struct TileGeometry {
    head: usize,
    nh: usize,
    kvh: usize,
    hk: usize,
    hv: usize,
    scale: f32,
    window: Option<usize>,
    p0: usize,
}

/// ggml's flash-attention tile size (`GGML_FA_TILE_Q` = `GGML_FA_TILE_KV` = 64).
const TILE: usize = 64;

/// Query rows `rows` of one head as ggml's tiled flash attention (`flash_attn_ext_tiled`,
/// batches of 64+ rows) computes them: KV tiles of 64 converted to f32 once, K·q and P·V as
/// FMA chains (`simd_gemm`), per-row online softmax per tile with ggml's polynomial exp,
/// sums in f64 per 16-lane (or 8-lane) chunk.
fn attend_tiled(
    kc: &CacheMatrix,
    vc: &CacheMatrix,
    g: &TileGeometry,
    rows: std::ops::Range<usize>,
    q: &[f32],
    outs: &[Mutex<&mut [f32]>],
) {
    let TileGeometry { head, nh, kvh, hk, hv, scale, window, p0 } = *g;
    let r = rows.len();
    let layout = ops::native_dot_layout();
    let lanes = if layout == ops::DotLayout::Avx512 { 16 } else { 8 };
    let pos_of = |i: usize| p0 + rows.start + i;
    let lo_of = |i: usize| window.map_or(0, |w| (pos_of(i) + 1).saturating_sub(w));
    let mut qt = vec![0f32; r * hk];
    for i in 0..r {
        let t = rows.start + i;
        qt[i * hk..(i + 1) * hk].copy_from_slice(&q[(t * nh + head) * hk..(t * nh + head + 1) * hk]);
    }
    let (mut kt, mut vt, mut kq) = (vec![0f32; hk * TILE], vec![0f32; TILE * hv], vec![0f32; r * TILE]);
    let mut krow = vec![0f32; hk];
    let mut acc = vec![0f32; r * hv];
    let (mut m, mut s) = (vec![f32::NEG_INFINITY; r], vec![0f32; r]);
    let max_pos = pos_of(r - 1);
    let min_lo = (0..r).map(lo_of).min().unwrap_or(0);
    let mut ic = 0;
    while ic <= max_pos {
        let first = ic;
        ic += TILE;
        if first + TILE <= min_lo {
            continue; // every cell of the tile is masked for every row
        }
        for tk in 0..TILE {
            let j = first + tk;
            let kr = if j < kc.n_rows() { kc.f16_slice(j, kvh * hk, hk) } else { None };
            let vr = if j < vc.n_rows() { vc.f16_slice(j, kvh * hv, hv) } else { None };
            match kr {
                Some(k) => k.convert_to_f32_slice(&mut krow),
                None => krow.fill(0.0),
            }
            for (dk, x) in krow.iter().enumerate() {
                kt[dk * TILE + tk] = *x;
            }
            let vdst = &mut vt[tk * hv..(tk + 1) * hv];
            match vr {
                Some(v) => v.convert_to_f32_slice(vdst),
                None => vdst.fill(0.0),
            }
        }
        kq.fill(0.0);
        ops::gemm_fma(&mut kq, &qt, &kt, r, hk, TILE);
        ops::scale_inplace(&mut kq, scale);
        for i in 0..r {
            let (lo, pos) = (lo_of(i), pos_of(i));
            let row = &mut kq[i * TILE..(i + 1) * TILE];
            for (tk, x) in row.iter_mut().enumerate() {
                let j = first + tk;
                *x += if j >= lo && j <= pos { 0.0 } else { f32::NEG_INFINITY };
            }
            let tile_max = row.iter().fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
            if tile_max == f32::NEG_INFINITY {
                row.fill(0.0);
                continue;
            }
            let m_new = m[i].max(tile_max);
            if m_new > m[i] {
                let ms = (m[i] - m_new).exp();
                ops::scale_inplace(&mut acc[i * hv..(i + 1) * hv], ms);
                s[i] *= ms;
            }
            m[i] = m_new;
            for x in row.iter_mut() {
                *x -= m_new;
            }
            ops::expf_ggml_inplace(row);
            let mut sum = 0.0f64;
            for c in row.chunks_exact(lanes) {
                sum += reduce_chunk(c, layout) as f64;
            }
            s[i] = ((s[i] as f64) + sum) as f32;
        }
        ops::gemm_fma(&mut acc, &kq, &vt, r, TILE, hv);
    }
    for i in 0..r {
        let inv = if s[i] == 0.0 { 0.0 } else { 1.0 / s[i] };
        let t = rows.start + i;
        let mut out = outs[t * nh + head].lock().unwrap_or_else(|e| e.into_inner());
        for (o, v) in out.iter_mut().zip(&acc[i * hv..(i + 1) * hv]) {
            *o = v * inv;
        }
    }
}

/// One query head as ggml's `flash_attn_ext_f16_one_chunk` computes it over each chunk of
/// `chunk` KV cells (q rounded to f16, online softmax, V accumulated in f16), chunks merged
/// as `ggml_flash_attn_ext_reduce_partials`.
fn attend_f16(h: &HeadView<'_>, q: &[f32], chunk: usize, sc: &mut Scratch, out: &mut [f32]) {
    let HeadView { kc, vc, kvh, hk, hv, scale, lo, pos } = *h;
    let layout = ops::native_dot_layout();
    sc.q16.clear();
    sc.q16.extend(q.iter().map(|&x| f16::from_f32(x)));
    sc.acc16.resize(hv, f16::ZERO);
    sc.acc.resize(hv, 0.0);
    let (mut m_fin, mut s_fin) = (f32::NEG_INFINITY, 0.0f32);
    out.fill(0.0);
    let mut c0 = 0;
    while c0 <= pos {
        let (a, b) = (c0.max(lo), (c0 + chunk - 1).min(pos));
        c0 += chunk;
        if a > b {
            continue;
        }
        let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
        sc.acc16.fill(f16::ZERO);
        for j in a..=b {
            let (Some(kr), Some(vr)) = (kc.f16_slice(j, kvh * hk, hk), vc.f16_slice(j, kvh * hv, hv)) else {
                return;
            };
            let x = ops::dot_f16_ggml(kr, &sc.q16, layout) * scale;
            let (mut ms, mut vs) = (1.0f32, 1.0f32);
            if x > m {
                let old = m;
                m = x;
                ms = (old - m).exp();
                ops::scale_f16(&mut sc.acc16, ms);
            } else {
                vs = (x - m).exp();
            }
            ops::mad_f16(&mut sc.acc16, vs, vr);
            s = s.mul_add(ms, vs); // ggml-cpu is built with FP contraction: `S*ms + vs` is one FMA
        }
        for (d, v) in sc.acc.iter_mut().zip(&sc.acc16) {
            *d = v.to_f32();
        }
        if chunk > pos {
            // one chunk: the plain path divides directly
            let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
            for (o, v) in out.iter_mut().zip(&sc.acc) {
                *o = v * inv;
            }
            return;
        }
        if s == 0.0 {
            continue;
        }
        let m_new = m_fin.max(m);
        let (so, sn) = ((m_fin - m_new).exp(), (m - m_new).exp());
        for (o, v) in out.iter_mut().zip(&sc.acc) {
            *o = o.mul_add(so, v * sn); // contracted as in ggml-cpu
        }
        s_fin = s_fin.mul_add(so, s * sn);
        m_fin = m_new;
    }
    let inv = if s_fin == 0.0 { 0.0 } else { 1.0 / s_fin };
    for o in out.iter_mut() {
        *o *= inv;
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Inference state of a [`Transformer`].
pub struct TransformerState {
    kv: KvCache,
    n_past: usize,
    n_ubatch: usize,
    pool: Arc<Pool>,
    observer: Option<std::sync::Arc<dyn crate::model::Observer>>,
}

impl State for TransformerState {
    fn set_observer(&mut self, observer: Option<std::sync::Arc<dyn crate::model::Observer>>) -> bool {
        self.observer = observer;
        true
    }
    fn n_past(&self) -> usize {
        self.n_past
    }
    fn n_ctx(&self) -> usize {
        self.kv.n_ctx
    }
    fn truncate(&mut self, n: usize) {
        self.n_past = self.n_past.min(n);
    }
    fn cache_bytes(&self) -> usize {
        self.kv.bytes()
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

fn add_bias(y: &mut [f32], b: &Option<Vec<f32>>) {
    if let Some(b) = b {
        for row in y.chunks_exact_mut(b.len()) {
            ops::add_inplace(row, b);
        }
    }
}

fn rms_rows(x: &[f32], w: &[f32], eps: f32, out: &mut Vec<f32>) {
    out.resize(x.len(), 0.0);
    for (xr, or) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
        ops::rms_norm(xr, w, eps, or);
    }
}

fn rms_rows_inplace(x: &mut [f32], w: &[f32], eps: f32, tmp: &mut Vec<f32>) {
    tmp.resize(w.len(), 0.0);
    for xr in x.chunks_exact_mut(w.len()) {
        ops::rms_norm(xr, w, eps, tmp);
        xr.copy_from_slice(tmp);
    }
}

/// How the rows of one batch pass are laid out: the single-token segments' rows first
/// (`0..n_single`, one per segment), then each multi-token segment's rows contiguously.
/// Products over the single rows use [`matmul_rowwise`] (each row's arithmetic that of a
/// one-token product), every multi-token segment gets a product of its own: so each row's
/// result is the one its sequence would get alone.
struct Rows {
    n_single: usize,
    multi: Vec<(usize, usize)>,
    n: usize,
}

impl Rows {
    /// Gives each part its first row (`row0`) and first position (`p0`): single-token
    /// parts first, then the others in order.
    fn lay_out(parts: &mut [Part<'_>]) -> Rows {
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_by_key(|&i| parts[i].tokens.len() > 1);
        let mut rows = Rows { n_single: 0, multi: Vec::new(), n: 0 };
        for &i in &order {
            let n = parts[i].tokens.len();
            parts[i].row0 = rows.n;
            parts[i].p0 = parts[i].st.n_past;
            if n == 1 {
                rows.n_single += 1;
            } else {
                rows.multi.push((rows.n, n));
            }
            rows.n += n;
        }
        rows
    }
}

/// Scratch of one batch pass, reused by every layer.
#[derive(Default)]
struct Buffers {
    /// The normed input of a block.
    h: Vec<f32>,
    /// Q (attention), the gate product (FFN).
    q: Vec<f32>,
    /// K (attention), the up product (FFN).
    k: Vec<f32>,
    /// V.
    v: Vec<f32>,
    /// Attention output before `wo`.
    o: Vec<f32>,
    /// A block's output before the residual add.
    a: Vec<f32>,
    /// One row, for in-place norms.
    tmp: Vec<f32>,
    /// Rope's cos/sin cache of one position.
    rc: Vec<f32>,
}

/// The part of a batch pass one sequence contributes.
struct Part<'s> {
    st: &'s mut TransformerState,
    tokens: &'s [u32],
    logits: Logits,
    row0: usize,
    p0: usize,
}

/// Pool and observer of a batch pass.
struct Ctx<'a> {
    pool: &'a Pool,
    observer: Option<&'a Arc<dyn crate::model::Observer>>,
}

impl Transformer {
    fn weight(&self, t: &TensorRef) -> Result<Matrix<'_>> {
        match self.repacked.get(&(t.shard, t.start)) {
            Some(r) => Ok(r.matrix()),
            None => mat(&self.file, t),
        }
    }

    fn mm(&self, cx: &Ctx<'_>, t: &TensorRef, x: &[f32], rows: &Rows, y: &mut Vec<f32>) -> Result<()> {
        if let Some(o) = cx.observer {
            o.matmul(&t.name, x, rows.n);
        }
        let m = self.weight(t)?;
        let (c, r) = (m.cols(), m.rows());
        y.resize(rows.n * r, 0.0);
        if rows.n_single > 0 {
            let ns = rows.n_single;
            matmul_rowwise(cx.pool, &m, &x[..ns * c], ns, &mut y[..ns * r])?;
        }
        for &(r0, n) in &rows.multi {
            matmul(cx.pool, &m, &x[r0 * c..(r0 + n) * c], n, &mut y[r0 * r..(r0 + n) * r])?;
        }
        Ok(())
    }

    fn activate(&self, gate: &mut [f32], up: &[f32]) {
        match self.spec.activation {
            Activation::Silu => ops::silu_mul_inplace(gate, up),
            Activation::Gelu => ops::gelu_mul_inplace(gate, up),
        }
    }

    /// Attention of several sequences' query rows over their own caches (layer `il`) into
    /// `o`; `seqs[j] = (cache, first row, rows, first position)` in the batch's row layout.
    /// A sequence of 64 or more rows (the tiled path) gets a pool job of its own; all the
    /// others share one job, one task per (row, head) — each task's arithmetic is what
    /// the sequence would get alone.
    fn attention(
        &self,
        pool: &Pool,
        il: usize,
        seqs: &[(&KvCache, usize, usize, usize)],
        q: &[f32],
        scale: f32,
        o: &mut [f32],
    ) {
        let hp = &self.hp;
        let (nh, nkv, hk, hv) = (hp.n_head, hp.n_head_kv, hp.head_k, hp.head_v);
        let group = nh / nkv;
        let layer = &self.layers[il];
        let window = if layer.swa { self.spec.swa.as_ref().map(|s| s.window) } else { None };
        // llama.cpp's CPU flash attention (its default) takes two paths: batches of 64
        // or more query rows use f32 tiles; smaller ones (decode) round q to f16 and
        // accumulate V in f16 with an online softmax, splitting a single query over
        // the threads once the (256-padded) KV length reaches 512. We follow both, so
        // logits track llama.cpp's own rounding.
        let f16_kv = |kv: &KvCache| kv.k[il].cache_type() == CacheType::F16 && kv.v[il].cache_type() == CacheType::F16;
        let nth = pool.n_threads();
        let outs: Vec<Mutex<&mut [f32]>> = o.chunks_mut(hv).map(Mutex::new).collect();
        let mut rest: Vec<(&KvCache, usize, usize, usize)> = Vec::new();
        for &(kv, r0, n, p0) in seqs {
            if n >= 64 && f16_kv(kv) {
                // one task per (head, tile of 64 query rows): each K/V tile is converted once
                let (kc, vc) = (&kv.k[il], &kv.v[il]);
                let (qs, os) = (&q[r0 * nh * hk..(r0 + n) * nh * hk], &outs[r0 * nh..(r0 + n) * nh]);
                let n_qt = n.div_ceil(TILE);
                pool.for_each(nh * n_qt, &|i| {
                    let (head, qt) = (i % nh, i / nh);
                    let rows = qt * TILE..(qt * TILE + TILE).min(n);
                    let geo = TileGeometry { head, nh, kvh: head / group, hk, hv, scale, window, p0 };
                    attend_tiled(kc, vc, &geo, rows, qs, os);
                });
            } else {
                rest.push((kv, r0, n, p0));
            }
        }
        if rest.is_empty() {
            return;
        }
        // task ranges per sequence
        let mut starts = Vec::with_capacity(rest.len() + 1);
        let mut total = 0;
        for &(_, _, n, _) in &rest {
            starts.push(total);
            total += n * nh;
        }
        pool.for_each(total, &|i| {
            let j = starts.partition_point(|&s| s <= i) - 1;
            let (kv, r0, n, p0) = rest[j];
            let local = i - starts[j];
            let (t, head) = (local / nh, local % nh);
            let (kc, vc) = (&kv.k[il], &kv.v[il]);
            let f16_path = f16_kv(kv);
            let n_ctx = kv.n_ctx;
            SCRATCH.with(|cell| {
                let mut guard = cell.borrow_mut();
                let sc = &mut *guard;
                let kvh = head / group;
                let pos = p0 + t;
                let lo = match window {
                    Some(w) => (pos + 1).saturating_sub(w),
                    None => 0,
                };
                let r = r0 + t;
                let src = &q[(r * nh + head) * hk..(r * nh + head + 1) * hk];
                let mut out = outs[r * nh + head].lock().unwrap_or_else(|e| e.into_inner());
                let view = HeadView { kc, vc, kvh, hk, hv, scale, lo, pos };
                if f16_path {
                    let n_kv = n_ctx.min(256usize.max((pos + 1).div_ceil(256) * 256));
                    let chunk = if n == 1 && n_kv >= 512 { n_kv.div_ceil(nth) } else { n_kv };
                    attend_f16(&view, src, chunk, sc, &mut out);
                } else {
                    attend_f32(&view, src, sc, &mut out);
                }
            })
        });
    }

    /// One pass over the weights for every part (each at most one ubatch of its own
    /// sequence); returns each part's logits.
    /// One forward pass over every part of a batch: [`Rows::lay_out`], [`Self::embed`],
    /// then per layer [`Self::attention_block`] and [`Self::ffn_block`] (each adds its
    /// output to the residual stream `x`), then [`Self::output_head`].
    fn run_batch(&self, pool: &Pool, parts: &mut [Part<'_>]) -> Result<Vec<Vec<f32>>> {
        let rows = Rows::lay_out(parts);
        let observer = parts.first().and_then(|p| p.st.observer.clone());
        let cx = Ctx { pool, observer: observer.as_ref() };
        let mut x = self.embed(parts, rows.n)?;
        let mut b = Buffers::default();
        for (il, layer) in self.layers.iter().enumerate() {
            self.attention_block(&cx, il, layer, &mut x, parts, &rows, &mut b)?;
            self.ffn_block(&cx, il, layer, &mut x, parts, &rows, &mut b)?;
        }
        for p in parts.iter_mut() {
            p.st.n_past += p.tokens.len();
        }
        self.output_head(&cx, parts, &x, &mut b)
    }

    /// The token embeddings of every row (ggml's `get_rows`), scaled when the spec says so.
    fn embed(&self, parts: &[Part<'_>], n_rows: usize) -> Result<Vec<f32>> {
        let e = self.hp.n_embd;
        let mut x = vec![0.0f32; n_rows * e];
        let emb = mat(&self.file, &self.tok_embd)?;
        for p in parts.iter() {
            for (t, &id) in p.tokens.iter().enumerate() {
                if id as usize >= self.n_vocab {
                    return Err(Error::TokenOutOfRange { id, n_vocab: self.n_vocab });
                }
                let r = p.row0 + t;
                emb.dequantize_row(id as usize, &mut x[r * e..(r + 1) * e])?;
            }
        }
        if let Some(s) = self.spec.embed_scale {
            ops::scale_inplace(&mut x, s);
        }
        dump("embd", &x);
        Ok(x)
    }

    /// `x += post_norm(wo · attention(rope(norm(x)·wq), rope(norm(x)·wk), norm(x)·wv))`,
    /// writing each row's K and V into its sequence's cache at its position.
    #[allow(clippy::too_many_arguments)]
    fn attention_block(
        &self,
        cx: &Ctx<'_>,
        il: usize,
        layer: &Layer,
        x: &mut [f32],
        parts: &mut [Part<'_>],
        rows: &Rows,
        b: &mut Buffers,
    ) -> Result<()> {
        let hp = &self.hp;
        let (nh, nkv, hk, hv) = (hp.n_head, hp.n_head_kv, hp.head_k, hp.head_v);
        let Buffers { h, q, k, v, o, a, tmp, rc } = b;
        rms_rows(x, &layer.attn_norm, hp.rms_eps, h);
        dump(&format!("attn_norm-{il}"), h);
        self.mm(cx, &layer.wq, h, rows, q)?;
        self.mm(cx, &layer.wk, h, rows, k)?;
        self.mm(cx, &layer.wv, h, rows, v)?;
        add_bias(q, &layer.bq);
        add_bias(k, &layer.bk);
        add_bias(v, &layer.bv);
        dump(&format!("Qcur-{il}"), q);
        dump(&format!("Kcur-{il}"), k);
        dump(&format!("Vcur-{il}"), v);
        if let Some(w) = &layer.q_norm {
            rms_rows_inplace(q, w, hp.rms_eps, tmp);
        }
        if let Some(w) = &layer.k_norm {
            rms_rows_inplace(k, w, hp.rms_eps, tmp);
        }
        for p in parts.iter_mut() {
            for t in 0..p.tokens.len() {
                let (r, pos) = (p.row0 + t, p.p0 + t);
                layer.rope.cache(pos, rc);
                for hq in q[r * nh * hk..(r + 1) * nh * hk].chunks_exact_mut(hk) {
                    layer.rope.apply(rc, hq);
                }
                for hkv in k[r * nkv * hk..(r + 1) * nkv * hk].chunks_exact_mut(hk) {
                    layer.rope.apply(rc, hkv);
                }
                p.st.kv.k[il].write(pos, &k[r * nkv * hk..(r + 1) * nkv * hk]);
                p.st.kv.v[il].write(pos, &v[r * nkv * hv..(r + 1) * nkv * hv]);
            }
        }
        let mut scale = self.spec.attn_scale.unwrap_or(1.0 / (hk as f32).sqrt());
        if self.spec.scale_q {
            ops::scale_inplace(q, scale);
            scale = 1.0;
        }
        dump(&format!("Qrope-{il}"), q);
        dump(&format!("Krope-{il}"), k);
        o.resize(rows.n * nh * hv, 0.0);
        let seqs: Vec<(&KvCache, usize, usize, usize)> =
            parts.iter().map(|p| (&p.st.kv, p.row0, p.tokens.len(), p.p0)).collect();
        self.attention(cx.pool, il, &seqs, q, scale, o);
        dump(&format!("kqv_out-{il}"), o);
        self.mm(cx, &layer.wo, o, rows, a)?;
        add_bias(a, &layer.bo);
        if let Some(w) = &layer.post_attn_norm {
            rms_rows_inplace(a, w, hp.rms_eps, tmp);
        }
        ops::add_inplace(x, a);
        dump(&format!("ffn_inp-{il}"), x);
        Ok(())
    }

    /// `x += post_norm(ffn(norm(x)))`: the dense gated FFN, or the experts routed per
    /// sequence (a sequence's experts never see another sequence's rows).
    #[allow(clippy::too_many_arguments)]
    fn ffn_block(
        &self,
        cx: &Ctx<'_>,
        il: usize,
        layer: &Layer,
        x: &mut [f32],
        parts: &[Part<'_>],
        rows: &Rows,
        b: &mut Buffers,
    ) -> Result<()> {
        let (hp, e) = (&self.hp, self.hp.n_embd);
        let Buffers { h, q: gate_out, k: up_out, a, tmp, .. } = b;
        rms_rows(x, &layer.ffn_norm, hp.rms_eps, h);
        dump(&format!("ffn_norm-{il}"), h);
        match &layer.ffn {
            Ffn::Dense { gate, up, down, b_gate, b_up, b_down } => {
                self.mm(cx, gate, h, rows, gate_out)?;
                self.mm(cx, up, h, rows, up_out)?;
                add_bias(gate_out, b_gate);
                add_bias(up_out, b_up);
                dump(&format!("ffn_gate-{il}"), gate_out);
                dump(&format!("ffn_up-{il}"), up_out);
                self.activate(gate_out, up_out);
                dump(&format!("ffn_act-{il}"), gate_out);
                self.mm(cx, down, gate_out, rows, a)?;
                add_bias(a, b_down);
            }
            Ffn::Moe { router, gate, up, down } => {
                a.resize(rows.n * e, 0.0);
                let mut part_out = Vec::new();
                for p in parts.iter() {
                    let (r0, n) = (p.row0, p.tokens.len());
                    let one = Rows {
                        n_single: usize::from(n == 1),
                        multi: if n == 1 { Vec::new() } else { vec![(0, n)] },
                        n,
                    };
                    let hs = &h[r0 * e..(r0 + n) * e];
                    self.moe(cx, hs, &one, router, gate, up, down, &mut part_out)?;
                    a[r0 * e..(r0 + n) * e].copy_from_slice(&part_out);
                }
            }
        }
        dump(&format!("ffn_out-{il}"), a);
        if let Some(w) = &layer.post_ffn_norm {
            rms_rows_inplace(a, w, hp.rms_eps, tmp);
        }
        ops::add_inplace(x, a);
        dump(&format!("l_out-{il}"), x);
        Ok(())
    }

    /// The logits each part asked for: each `Last` part's last row (one-token products),
    /// then each `All` part's rows (a product of their own), through the output norm, the
    /// output matrix and the final soft-cap.
    fn output_head(&self, cx: &Ctx<'_>, parts: &[Part<'_>], x: &[f32], b: &mut Buffers) -> Result<Vec<Vec<f32>>> {
        let e = self.hp.n_embd;
        let mut sel = Vec::new();
        let mut out_rows = Rows { n_single: 0, multi: Vec::new(), n: 0 };
        let mut at = vec![(0usize, 0usize); parts.len()];
        for (i, p) in parts.iter().enumerate() {
            if p.logits == Logits::Last {
                let r = p.row0 + p.tokens.len() - 1;
                sel.extend_from_slice(&x[r * e..(r + 1) * e]);
                at[i] = (out_rows.n_single, 1);
                out_rows.n_single += 1;
            }
        }
        out_rows.n = out_rows.n_single;
        for (i, p) in parts.iter().enumerate() {
            if p.logits == Logits::All {
                let n = p.tokens.len();
                sel.extend_from_slice(&x[p.row0 * e..(p.row0 + n) * e]);
                at[i] = (out_rows.n, n);
                out_rows.multi.push((out_rows.n, n));
                out_rows.n += n;
            }
        }
        if out_rows.n == 0 {
            return Ok(parts.iter().map(|_| Vec::new()).collect());
        }
        rms_rows_inplace(&mut sel, &self.output_norm, self.hp.rms_eps, &mut b.tmp);
        dump("result_norm", &sel);
        let mut out = Vec::new();
        self.mm(cx, &self.output, &sel, &out_rows, &mut out)?;
        dump("result_output", &out);
        if let Some(c) = self.spec.final_softcap {
            for l in out.iter_mut() {
                *l = (*l / c).tanh() * c;
            }
        }
        let nv = self.n_vocab;
        Ok(parts
            .iter()
            .zip(&at)
            .map(|(p, &(r0, n))| match p.logits {
                Logits::None => Vec::new(),
                _ => out[r0 * nv..(r0 + n) * nv].to_vec(),
            })
            .collect())
    }

    #[allow(clippy::too_many_arguments)]
    fn moe(
        &self,
        cx: &Ctx<'_>,
        h: &[f32],
        rows: &Rows,
        router: &TensorRef,
        gate: &TensorRef,
        up: &TensorRef,
        down: &TensorRef,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let hp = &self.hp;
        let (e, ne, k) = (hp.n_embd, hp.n_expert, hp.n_expert_used);
        let n = rows.n;
        let mut logits = Vec::new();
        self.mm(cx, router, h, rows, &mut logits)?;
        // Route: softmax over experts, top-k, optional renormalization and scale.
        let mut routes: Vec<Vec<(usize, f32)>> = vec![Vec::new(); ne];
        let mut idx: Vec<usize> = Vec::with_capacity(ne);
        for t in 0..n {
            let p = &mut logits[t * ne..(t + 1) * ne];
            ops::softmax_inplace(p);
            idx.clear();
            idx.extend(0..ne);
            idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
            let sel = &idx[..k];
            let mut w: Vec<f32> = sel.iter().map(|&i| p[i]).collect();
            if self.spec.moe_norm_weights {
                // ggml_sum_rows (f64 accumulation), clamped to the smallest normal f16.
                let sum = (w.iter().map(|&x| x as f64).sum::<f64>() as f32).max(6.103_515_6e-5);
                for x in w.iter_mut() {
                    *x /= sum;
                }
            }
            if hp.expert_weights_scale != 0.0 && hp.expert_weights_scale != 1.0 {
                for x in w.iter_mut() {
                    *x *= hp.expert_weights_scale;
                }
            }
            for (slot, (&ex, &wt)) in sel.iter().zip(&w).enumerate() {
                routes[ex].push((t * k + slot, wt));
            }
        }
        // Weighted expert outputs per (token, slot), summed in slot order afterwards as
        // llama.cpp's chain of ggml_add does.
        let mut weighted = vec![0f32; n * k * e];
        let (mut xs, mut g, mut u, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (ex, toks) in routes.iter().enumerate() {
            if toks.is_empty() {
                continue;
            }
            xs.clear();
            for &(ts, _) in toks {
                let t = ts / k;
                xs.extend_from_slice(&h[t * e..(t + 1) * e]);
            }
            let m = toks.len();
            // The observer sees the rows in llama.cpp's MUL_MAT_ID order: by slot, then token.
            let order: Vec<usize> = match &cx.observer {
                Some(_) => {
                    let mut v: Vec<usize> = (0..m).collect();
                    v.sort_by_key(|&r| (toks[r].0 % k, toks[r].0 / k));
                    v
                }
                None => Vec::new(),
            };
            let reorder = |rows: &[f32]| -> Vec<f32> {
                let w = rows.len() / m;
                order.iter().flat_map(|&r| rows[r * w..(r + 1) * w].iter().copied()).collect()
            };
            let slots: Vec<usize> = order.iter().map(|&r| toks[r].0 % k).collect();
            if let Some(o) = &cx.observer {
                let x = reorder(&xs);
                o.expert_matmul(&gate.name, ex, ne, &x, &slots);
                o.expert_matmul(&up.name, ex, ne, &x, &slots);
            }
            let gm = expert_mat(&self.file, gate, ex, ne)?;
            g.resize(m * gm.rows(), 0.0);
            matmul_expert(cx.pool, &gm, &xs, m, &mut g)?;
            let um = expert_mat(&self.file, up, ex, ne)?;
            u.resize(m * um.rows(), 0.0);
            matmul_expert(cx.pool, &um, &xs, m, &mut u)?;
            self.activate(&mut g, &u);
            if let Some(o) = &cx.observer {
                o.expert_matmul(&down.name, ex, ne, &reorder(&g), &slots);
            }
            let dm = expert_mat(&self.file, down, ex, ne)?;
            d.resize(m * e, 0.0);
            matmul_expert(cx.pool, &dm, &g, m, &mut d)?;
            for (r, &(ts, wt)) in toks.iter().enumerate() {
                for (o, s) in weighted[ts * e..(ts + 1) * e].iter_mut().zip(&d[r * e..(r + 1) * e]) {
                    *o = s * wt;
                }
            }
        }
        out.clear();
        out.resize(n * e, 0.0);
        for (t, o) in out.chunks_exact_mut(e).enumerate() {
            o.copy_from_slice(&weighted[t * k * e..][..e]);
            for slot in 1..k {
                for (o, w) in o.iter_mut().zip(&weighted[(t * k + slot) * e..][..e]) {
                    *o += w;
                }
            }
        }
        Ok(())
    }
}

impl Model for Transformer {
    fn arch(&self) -> &str {
        &self.arch
    }

    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn n_ctx_train(&self) -> usize {
        self.hp.n_ctx_train
    }

    fn describe(&self) -> String {
        let hp = &self.hp;
        let mut s = format!(
            "{}: {} layers, n_embd {}, {} heads / {} KV heads, head dim {}/{}, n_vocab {}",
            self.arch, hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_k, hp.head_v, self.n_vocab
        );
        if hp.n_expert > 0 {
            s += &format!(", {} experts ({} used)", hp.n_expert, hp.n_expert_used);
        }
        if let Some(w) = &self.spec.swa {
            s += &format!(", sliding window {} on {} layers", w.window, w.layers.iter().filter(|&&b| b).count());
        }
        s
    }

    fn new_state(&self, opts: &StateOptions) -> Result<Box<dyn State>> {
        let hp = &self.hp;
        let n_ctx = if opts.n_ctx == 0 { hp.n_ctx_train } else { opts.n_ctx };
        let widths = vec![(hp.n_head_kv * hp.head_k, hp.n_head_kv * hp.head_v); hp.n_layer];
        let kv = KvCache::new(&widths, n_ctx, opts.cache_type_k, opts.cache_type_v)?;
        let threads = opts.n_threads.max(1);
        Ok(Box::new(TransformerState {
            kv,
            n_past: 0,
            n_ubatch: opts.n_ubatch.max(1),
            pool: opts.pool.clone().unwrap_or_else(|| Arc::new(Pool::new(threads))),
            observer: None,
        }))
    }

    fn shift_cache(&self, state: &mut dyn State, keep: usize, chunks: &[(usize, usize)]) -> Result<()> {
        let st = state
            .as_any_mut()
            .downcast_mut::<TransformerState>()
            .ok_or_else(|| Error::Invalid("state was not made by this model".into()))?;
        let mut end = keep.min(st.n_past);
        for &(src, n) in chunks {
            if src < end || src.checked_add(n).is_none_or(|e| e > st.n_past) {
                return Err(Error::Invalid(format!(
                    "KV shift of positions {src}..{}: chunks must follow position {end} in order, within the {} cached",
                    src.saturating_add(n),
                    st.n_past
                )));
            }
            end = src + n;
        }
        let (nkv, hk) = (self.hp.n_head_kv, self.hp.head_k);
        let mut rc = Vec::new();
        for (il, layer) in self.layers.iter().enumerate() {
            let mut dst = keep.min(st.n_past);
            for &(src, n) in chunks {
                if dst != src {
                    layer.rope.cache_at(dst as i64 - src as i64, &mut rc);
                    st.kv.k[il].map_rows(src, n, |row| {
                        for h in row[..nkv * hk].chunks_exact_mut(hk) {
                            layer.rope.apply(&rc, h);
                        }
                    })?;
                    st.kv.k[il].move_rows(src, dst, n)?;
                    st.kv.v[il].move_rows(src, dst, n)?;
                }
                dst += n;
            }
        }
        st.n_past = keep.min(st.n_past) + chunks.iter().map(|c| c.1).sum::<usize>();
        Ok(())
    }

    fn forward(&self, state: &mut dyn State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let mut seg = [Segment { state, tokens, logits }];
        Ok(self.forward_batch(&mut seg)?.pop().unwrap_or_default())
    }

    fn forward_batch(&self, segments: &mut [Segment<'_>]) -> Result<Vec<Vec<f32>>> {
        let mut states = Vec::with_capacity(segments.len());
        for s in segments.iter_mut() {
            let st = s
                .state
                .as_any_mut()
                .downcast_mut::<TransformerState>()
                .ok_or_else(|| Error::Invalid("state was not made by this model".into()))?;
            if st.n_past + s.tokens.len() > st.kv.n_ctx {
                return Err(Error::ContextFull { n_tokens: s.tokens.len(), n_ctx: st.kv.n_ctx, pos: st.n_past });
            }
            states.push((st, s.tokens, s.logits));
        }
        let Some(pool) = states.first().map(|(st, _, _)| st.pool.clone()) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); states.len()];
        // Round r takes each sequence's r-th ubatch, as `forward` alone would cut it.
        let mut round = 0;
        loop {
            let mut parts = Vec::new();
            let mut idx = Vec::new();
            for (i, (st, tokens, logits)) in states.iter_mut().enumerate() {
                let ub = st.n_ubatch;
                let n_chunks = tokens.len().div_ceil(ub);
                if round >= n_chunks {
                    continue;
                }
                let chunk = &tokens[round * ub..((round + 1) * ub).min(tokens.len())];
                let want = match *logits {
                    Logits::All => Logits::All,
                    Logits::Last if round == n_chunks - 1 => Logits::Last,
                    _ => Logits::None,
                };
                parts.push(Part { st, tokens: chunk, logits: want, row0: 0, p0: 0 });
                idx.push(i);
            }
            if parts.is_empty() {
                break;
            }
            for (i, l) in idx.into_iter().zip(self.run_batch(&pool, &mut parts)?) {
                out[i].extend(l);
            }
            round += 1;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use gguf_format::split::{split_path, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
    use gguf_format::GgufWriter;

    use super::*;

    /// `read_tensor` (the repacking path's `pread`) finds each tensor in its own shard's
    /// file at its shard-relative offset: the same bytes as the map.
    #[test]
    fn read_tensor_reads_from_the_holding_shard() {
        let d = tempfile::tempdir().unwrap();
        let prefix = d.path().join("m");
        for no in 0..3u16 {
            let mut w = GgufWriter::new();
            w.add_kv(KEY_SPLIT_NO, no);
            w.add_kv(KEY_SPLIT_COUNT, 3u16);
            w.add_kv(KEY_SPLIT_TENSORS_COUNT, 6i32);
            // Different sizes per shard, so equal offsets in two shards hold different data.
            for j in 0..2u16 {
                let id = no * 2 + j;
                let data: Vec<u8> = (0..(8 + 4 * id as usize)).map(|k| (id as usize * 31 + k) as u8).collect();
                w.add_tensor_owned(&format!("t{id}"), &[data.len() as u64], 24, data).unwrap();
            }
            w.write_to_path(split_path(&prefix, no as u32, 3)).unwrap();
        }
        let m = SplitGguf::open(split_path(&prefix, 1, 3)).unwrap();
        let ld = Loader::new(&m, "x");
        let mut buf = Vec::new();
        for id in 0..6usize {
            let name = format!("t{id}");
            let t = ld.tensor(&name, &[8 + 4 * id as u64]).unwrap();
            assert_eq!(t.shard, id / 2);
            read_tensor(&m, &t, &mut buf).unwrap();
            assert_eq!(buf, t.data(&m));
            assert_eq!(buf, m.tensor_data_by_name(&name).unwrap());
            assert_eq!(buf[0], (id * 31) as u8);
        }
    }
}
