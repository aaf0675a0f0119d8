//! Scalar twins of [`crate::ops`], in ggml-cpu's arithmetic where it is defined
//! (`ggml-cpu/vec.h`, `vec.cpp`, `ops.cpp`).

use half::f16;

/// `Σ a·b`, summed in f64 as `ggml_vec_dot_f32`'s scalar path (`ggml_float`).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x * y) as f64).sum::<f64>() as f32
}

/// `Σ a·b` with `a` in f16.
pub fn dot_f16_f32(a: &[f16], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x.to_f32() * y) as f64).sum::<f64>() as f32
}

/// `ggml_vec_dot_f16` scalar: `Σ a·b` of two f16 rows, summed in f64.
pub fn dot_f16_f16(a: &[f16], b: &[f16]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x.to_f32() * y.to_f32()) as f64).sum::<f64>() as f32
}

/// `y += a·x` (`ggml_vec_mad_f16` into an f32 accumulator).
pub fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += x.to_f32() * a;
    }
}

/// The wrapping sum of `bytes` read as little-endian `u64` words, by eight accumulators,
/// one per word of each 64-byte chunk (the tail words, fewer than 8, into the first ones;
/// a last partial word is left out).
pub fn stream_sum(bytes: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    let mut chunks = bytes.chunks_exact(64);
    for c in &mut chunks {
        add_line(&mut acc, c);
    }
    tail_sum(acc, chunks.remainder())
}

/// Adds the eight words of the 64-byte line `c` to the accumulators.
#[inline(always)]
pub(crate) fn add_line(acc: &mut [u64; 8], c: &[u8]) {
    for (k, a) in acc.iter_mut().enumerate() {
        *a = a.wrapping_add(word(&c[8 * k..8 * k + 8]));
    }
}

/// The whole words of `tail` into the first accumulators, then their sum.
pub(crate) fn tail_sum(mut acc: [u64; 8], tail: &[u8]) -> u64 {
    for (a, w) in acc.iter_mut().zip(tail.chunks_exact(8)) {
        *a = a.wrapping_add(word(w));
    }
    acc.iter().fold(0u64, |s, &a| s.wrapping_add(a))
}

#[inline(always)]
fn word(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// `y += a·x`.
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += x * a;
    }
}

/// `y[i] = fma(x[i], a, y[i])` (`ggml_vec_mad_f32`: every lane fused).
pub fn mad_f32(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = x.mul_add(a, *y);
    }
}

/// `Σ x²` in f64 as `ggml_compute_forward_rms_norm_f32`.
pub fn sum_squares_f64(x: &[f32]) -> f64 {
    x.iter().map(|v| (v * v) as f64).sum()
}

/// `silu(x) = x / (1 + e^-x)` (`ggml_silu_f32`).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Rotates the first `n_rot` elements of one head vector by a rope cache (`cos, sin`
/// per pair, ggml's `rope_yarn` values): pairs `(x[2i], x[2i+1])` (normal) or
/// `(x[i], x[i + n_rot/2])` (neox), each as ggml-cpu's `rotate_pairs`:
/// `x0·cos − x1·sin` and `x0·sin + x1·cos`, the first product of each fused.
#[inline(always)]
pub fn rope_rotate(x: &mut [f32], cache: &[f32], n_rot: usize, neox: bool) {
    let half = n_rot / 2;
    for i in 0..half {
        let (c, s) = (cache[2 * i], cache[2 * i + 1]);
        let (a, b) = if neox { (i, i + half) } else { (2 * i, 2 * i + 1) };
        let (x0, x1) = (x[a], x[b]);
        x[a] = x0.mul_add(c, -(x1 * s));
        x[b] = x0.mul_add(s, x1 * c);
    }
}

/// `gate = silu(gate) · up`.
pub fn silu_mul_inplace(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// `ggml_gelu_f32`: the tanh approximation.
#[inline]
pub fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    // ggml-cpu is compiled with FP contraction: `1.0f + GELU_COEF_A*x*x` is one FMA
    // (checked against its ggml_table_gelu_f16: all 65,536 entries equal).
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (GELU_COEF_A * x).mul_add(x, 1.0)).tanh())
}

/// ggml's `ggml_table_gelu_f16`: `fp16(gelu(f32(h)))` for every f16 bit pattern.
fn gelu_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| (0..=u16::MAX).map(|h| f16::from_f32(gelu_f32(f16::from_bits(h).to_f32())).to_bits()).collect())
}

/// ggml's `ggml_vec_gelu_f32` with `GGML_GELU_FP16`: table lookup through f16 for
/// `-10 < x < 10`, `0` below, `x` above.
#[inline]
pub fn gelu_table_f32(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        f16::from_bits(gelu_table()[f16::from_f32(x).to_bits() as usize]).to_f32()
    }
}

/// `gate = gelu(gate) · up` as `ggml_vec_geglu_f32` (f16 table).
pub fn gelu_mul_inplace(gate: &mut [f32], up: &[f32]) {
    let table = gelu_table();
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x * u
        } else {
            f16::from_bits(table[f16::from_f32(x).to_bits() as usize]).to_f32() * u
        };
    }
}

/// `y = f16(x·a + y)` with the product and sum fused (ggml's `ggml_vec_mad_f16` on FMA
/// hardware), an f16 accumulator.
pub fn mad_f16(y: &mut [f16], a: f32, x: &[f16]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = f16::from_f32(x.to_f32().mul_add(a, y.to_f32()));
    }
}

/// `y = f16(y·a)` (`ggml_vec_scale_f16`).
pub fn scale_f16(y: &mut [f16], a: f32) {
    for y in y.iter_mut() {
        *y = f16::from_f32(y.to_f32() * a);
    }
}

/// Elements per step of ggml's f16 vector ops on a build with AVX512-FP16
/// (`__AVX512FP16__`: `GGML_F16_STEP 128`, 32 half lanes a vector): the first
/// `n & !127` elements of `ggml_vec_mad_f16` / `ggml_vec_scale_f16` are computed in half
/// precision, the rest as on other builds.
pub const FP16_STEP: usize = 128;

/// `x·v + y` rounded once to f16 (AVX512-FP16's `vfmadd231ph`): the product of two
/// halves is exact in f64, the sum's residual comes from TwoSum, and the f32 step rounds
/// to odd so that the final f16 rounding is the single one.
pub fn fma_f16(x: f16, v: f16, y: f16) -> f16 {
    let (p, b) = (x.to_f64() * v.to_f64(), y.to_f64());
    let r = p + b;
    let bb = r - p;
    let e = (p - (r - bb)) + (b - bb);
    f16::from_f32(to_f32_odd(r, e))
}

/// `r + e` (`e` the exact residual of `r`, |e| ≤ half an f64 ulp) rounded to f32 by
/// truncation with a sticky last bit (round to odd): f32 keeps 13 more bits than f16,
/// so rounding that to f16 gives the correctly rounded f16 of `r + e`.
fn to_f32_odd(r: f64, e: f64) -> f32 {
    let mut t = r as f32;
    if !t.is_finite() || (t as f64 == r && e == 0.0) {
        return t;
    }
    // the exact value `r + e` against `t`: `t − r` is exact (both within one f32 ulp)
    let d = t as f64 - r;
    let over = if r > 0.0 { d > e } else { d < e };
    if over {
        // one step toward zero
        t = f32::from_bits(t.to_bits() - 1);
    }
    if t as f64 - r == e {
        return t; // exact after all
    }
    f32::from_bits(t.to_bits() | 1)
}

/// `y = x·v + y` as ggml's `ggml_vec_mad_f16` on an AVX512-FP16 build: `v` rounded to
/// f16 and one half-precision FMA per element for the first `n & !127` elements, the rest
/// as [`mad_f16`].
pub fn mad_f16_fp16(y: &mut [f16], a: f32, x: &[f16]) {
    let n = y.len().min(x.len());
    let np = n - n % FP16_STEP;
    let a16 = f16::from_f32(a);
    for (y, &x) in y[..np].iter_mut().zip(&x[..np]) {
        *y = fma_f16(x, a16, *y);
    }
    mad_f16(&mut y[np..n], a, &x[np..n]);
}

/// `y = y·v` as ggml's `ggml_vec_scale_f16` on an AVX512-FP16 build: `v` rounded to f16
/// and a half-precision product (exact in f32, then rounded once) for the first
/// `n & !127` elements, the rest as [`scale_f16`].
pub fn scale_f16_fp16(y: &mut [f16], a: f32) {
    let np = y.len() - y.len() % FP16_STEP;
    let a16 = f16::from_f32(a).to_f32();
    for y in y[..np].iter_mut() {
        *y = f16::from_f32(y.to_f32() * a16);
    }
    scale_f16(&mut y[np..], a);
}

/// Lane layout of ggml-cpu's f16 dot product, which a native llama.cpp build picks from
/// the CPU: 4 accumulators of 16 lanes (AVX-512) or of 8 lanes (AVX/AVX2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DotLayout {
    /// `GGML_F16_STEP 64`, `EPR 16`, `_mm512_reduce_add_ps`.
    Avx512,
    /// `GGML_F16_STEP 32`, `EPR 8`, two `hadd`s.
    Avx2,
}

impl DotLayout {
    /// Elements per step (4 accumulators).
    pub fn step(self) -> usize {
        match self {
            DotLayout::Avx512 => 64,
            DotLayout::Avx2 => 32,
        }
    }

    /// Reduces the `step()` lane sums (accumulator-major) as ggml's `GGML_F32x16_REDUCE`
    /// / `GGML_F32x8_REDUCE` do.
    pub fn reduce(self, acc: &[f32]) -> f32 {
        let epr = self.step() / 4;
        // x0 += x2, x1 += x3, x0 += x1
        let mut v = [0f32; 16];
        for i in 0..epr {
            v[i] = (acc[i] + acc[2 * epr + i]) + (acc[epr + i] + acc[3 * epr + i]);
        }
        match self {
            DotLayout::Avx512 => {
                let mut t3 = [0f32; 8];
                for i in 0..8 {
                    t3[i] = v[8 + i] + v[i];
                }
                let t6 = [t3[4] + t3[0], t3[5] + t3[1], t3[6] + t3[2], t3[7] + t3[3]];
                (t6[0] + t6[2]) + (t6[1] + t6[3])
            }
            DotLayout::Avx2 => {
                let t0 = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
                (t0[0] + t0[1]) + (t0[2] + t0[3])
            }
        }
    }
}

/// `Σ a·b` of two f16 rows in exactly the order of ggml-cpu's `ggml_vec_dot_f16` for
/// `layout`: fused multiply-adds per lane, ggml's reduction, leftovers added in f64.
pub fn dot_f16_ggml(a: &[f16], b: &[f16], layout: DotLayout) -> f32 {
    let n = a.len().min(b.len());
    let step = layout.step();
    let np = n - n % step;
    let mut acc = [0f32; 64];
    for i in (0..np).step_by(step) {
        for l in 0..step {
            acc[l] = a[i + l].to_f32().mul_add(b[i + l].to_f32(), acc[l]);
        }
    }
    let mut sum = layout.reduce(&acc[..step]) as f64;
    for i in np..n {
        sum += (a[i].to_f32() * b[i].to_f32()) as f64;
    }
    sum as f32
}

/// `Σ a·b` of two f32 rows in the order of ggml-cpu's `ggml_vec_dot_f32` of a SIMD build
/// with `layout`'s lanes: four accumulators of fused multiply-adds over whole steps,
/// ggml's reduction, the leftovers fused into the sum.
pub fn dot_f32_ggml(a: &[f32], b: &[f32], layout: DotLayout) -> f32 {
    let n = a.len().min(b.len());
    let step = layout.step();
    let np = n - n % step;
    let mut acc = [0f32; 64];
    let acc = &mut acc[..step];
    for i in (0..np).step_by(step) {
        for (l, s) in acc.iter_mut().enumerate() {
            *s = a[i + l].mul_add(b[i + l], *s);
        }
    }
    let mut s = layout.reduce(acc);
    for i in np..n {
        s = a[i].mul_add(b[i], s);
    }
    s
}

/// ggml-cpu's vectorized `ggml_v_expf` of `layout`'s build (the polynomial its softmax,
/// silu and swiglu use), one lane: [`expf_ggml`] (AVX-512) or [`expf_ggml_avx2`].
pub fn expf_ggml_for(x: f32, layout: DotLayout) -> f32 {
    match layout {
        DotLayout::Avx512 => expf_ggml(x),
        DotLayout::Avx2 => expf_ggml_avx2(x),
    }
}

/// `ggml_v_expf` of an AVX2 + FMA build (`__m256`), one lane: the same reduction and
/// polynomial as [`expf_ggml`] but its last term `c1·b` without the 1, the power of two
/// added to the exponent bits (`k`) and `k + k·j`, with the two-factor scaling where
/// `|n| > 126` and 0 / ∞ past 192.
pub fn expf_ggml_avx2(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // 0x1.715476p+0
    let n = z - r;
    let b = (-n).mul_add(f32::from_bits(0x35bf_be8e), (-n).mul_add(f32::from_bits(0x3f31_7200), x));
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1f32.to_bits()));
    let u = b * b;
    let j = f32::from_bits(0x3c07_2010)
        .mul_add(b, f32::from_bits(0x3d2b_9f17))
        .mul_add(u, f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)))
        .mul_add(u, f32::from_bits(0x3f7f_fff6) * b);
    // `n` is NaN only for a NaN input: every comparison below is false then (`_CMP_*_OQ`).
    if n.abs() > 192.0 {
        let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
        let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
        return s1 * s1;
    }
    if n.abs() > 126.0 {
        let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
        let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
        let s2 = f32::from_bits(e.wrapping_sub(g));
        return s2.mul_add(j, s2) * s1;
    }
    k.mul_add(j, k)
}

/// ggml-cpu's vectorized `ggml_v_expf` of an AVX-512 build (the polynomial its softmax
/// uses), one lane.
pub fn expf_ggml(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // 0x1.715476p+0
    let n = z - r;
    let b = (-n).mul_add(f32::from_bits(0x35bf_be8e), (-n).mul_add(f32::from_bits(0x3f31_7200), x));
    let u = b * b;
    let j = f32::from_bits(0x3c07_2010)
        .mul_add(b, f32::from_bits(0x3d2b_9f17))
        .mul_add(u, f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)))
        .mul_add(u, f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    scalef(j, n)
}

/// `_mm512_scalef_ps` for integral `n` in [-192, 192]: `j · 2ⁿ`, rounded once.
pub fn scalef_pub(j: f32, n: f32) -> f32 {
    scalef(j, n)
}

fn scalef(j: f32, n: f32) -> f32 {
    let n = n as i32;
    let pow2 = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    if (-126..=127).contains(&n) {
        j * pow2(n)
    } else if n > 127 {
        (j * pow2(127)) * pow2(n - 127)
    } else {
        // scale in f64 and round once to f32
        ((j as f64) * 2f64.powi(n)) as f32
    }
}

/// `C[i][j] = fma-chain over k of B[k][j]·A[i][k]`, starting from `C[i][j]`: ggml-cpu's
/// `simd_gemm` (`C` is `m×n`, `A` is `m×k`, `B` is `k×n`, all row-major).
pub fn gemm_fma(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = c[i * n + j];
            for kk in 0..k {
                acc = b[kk * n + j].mul_add(a[i * k + kk], acc);
            }
            c[i * n + j] = acc;
        }
    }
}

/// One KV head's keys and values for [`flash_f16_chunk`]: row `j` of K is
/// `k[j·k_stride..][..hk]`, of V `v[j·v_stride..][..hv]`; scores are `k·q·scale`, soft-capped
/// to `cap·tanh(·)` when `cap ≠ 0` (the scale already divided by it).
#[derive(Debug, Clone, Copy)]
pub struct FlashF16<'a> {
    /// K rows from the chunk's first key, at the head's offset.
    pub k: &'a [f16],
    /// V rows likewise.
    pub v: &'a [f16],
    /// Elements between consecutive K rows.
    pub k_stride: usize,
    /// Elements between consecutive V rows.
    pub v_stride: usize,
    /// Keys in the chunk (clipped to the rows `k` and `v` hold).
    pub n: usize,
    /// Head widths.
    pub hk: usize,
    /// V head width.
    pub hv: usize,
    /// Score scale.
    pub scale: f32,
    /// Soft-cap (0: off).
    pub cap: f32,
    /// The dot product's lane layout ([`DotLayout`]).
    pub layout: DotLayout,
    /// The V accumulation rounds as an AVX512-FP16 build's ([`mad_f16_fp16`],
    /// [`scale_f16_fp16`]).
    pub fp16: bool,
}

impl FlashF16<'_> {
    /// Keys both K and V hold rows for, at most `n`.
    pub fn keys(&self) -> usize {
        let rows = |len: usize, stride: usize, w: usize| {
            if len < w {
                0
            } else {
                (len - w).checked_div(stride).map_or(usize::MAX, |r| r + 1)
            }
        };
        self.n.min(rows(self.k.len(), self.k_stride, self.hk)).min(rows(self.v.len(), self.v_stride, self.hv))
    }

    /// Query heads of `q16` (`hk` each) that `m`, `s` and `acc16` (`hv` each) all have
    /// room for.
    pub fn heads(&self, q16: &[f16], m: &[f32], s: &[f32], acc16: &[f16]) -> usize {
        m.len().min(s.len()).min(q16.len() / self.hk.max(1)).min(acc16.len() / self.hv.max(1))
    }
}

/// One chunk of ggml-cpu's `flash_attn_ext_f16_one_chunk` (F16 K and V) for the query
/// heads that share one KV head, each head's operations in ggml's order: per key the score
/// `ggml_vec_dot_f16(k, q)·scale` (soft-capped), the online softmax — a new maximum
/// rescales the f16 accumulator (`ggml_vec_scale_f16` by `e^(M_old−M)`), else the weight
/// is `e^(s−M)` — then `ggml_vec_mad_f16` of the V row and `S = S·ms + vs` fused.
/// `m`, `s` and `acc16` carry each head's running maximum, sum and accumulator in and out
/// (start them at −∞, 0, 0).
pub fn flash_f16_chunk(c: &FlashF16<'_>, q16: &[f16], m: &mut [f32], s: &mut [f32], acc16: &mut [f16]) {
    let (n, g) = (c.keys(), c.heads(q16, m, s, acc16));
    let (hk, hv) = (c.hk, c.hv);
    for j in 0..n {
        let (kr, vr) = (&c.k[j * c.k_stride..][..hk], &c.v[j * c.v_stride..][..hv]);
        for h in 0..g {
            let raw = dot_f16_ggml(kr, &q16[h * hk..][..hk], c.layout) * c.scale;
            let x = if c.cap != 0.0 { c.cap * raw.tanh() } else { raw };
            let acc = &mut acc16[h * hv..][..hv];
            let (mut ms, mut vs) = (1.0f32, 1.0f32);
            if x > m[h] {
                let old = m[h];
                m[h] = x;
                ms = (old - x).exp();
                if c.fp16 {
                    scale_f16_fp16(acc, ms);
                } else {
                    scale_f16(acc, ms);
                }
            } else {
                vs = (x - m[h]).exp();
            }
            if c.fp16 {
                mad_f16_fp16(acc, vs, vr);
            } else {
                mad_f16(acc, vs, vr);
            }
            s[h] = s[h].mul_add(ms, vs); // ggml-cpu is built with FP contraction: one FMA
        }
    }
}

/// The lane-wise part of ggml's Mamba-2 scan step (`ggml_compute_forward_ssm_scan_f32`,
/// as GCC compiles its SIMD loop: each multiply-add fused) for one state row: over blocks
/// of `acc.len()` elements, per lane `s = fma(s, da, b·x_dt)`, then
/// `acc = fma(s, c, acc)`. `s`, `b`, `c` hold whole blocks.
#[inline(always)]
pub fn ssm_scan_lanes(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32, acc: &mut [f32]) {
    let step = acc.len();
    for ((sb, bb), cb) in s.chunks_exact_mut(step).zip(b.chunks_exact(step)).zip(c.chunks_exact(step)) {
        for (((sl, &bl), &cl), al) in sb.iter_mut().zip(bb).zip(cb).zip(acc.iter_mut()) {
            let st = sl.mul_add(da, bl * x_dt);
            *al = st.mul_add(cl, *al);
            *sl = st;
        }
    }
}
