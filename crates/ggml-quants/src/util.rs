//! Scalar helpers shared by the quant types, each a faithful port of the ggml routine it
//! names (llama.cpp `0c1e57098`, `ggml/src/ggml-impl.h` and `ggml/src/ggml-quants.c`).
//!
//! Bit-exactness rules followed throughout (ggml-base is built without `-march`, so x86-64
//! SSE2 single precision, no FMA contraction):
//! - every float expression is evaluated in `f32`, in C's left-to-right order, never fused;
//! - C's `MAX(a, b)` is `if a > b { a } else { b }` (not `f32::max`, which differs on NaN);
//! - integer results are truncated the way C's implicit conversions truncate (`as u8`).
//!
//! These are public so that plug-in types outside this crate can reuse them. Loops index
//! several slices in step, as the C does, so clippy's `needless_range_loop` is off here.
#![allow(clippy::needless_range_loop)]

/// `GROUP_MAX_EPS` of ggml-quants.c: below this a group counts as all zero.
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// `ggml_compute_fp16_to_fp32`, bit for bit (including NaN payloads).
#[inline]
pub fn fp16_to_f32(h: u16) -> f32 {
    let w = (h as u32) << 16;
    let sign = w & 0x8000_0000;
    let two_w = w.wrapping_add(w);
    let exp_offset: u32 = 0xE0 << 23;
    let exp_scale = f32::from_bits(0x0780_0000); // 0x1.0p-112f
    let normalized_value = f32::from_bits((two_w >> 4) + exp_offset) * exp_scale;
    let magic_mask: u32 = 126 << 23;
    let magic_bias = 0.5f32;
    let denormalized_value = f32::from_bits((two_w >> 17) | magic_mask) - magic_bias;
    let denormalized_cutoff: u32 = 1 << 27;
    let result =
        sign | if two_w < denormalized_cutoff { denormalized_value.to_bits() } else { normalized_value.to_bits() };
    f32::from_bits(result)
}

/// `ggml_compute_fp32_to_fp16`, bit for bit (round to nearest even, NaN → `0x7E00`).
#[inline]
pub fn f32_to_fp16(f: f32) -> u16 {
    let scale_to_inf = f32::from_bits(0x7780_0000); // 0x1.0p+112f
    let scale_to_zero = f32::from_bits(0x0880_0000); // 0x1.0p-110f
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;
    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let mut bias = shl1_w & 0xFF00_0000;
    if bias < 0x7100_0000 {
        bias = 0x7100_0000;
    }
    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7C00;
    let mantissa_bits = bits & 0x0000_0FFF;
    let nonsign = exp_bits + mantissa_bits;
    ((sign >> 16) | if shl1_w > 0xFF00_0000 { 0x7E00 } else { nonsign }) as u16
}

/// `ggml_compute_bf16_to_fp32`.
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `ggml_compute_fp32_to_bf16`: round to nearest even, NaN forced quiet.
#[inline]
pub fn f32_to_bf16(s: f32) -> u16 {
    let i = s.to_bits();
    if (i & 0x7fff_ffff) > 0x7f80_0000 {
        return ((i >> 16) | 64) as u16;
    }
    (i.wrapping_add(0x7fff + ((i >> 16) & 1)) >> 16) as u16
}

/// Reads a little-endian fp16 at `b[at..at + 2]` and widens it like ggml.
#[inline]
pub fn read_f16(b: &[u8], at: usize) -> f32 {
    fp16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Writes `v` as a little-endian fp16 (ggml's rounding) at `b[at..at + 2]`.
#[inline]
pub fn write_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f32_to_fp16(v).to_le_bytes());
}

/// C's `(int)f` as x86-64 `cvttss2si` computes it: truncation toward zero, and
/// `INT_MIN` for NaN and out-of-range values (Rust's `as` saturates instead).
#[inline]
pub fn c_f32_to_i32(f: f32) -> i32 {
    // One select (false for NaN), so that loops over it vectorize.
    let in_range = (-2147483648.0..2147483648.0).contains(&f);
    let t = f as i32;
    if in_range {
        t
    } else {
        i32::MIN
    }
}

/// The `(amax, max)` of the legacy symmetric encoders' first loop, `if (amax < fabsf(v))
/// { amax = fabsf(v); max = v; }` over `x`: the largest `|v|` (NaN never wins) and the
/// first `v` that has it (`0` when no `|v|` exceeds 0). The maximum is taken in lanes
/// (exact: the maximum of the same values), then the first index holding it is found.
#[inline]
pub fn abs_max_first(x: &[f32; 32]) -> (f32, f32) {
    let mut m = [0f32; 8];
    for c in x.chunks_exact(8) {
        for k in 0..8 {
            let a = c[k].abs();
            m[k] = if m[k] < a { a } else { m[k] };
        }
    }
    let mut amax = 0f32;
    for &v in &m {
        if amax < v {
            amax = v;
        }
    }
    if amax > 0.0 {
        for &v in x {
            if v.abs() == amax {
                return (amax, v);
            }
        }
    }
    (amax, 0.0)
}

/// C's `MAX(a, b)` macro on floats: `a > b ? a : b`.
#[inline]
pub fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// C's `MIN(a, b)` macro on floats: `a < b ? a : b`.
#[inline]
pub fn c_min(a: f32, b: f32) -> f32 {
    if a < b {
        a
    } else {
        b
    }
}

/// The shape of ggml's `quantize_<type>(src, dst, nrow, n_per_row, imatrix)`: without
/// importance weights the reference encoder over everything, with them `row_impl` on each
/// row (every row sees the same `n_per_row` weights). `row_bytes` is one encoded row.
pub fn quantize_rows_with(
    src: &[f32],
    dst: &mut [u8],
    n_per_row: usize,
    imatrix: Option<&[f32]>,
    row_bytes: usize,
    reference: fn(&[f32], &mut [u8]),
    row_impl: fn(&[f32], &mut [u8], &[f32]),
) {
    match imatrix {
        None => reference(src, dst),
        Some(qw) => {
            for (x, y) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_bytes)) {
                row_impl(x, y, qw);
            }
        }
    }
}

/// `nearest_int` of ggml-quants.c: round to nearest (ties to even) through the
/// `1.5 * 2^23` trick. Valid for |x| <= 4194303; like ggml (asserts off in release) it
/// returns the same garbage as the C code outside that range.
#[inline]
pub fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12582912.0f32;
    let i = val.to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// `make_qx_quants`: symmetric scale search for signed codes in `[-nmax, nmax-1]`,
/// stored in `l` offset by `nmax`. `qw` are optional importance weights.
pub fn make_qx_quants(n: usize, nmax: i32, x: &[f32], l: &mut [i8], rmse_type: i32, qw: Option<&[f32]>) -> f32 {
    let mut max = 0f32;
    let mut amax = 0f32;
    for &xi in &x[..n] {
        let ax = xi.abs();
        if ax > amax {
            amax = ax;
            max = xi;
        }
    }
    if amax < GROUP_MAX_EPS {
        l[..n].fill(0);
        return 0.0;
    }
    let mut iscale = -(nmax as f32) / max;
    if rmse_type == 0 {
        for i in 0..n {
            let li = nearest_int(iscale * x[i]);
            l[i] = (nmax + (-nmax).max((nmax - 1).min(li))) as i8;
        }
        return 1.0 / iscale;
    }
    if rmse_type > 0 {
        if n == 16 {
            return qx_fixed::<16>(nmax, max, x, l, rmse_type, qw);
        }
        if n == 32 {
            return qx_fixed::<32>(nmax, max, x, l, rmse_type, qw);
        }
    }
    let mut rmse_type = rmse_type;
    let mut return_early = false;
    if rmse_type < 0 {
        rmse_type = -rmse_type;
        return_early = true;
    }
    let weight = |i: usize| -> f32 {
        match qw {
            Some(q) => q[i],
            None => match rmse_type {
                1 => x[i] * x[i],
                2 => 1.0,
                3 => x[i].abs(),
                _ => x[i].abs().sqrt(),
            },
        }
    };
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let mut li = nearest_int(iscale * x[i]);
        li = (-nmax).max((nmax - 1).min(li));
        l[i] = (li + nmax) as i8;
        let w = weight(i);
        let lf = li as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 { 0.5 * (scale + 1.0 / iscale) } else { 1.0 / iscale };
    }
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let mut li = nearest_int(iscale * x[i]);
            li = (-nmax).max((nmax - 1).min(li));
            let w = weight(i);
            let lf = li as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let li = nearest_int(iscale * x[i]);
                l[i] = (nmax + (-nmax).max((nmax - 1).min(li))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Lanes of [`qx_fixed`]: the 19 trial scales `is = -9..=9` of `make_qx_quants`, plus one
/// unused lane so that the lanes fill whole vectors.
const QX_LANES: usize = 20;

/// `make_qx_quants` (`rmse_type > 0`, past the all-zero test) for a group of exactly `N`.
/// The C tries the 18 scales `is = -9..=9, is != 0` one after the other, and a trial's sums
/// do not depend on the trials before it (only the accept test does), so all trials run
/// side by side: lane `k` holds trial `is = k - 9`, and each lane adds its terms in C's
/// order (`i = 0, 1, ...`) with C's operations, so every lane's `sumlx`/`suml2` is the
/// C's bit for bit. Lane 9 (`is = 0`) is the C's first pass (`-(nmax + 0.1·0) / max` is
/// `-nmax / max` exactly). The accept tests then run in C's order.
#[inline(always)]
fn qx_fixed<const N: usize>(nmax: i32, max: f32, x: &[f32], l: &mut [i8], rmse_type: i32, qw: Option<&[f32]>) -> f32 {
    let x: &[f32; N] = x[..N].try_into().unwrap();
    let l: &mut [i8; N] = (&mut l[..N]).try_into().unwrap();
    let mut w = [0f32; N];
    for i in 0..N {
        w[i] = match qw {
            Some(q) => q[i],
            None => match rmse_type {
                1 => x[i] * x[i],
                2 => 1.0,
                3 => x[i].abs(),
                _ => x[i].abs().sqrt(),
            },
        };
    }
    let nmaxf = nmax as f32;
    let mut iscale = [0f32; QX_LANES];
    for (k, s) in iscale.iter_mut().enumerate() {
        let is = k as i32 - 9;
        *s = -(nmaxf + 0.1f32 * is as f32) / max;
    }
    iscale[9] = -nmaxf / max;
    let mut sumlx = [0f32; QX_LANES];
    let mut suml2 = [0f32; QX_LANES];
    let mut codes = [[0i8; QX_LANES]; N];
    for i in 0..N {
        // C: `sumlx += w*x[i]*l` is `(w*x[i])*l`, `suml2 += w*l*l` is `(w*l)*l`.
        let wx = w[i] * x[i];
        let wi = w[i];
        let xi = x[i];
        let c = &mut codes[i];
        for k in 0..QX_LANES {
            let li = (-nmax).max((nmax - 1).min(nearest_int(iscale[k] * xi)));
            c[k] = li as i8;
            let lf = li as f32;
            sumlx[k] += wx * lf;
            suml2[k] += wi * lf * lf;
        }
    }
    let mut best_k = 9;
    let mut scale = if suml2[9] != 0.0 { sumlx[9] / suml2[9] } else { 0.0 };
    let mut best = scale * sumlx[9];
    for k in 0..19 {
        if k == 9 {
            continue;
        }
        if suml2[k] > 0.0 && sumlx[k] * sumlx[k] > best * suml2[k] {
            best_k = k;
            scale = sumlx[k] / suml2[k];
            best = scale * sumlx[k];
        }
    }
    for i in 0..N {
        l[i] = (codes[i][best_k] as i32 + nmax) as i8;
    }
    scale
}

/// `make_q3_quants`: the Q3_K reference scale search.
pub fn make_q3_quants(n: usize, nmax: i32, x: &[f32], l: &mut [i8], do_rmse: bool) -> f32 {
    let mut max = 0f32;
    let mut amax = 0f32;
    for &xi in &x[..n] {
        let ax = xi.abs();
        if ax > amax {
            amax = ax;
            max = xi;
        }
    }
    if amax < GROUP_MAX_EPS {
        l[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    if do_rmse {
        let mut sumlx = 0f32;
        let mut suml2 = 0f32;
        for i in 0..n {
            let mut li = nearest_int(iscale * x[i]);
            li = (-nmax).max((nmax - 1).min(li));
            l[i] = li as i8;
            let w = x[i] * x[i];
            let lf = li as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        for _itry in 0..5 {
            let mut n_changed = 0;
            for i in 0..n {
                let w = x[i] * x[i];
                let li = l[i] as f32;
                let mut slx = sumlx - w * x[i] * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let mut new_l = nearest_int(x[i] * sl2 / slx);
                    new_l = (-nmax).max((nmax - 1).min(new_l));
                    if new_l != l[i] as i32 {
                        let nl = new_l as f32;
                        slx += w * x[i] * nl;
                        sl2 += w * nl * nl;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l[i] = new_l as i8;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for li in &mut l[..n] {
            *li = (*li as i32 + nmax) as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for i in 0..n {
        let mut li = nearest_int(iscale * x[i]);
        li = (-nmax).max((nmax - 1).min(li));
        l[i] = (li + nmax) as i8;
    }
    1.0 / iscale
}

/// `make_qkx2_quants`: asymmetric (scale, min) search used by the K-quant reference
/// quantizers. Returns the scale; writes `-min` to `the_min`.
#[allow(clippy::too_many_arguments)]
pub fn make_qkx2_quants(
    n: usize,
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    the_min: &mut f32,
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> f32 {
    make_qkx_quants_impl(n, nmax, x, Some(weights), l, the_min, laux, rmin, rdelta, nstep, use_mad, false)
}

/// `make_qkx3_quants`: like [`make_qkx2_quants`] but weights default to `x²` and an
/// all-equal group is detected with `max <= min`.
#[allow(clippy::too_many_arguments)]
pub fn make_qkx3_quants(
    n: usize,
    nmax: i32,
    x: &[f32],
    weights: Option<&[f32]>,
    l: &mut [u8],
    the_min: &mut f32,
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> f32 {
    make_qkx_quants_impl(n, nmax, x, weights, l, the_min, laux, rmin, rdelta, nstep, use_mad, true)
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn make_qkx_quants_impl(
    n: usize,
    nmax: i32,
    x: &[f32],
    weights: Option<&[f32]>,
    l: &mut [u8],
    the_min: &mut f32,
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
    qkx3: bool,
) -> f32 {
    if n == 32 && nstep >= 1 {
        return qkx_fixed::<32>(nmax, x, weights, l, the_min, laux, rmin, rdelta, nstep, use_mad, qkx3);
    }
    if n == 16 && nstep >= 1 {
        return qkx_fixed::<16>(nmax, x, weights, l, the_min, laux, rmin, rdelta, nstep, use_mad, qkx3);
    }
    let x = &x[..n];
    let w = |i: usize| -> f32 {
        match weights {
            Some(ws) => ws[i],
            None => x[i] * x[i],
        }
    };
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w(0);
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let wi = w(i);
        sum_w += wi;
        sum_x += wi * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    let degenerate = if qkx3 { max <= min } else { max == min };
    if degenerate {
        l[..n].fill(0);
        *the_min = -min;
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let li = nearest_int(iscale * (x[i] - min));
        l[i] = 0.max(nmax.min(li)) as u8;
        let mut diff = scale * l[i] as f32 + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += w(i) * diff;
    }
    if nstep < 1 {
        *the_min = -min;
        return scale;
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let mut sum_l = 0f32;
        let mut sum_l2 = 0f32;
        let mut sum_xl = 0f32;
        for i in 0..n {
            let mut li = nearest_int(iscale * (x[i] - min));
            li = 0.max(nmax.min(li));
            laux[i] = li as u8;
            let wi = w(i);
            let lf = li as f32;
            sum_l += wi * lf;
            sum_l2 += wi * lf * lf;
            sum_xl += wi * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let mut diff = this_scale * laux[i] as f32 + this_min - x[i];
                diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += w(i) * diff;
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    scale
}

/// `clamp(nearest_int(iscale * (x[i] - min)), 0, nmax)` for every element: the element-wise
/// part of the qkx searches, kept apart from the sequential sums so that it vectorizes.
#[inline(always)]
fn qkx_codes<const N: usize>(iscale: f32, min: f32, nmax: i32, x: &[f32; N], out: &mut [u8; N]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = 0.max(nmax.min(nearest_int(iscale * (v - min)))) as u8;
    }
}

/// `sum over i of w[i] * diff(scale * l[i] + min - x[i])` in C's order, where `diff` is
/// `|d|` (`use_mad`) or `d * d`: the products are formed element-wise first, then added
/// one after the other as the C loop does.
#[inline(always)]
fn qkx_error<const N: usize>(scale: f32, min: f32, x: &[f32; N], w: &[f32; N], l: &[u8; N], use_mad: bool) -> f32 {
    let mut e = [0f32; N];
    for i in 0..N {
        let mut diff = scale * l[i] as f32 + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        e[i] = w[i] * diff;
    }
    let mut err = 0f32;
    for &v in &e {
        err += v;
    }
    err
}

/// [`make_qkx_quants_impl`] for a group of exactly `N` (16 or 32) with `nstep >= 1`: the
/// same operations on the same values in the same order, restructured so that the
/// element-wise work runs on whole arrays, the trials run in lane groups
/// ([`qkx_lanes`]), and only the additions C does one by one stay one by one.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn qkx_fixed<const N: usize>(
    nmax: i32,
    x: &[f32],
    weights: Option<&[f32]>,
    l: &mut [u8],
    the_min: &mut f32,
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
    qkx3: bool,
) -> f32 {
    let x: &[f32; N] = x[..N].try_into().unwrap();
    let l: &mut [u8; N] = (&mut l[..N]).try_into().unwrap();
    let mut w = [0f32; N];
    match weights {
        Some(ws) => w.copy_from_slice(&ws[..N]),
        None => {
            for (w, &v) in w.iter_mut().zip(x) {
                *w = v * v;
            }
        }
    }
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..N {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    let degenerate = if qkx3 { max <= min } else { max == min };
    if degenerate {
        l.fill(0);
        *the_min = -min;
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    qkx_codes(iscale, min, nmax, x, l);
    let best_error = qkx_error(scale, min, x, &w, l, use_mad);
    qkx_lanes::<N>(
        nmax, x, &w, l, laux, rmin, rdelta, nstep, use_mad, sum_w, sum_x, max, &mut min, &mut scale, best_error,
    );
    *the_min = -min;
    scale
}

/// Trials per lane group in [`qkx_lanes`].
const QKX_G: usize = 4;

/// C's `nearest_int(t)` clamped to `[0, nmaxf]`, as a float: the same integer value for
/// every input. `val = t + 1.5·2^23` as in C; C's result is `(bits(val) & 0x7fffff) -
/// 0x400000`; with `m = bits(val) & 0x7fffff`, `from_bits(m | bits(2^23))` is exactly
/// `2^23 + m`, and subtracting `1.5·2^23` is exact (integers below 2^24), which gives
/// `m - 2^22`. C's `MIN`/`MAX` on these never-NaN values are the integer clamp.
#[inline(always)]
fn nearest_clamped_f32(t: f32, nmaxf: f32) -> f32 {
    let val = t + 12582912.0f32;
    let r = f32::from_bits((val.to_bits() & 0x007f_ffff) | 0x4b00_0000) - 12582912.0f32;
    // C: `MAX(0, MIN(nmax, l))`.
    let r = if r < nmaxf { r } else { nmaxf };
    if r > 0.0 {
        r
    } else {
        0.0
    }
}

/// Lane-wise `a[k] * b[k]`.
#[inline(always)]
fn lanes_mul<const G: usize>(a: [f32; G], b: [f32; G]) -> [f32; G] {
    std::array::from_fn(|k| a[k] * b[k])
}

/// Lane-wise `a[k] - b[k]`.
#[inline(always)]
fn lanes_sub<const G: usize>(a: [f32; G], b: [f32; G]) -> [f32; G] {
    std::array::from_fn(|k| a[k] - b[k])
}

/// Lane-wise `a[k] / b[k]`.
#[inline(always)]
fn lanes_div<const G: usize>(a: [f32; G], b: [f32; G]) -> [f32; G] {
    std::array::from_fn(|k| a[k] / b[k])
}

/// Lane-wise `a[k] + b[k]`.
#[inline(always)]
fn lanes_add<const G: usize>(a: [f32; G], b: [f32; G]) -> [f32; G] {
    std::array::from_fn(|k| a[k] + b[k])
}

/// The trial loop of `make_qkx2/3_quants` (`is = 0..=nstep`) in groups of [`QKX_G`]
/// trials computed side by side. A trial depends on the ones before it only through `min`
/// (and `max - min`), which changes when a trial is accepted; so a group is computed
/// with the current `min`, its accept tests run in C's order, and on the first accepted
/// trial the rest of the group is dropped and the next group starts right after it, with
/// the new `min`. Every lane adds its terms in C's order with C's operations, so each
/// trial's sums, scale, min and error are the C's bit for bit.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn qkx_lanes<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    w: &[f32; N],
    l: &mut [u8; N],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
    sum_w: f32,
    sum_x: f32,
    max: f32,
    min: &mut f32,
    scale: &mut f32,
    mut best_error: f32,
) {
    const G: usize = QKX_G;
    let nmaxf = nmax as f32;
    let mut lf = [[0f32; G]; N];
    // `x` and `w` broadcast once, so that the lane loops read them as whole vectors.
    let mut xb = [[0f32; G]; N];
    let mut wb = [[0f32; G]; N];
    for i in 0..N {
        xb[i] = [x[i]; G];
        wb[i] = [w[i]; G];
    }
    let mut is = 0i32;
    while is <= nstep {
        let mn = *min;
        let mut iscale = [0f32; G];
        for (k, s) in iscale.iter_mut().enumerate() {
            *s = (rmin + rdelta * (is + k as i32) as f32 + nmaxf) / (max - mn);
        }
        let mut sum_l = [0f32; G];
        let mut sum_l2 = [0f32; G];
        let mut sum_xl = [0f32; G];
        for i in 0..N {
            let xm = [x[i] - mn; G];
            let wi = wb[i];
            let xi = xb[i];
            let mut v = [0f32; G];
            for k in 0..G {
                v[k] = nearest_clamped_f32(iscale[k] * xm[k], nmaxf);
            }
            let a = lanes_mul(wi, v);
            sum_l = lanes_add(sum_l, a);
            sum_l2 = lanes_add(sum_l2, lanes_mul(a, v));
            sum_xl = lanes_add(sum_xl, lanes_mul(a, xi));
            lf[i] = v;
        }
        // C: `D = sum_w*sum_l2 - sum_l*sum_l`, `this_scale = (sum_w*sum_xl - sum_x*sum_l)/D`,
        // `this_min = (sum_l2*sum_x - sum_l*sum_xl)/D`, and if `this_min > 0`: `this_min = 0`,
        // `this_scale = sum_xl/sum_l2`; lanes with `D <= 0` are never accepted.
        let (sw, sx) = ([sum_w; G], [sum_x; G]);
        let d = lanes_sub(lanes_mul(sw, sum_l2), lanes_mul(sum_l, sum_l));
        let ts = lanes_div(lanes_sub(lanes_mul(sw, sum_xl), lanes_mul(sx, sum_l)), d);
        let tm = lanes_div(lanes_sub(lanes_mul(sum_l2, sx), lanes_mul(sum_l, sum_xl)), d);
        let ts0 = lanes_div(sum_xl, sum_l2);
        let this_min: [f32; G] = std::array::from_fn(|k| if tm[k] > 0.0 { 0.0 } else { tm[k] });
        let this_scale: [f32; G] = std::array::from_fn(|k| if tm[k] > 0.0 { ts0[k] } else { ts[k] });
        let mut cur_error = [0f32; G];
        for i in 0..N {
            let xi = x[i];
            let wi = w[i];
            for k in 0..G {
                let mut diff = this_scale[k] * lf[i][k] + this_min[k] - xi;
                diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error[k] += wi * diff;
            }
        }
        let last = (nstep - is) as usize;
        if last < G {
            for i in 0..N {
                laux[i] = lf[i][last] as u8;
            }
        }
        let mut next = is + G as i32;
        for k in 0..G.min(last + 1) {
            if d[k] > 0.0 && cur_error[k] < best_error {
                for i in 0..N {
                    l[i] = lf[i][k] as u8;
                }
                best_error = cur_error[k];
                *scale = this_scale[k];
                *min = this_min[k];
                next = is + k as i32 + 1;
                break;
            }
        }
        is = next;
    }
}

/// `make_qp_quants`: positive-only code search for the K-quants' sub-block scales
/// under importance weights.
pub fn make_qp_quants(n: usize, nmax: i32, x: &[f32], l: &mut [u8], quant_weights: &[f32]) -> f32 {
    let mut max = 0f32;
    for &xi in &x[..n] {
        max = c_max(max, xi);
    }
    if max < GROUP_MAX_EPS {
        l[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / max;
    for i in 0..n {
        l[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0f32;
    for i in 0..n {
        let diff = x[i] - scale * l[i] as f32;
        let w = quant_weights[i];
        best_mse += w * diff * diff;
    }
    for is in -4i32..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1f32 * is as f32 + nmaxf) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0f32;
        for i in 0..n {
            let li = nmax.min(nearest_int(iscale_is * x[i]));
            let diff = x[i] - scale_is * li as f32;
            let w = quant_weights[i];
            mse += w * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let li = nmax.min(nearest_int(iscale * x[i]));
        l[i] = li as u8;
        let w = quant_weights[i];
        let lf = li as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _itry in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = quant_weights[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nmax.min(nearest_int(x[i] * sl2 / slx));
                if new_l != l[i] as i32 {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// `get_scale_min_k4`: unpacks the 6-bit (scale, min) pair `j` of a Q4_K/Q5_K block.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Deterministic test inputs shared by the types' unit tests.
#[cfg(test)]
pub(crate) mod test_rng {
    /// xorshift32 values in [-1, 1] (`(x / u32::MAX - 0.5) * 2`), `n` of them.
    pub fn vec32(seed: u32, n: usize) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32 - 0.5) * 2.0
            })
            .collect()
    }

    /// An xorshift32 stream of values in [-1, 1] (`x / u32::MAX * 2 - 1`).
    pub fn xorshift32(seed: u32) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        }
    }

    /// An xorshift64 stream of 24-bit values in [-1, 1).
    pub fn xorshift64(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }

    /// Quantizes 64 blocks of 32 [`vec32`] values with `quantize`, decodes them with
    /// `dequantize`, and checks every element's error against `bound(block)`.
    pub fn assert_roundtrip(
        quantize: crate::QuantizeRefFn,
        dequantize: fn(&[u8], &mut [f32]),
        block_bytes: usize,
        bound: impl Fn(&[f32]) -> f32,
    ) {
        let x = vec32(7, 32 * 64);
        let mut q = vec![0u8; 64 * block_bytes];
        quantize(&x, &mut q);
        let mut y = vec![0f32; x.len()];
        dequantize(&q, &mut y);
        for (xb, yb) in x.chunks(32).zip(y.chunks(32)) {
            let limit = bound(xb);
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= limit, "{a} vs {b} (limit {limit})");
            }
        }
    }

    /// Quantizes three rows of 256 with an importance matrix twice (the results must be
    /// identical) and returns the decoded values' mean squared error.
    pub fn imatrix_mse(
        quantize_rows: crate::QuantizeRowsFn,
        dequantize: fn(&[u8], &mut [f32]),
        block_bytes: usize,
    ) -> f32 {
        let n = 256;
        let x = vec32(11, n * 3);
        let w: Vec<f32> = vec32(5, n).iter().map(|v| v.abs() + 0.1).collect();
        let mut a = vec![0u8; 3 * n / 32 * block_bytes];
        let mut b = vec![0u8; a.len()];
        quantize_rows(&x, &mut a, n, Some(&w));
        quantize_rows(&x, &mut b, n, Some(&w));
        assert_eq!(a, b, "the imatrix path is deterministic");
        let mut y = vec![0f32; x.len()];
        dequantize(&a, &mut y);
        x.iter().zip(&y).map(|(p, q)| (p - q) * (p - q)).sum::<f32>() / x.len() as f32
    }

    /// `n` bell-shaped values (sums of four [`xorshift64`] draws).
    pub fn gaussian(n: usize, seed: u64) -> Vec<f32> {
        let mut r = xorshift64(seed);
        (0..n).map(|_| (0..4).map(|_| r()).sum::<f32>()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-0.4), 0);
        assert_eq!(nearest_int(7.6), 8);
    }

    #[test]
    fn fp16_roundtrip_matches_half_on_finite_values() {
        for h in 0u16..=u16::MAX {
            let f = fp16_to_f32(h);
            let r = half::f16::from_bits(h).to_f32();
            if r.is_nan() {
                assert!(f.is_nan());
                continue;
            }
            assert_eq!(f.to_bits(), r.to_bits(), "h={h:#x}");
            assert_eq!(f32_to_fp16(f), h, "h={h:#x}");
        }
    }

    #[test]
    fn fp16_rounding_matches_half() {
        let mut s = 0x1234_5678u32;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let f = f32::from_bits(s);
            if f.is_nan() {
                assert_eq!(f32_to_fp16(f) & 0x7fff, 0x7E00);
                continue;
            }
            assert_eq!(f32_to_fp16(f), half::f16::from_f32(f).to_bits(), "f={f:e}");
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7fc0_0001)) & 0x7fc0, 0x7fc0);
    }
}
