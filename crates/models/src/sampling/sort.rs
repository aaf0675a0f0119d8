//! The orderings llama.cpp's samplers produce, tie for tie.
//!
//! `std::sort` and `std::partial_sort` are not stable: which of two equal logits comes
//! first (and so which survives a top-k cut, or where a cumulative sum crosses a
//! threshold) depends on the algorithm. These are ports of libstdc++'s (GCC 12,
//! `bits/stl_algo.h` / `bits/stl_heap.h`): introsort (median-of-three, depth limit
//! 2·⌊log₂ n⌋, heapsort fallback, final insertion sort with threshold 16) and heap-select
//! partial sort. The "unguarded" loops are bounds-checked here, which changes nothing for a
//! strict weak order (where libstdc++'s sentinels hold) and cannot run off the slice for
//! anything else.
//!
//! On top of them, llama-sampler.cpp's helpers: the 128-bucket partial sort
//! (`llama_token_data_array_partial_sort`), `..._partial_sort_inplace`, and the shared
//! `softmax` / `top_k` / `temp` implementations.

use super::{Candidates, TokenData};

const THRESHOLD: usize = 16;

fn lg(n: usize) -> usize {
    (usize::BITS - 1 - n.leading_zeros()) as usize
}

/// `std::sort(v.begin(), v.end(), less)`.
pub fn sort_by<T: Copy>(v: &mut [T], less: &mut impl FnMut(&T, &T) -> bool) {
    if v.is_empty() {
        return;
    }
    introsort_loop(v, 0, v.len(), 2 * lg(v.len()), less);
    final_insertion_sort(v, 0, v.len(), less);
}

/// `std::partial_sort(v.begin(), v.begin() + middle, v.end(), less)`.
pub fn partial_sort_by<T: Copy>(v: &mut [T], middle: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    heap_select(v, 0, middle, v.len(), less);
    sort_heap(v, 0, middle, less);
}

fn introsort_loop<T: Copy>(
    v: &mut [T],
    first: usize,
    mut last: usize,
    mut depth: usize,
    less: &mut impl FnMut(&T, &T) -> bool,
) {
    while last - first > THRESHOLD {
        if depth == 0 {
            heap_select(v, first, last, last, less);
            sort_heap(v, first, last, less);
            return;
        }
        depth -= 1;
        let cut = unguarded_partition_pivot(v, first, last, less);
        introsort_loop(v, cut, last, depth, less);
        last = cut;
    }
}

fn move_median_to_first<T: Copy>(
    v: &mut [T],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    less: &mut impl FnMut(&T, &T) -> bool,
) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn unguarded_partition<T: Copy>(
    v: &mut [T],
    mut first: usize,
    mut last: usize,
    pivot: usize,
    less: &mut impl FnMut(&T, &T) -> bool,
) -> usize {
    loop {
        while first < v.len() && less(&v[first], &v[pivot]) {
            first += 1;
        }
        if last == 0 {
            return first;
        }
        last -= 1;
        while last > 0 && less(&v[pivot], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn unguarded_partition_pivot<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    less: &mut impl FnMut(&T, &T) -> bool,
) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(v, first, first + 1, mid, last - 1, less);
    unguarded_partition(v, first + 1, last, first, less)
}

fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut last: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    let val = v[last];
    while last > 0 && less(&val, &v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = val;
}

fn insertion_sort<T: Copy>(v: &mut [T], first: usize, last: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    if first == last {
        return;
    }
    for i in first + 1..last {
        if less(&v[i], &v[first]) {
            let val = v[i];
            v.copy_within(first..i, first + 1);
            v[first] = val;
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn final_insertion_sort<T: Copy>(v: &mut [T], first: usize, last: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    if last - first > THRESHOLD {
        insertion_sort(v, first, first + THRESHOLD, less);
        for i in first + THRESHOLD..last {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, first, last, less);
    }
}

// stl_heap.h, with `first` as an offset and signed distances as libstdc++ uses them.

fn push_heap<T: Copy>(
    v: &mut [T],
    first: usize,
    mut hole: isize,
    top: isize,
    value: T,
    less: &mut impl FnMut(&T, &T) -> bool,
) {
    let mut parent = (hole - 1) / 2;
    while hole > top && less(&v[first + parent as usize], &value) {
        v[first + hole as usize] = v[first + parent as usize];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    v[first + hole as usize] = value;
}

fn adjust_heap<T: Copy>(
    v: &mut [T],
    first: usize,
    mut hole: isize,
    len: isize,
    value: T,
    less: &mut impl FnMut(&T, &T) -> bool,
) {
    let top = hole;
    let mut second = hole;
    while second < (len - 1) / 2 {
        second = 2 * (second + 1);
        if less(&v[first + second as usize], &v[first + (second - 1) as usize]) {
            second -= 1;
        }
        v[first + hole as usize] = v[first + second as usize];
        hole = second;
    }
    if (len & 1) == 0 && second == (len - 2) / 2 {
        second = 2 * (second + 1);
        v[first + hole as usize] = v[first + (second - 1) as usize];
        hole = second - 1;
    }
    push_heap(v, first, hole, top, value, less);
}

fn pop_heap<T: Copy>(v: &mut [T], first: usize, last: usize, result: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    let value = v[result];
    v[result] = v[first];
    adjust_heap(v, first, 0, (last - first) as isize, value, less);
}

fn make_heap<T: Copy>(v: &mut [T], first: usize, last: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    if last - first < 2 {
        return;
    }
    let len = (last - first) as isize;
    let mut parent = (len - 2) / 2;
    loop {
        let value = v[first + parent as usize];
        adjust_heap(v, first, parent, len, value, less);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

fn heap_select<T: Copy>(v: &mut [T], first: usize, middle: usize, last: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    make_heap(v, first, middle, less);
    for i in middle..last {
        if less(&v[i], &v[first]) {
            pop_heap(v, first, middle, i, less);
        }
    }
}

fn sort_heap<T: Copy>(v: &mut [T], first: usize, mut last: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    while last - first > 1 {
        last -= 1;
        pop_heap(v, first, last, last, less);
    }
}

/// llama.cpp's comparator: larger logit first.
fn by_logit(a: &TokenData, b: &TokenData) -> bool {
    a.logit > b.logit
}

/// C's `(int)x` for a float as x86-64 computes it (`cvttss2si`): truncation, and
/// `INT_MIN` for NaN and anything out of range (Rust's `as` saturates instead).
pub fn c_int(x: f32) -> i32 {
    if x.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// `llama_token_data_array_partial_sort`: the top `npartial` of `cur` (by logit) into the
/// front of `res`, through 128 buckets over [-10, 10]; `cur` is not changed.
pub fn bucket_partial_sort(cur: &[TokenData], npartial: usize, res: &mut Vec<TokenData>) {
    const NBUCKETS: i32 = 128;
    const SCALE: f32 = NBUCKETS as f32 / (10.0f32 - -10.0f32);
    const INTER: f32 = 10.0f32 * SCALE;
    let mut bucket_idx = Vec::with_capacity(cur.len());
    let mut histo = [0usize; NBUCKETS as usize];
    for t in cur {
        let ib = c_int(SCALE * t.logit + INTER).clamp(0, NBUCKETS - 1);
        bucket_idx.push(ib as usize);
        histo[ib as usize] += 1;
    }
    let mut nhave = 0;
    let mut ib = NBUCKETS as usize - 1;
    loop {
        nhave += histo[ib];
        if nhave >= npartial || ib == 0 {
            break;
        }
        ib -= 1;
    }
    res.clear();
    res.resize(nhave, TokenData { id: 0, logit: 0.0, p: 0.0 });
    // start of each kept bucket, highest bucket first
    let mut ptrs = [0usize; NBUCKETS as usize];
    let mut at = 0;
    for j in (ib..NBUCKETS as usize).rev() {
        ptrs[j] = at;
        at += histo[j];
    }
    for (t, &j) in cur.iter().zip(&bucket_idx) {
        if j >= ib {
            res[ptrs[j]] = *t;
            ptrs[j] += 1;
        }
    }
    let mut at = 0;
    let mut ndone = 0;
    for j in (ib + 1..NBUCKETS as usize).rev() {
        sort_by(&mut res[at..at + histo[j]], &mut by_logit);
        at += histo[j];
        ndone += histo[j];
    }
    partial_sort_by(&mut res[at..at + histo[ib]], npartial - ndone, &mut by_logit);
}

/// `llama_token_data_array_partial_sort_inplace`: keeps the top `npartial`, sorted.
pub fn partial_sort_inplace(cur: &mut Candidates, npartial: usize) {
    if npartial <= 128 {
        partial_sort_by(&mut cur.data, npartial, &mut by_logit);
    } else {
        let mut tmp = Vec::new();
        bucket_partial_sort(&cur.data, npartial, &mut tmp);
        cur.data[..npartial].copy_from_slice(&tmp[..npartial]);
    }
    cur.data.truncate(npartial);
    cur.sorted = true;
}

/// `llama_sampler_softmax_impl`: probabilities from the logits (sorted first if asked).
pub fn softmax(cur: &mut Candidates, do_sort: bool) {
    assert!(!cur.data.is_empty(), "softmax of no candidates");
    if do_sort && !cur.sorted {
        let n = cur.data.len();
        partial_sort_inplace(cur, n);
    }
    let mut max_l = cur.data[0].logit;
    if !cur.sorted {
        for t in &cur.data[1..] {
            max_l = cpp_max(max_l, t.logit);
        }
    }
    let mut cum_sum = 0.0f32;
    for t in &mut cur.data {
        let p = (t.logit - max_l).exp();
        t.p = p;
        cum_sum += p;
    }
    for t in &mut cur.data {
        t.p /= cum_sum;
    }
}

/// `std::max(a, b)`: `(a < b) ? b : a`.
pub fn cpp_max(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

/// `llama_sampler_top_k_impl`.
pub fn top_k(cur: &mut Candidates, k: i32) {
    if k <= 0 {
        return;
    }
    let k = (k as usize).min(cur.data.len());
    if !cur.sorted {
        partial_sort_inplace(cur, k);
    }
    cur.data.truncate(k);
}

/// `llama_sampler_temp_impl`: divide by `temp`; at `temp ≤ 0` keep the first largest
/// logit and set every other to -inf.
pub fn temp(cur: &mut Candidates, temp: f32) {
    if cur.data.is_empty() {
        return;
    }
    if temp <= 0.0 {
        let mut max_i = 0;
        let mut max_l = cur.data[0].logit;
        for i in 1..cur.data.len() {
            if cur.data[i].logit > max_l {
                cur.data[max_i].logit = f32::NEG_INFINITY;
                max_i = i;
                max_l = cur.data[i].logit;
            } else {
                cur.data[i].logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    for t in &mut cur.data {
        t.logit /= temp;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }

    #[test]
    fn sort_and_partial_sort_order_like_a_reference_sort() {
        let mut s = 7u64;
        for n in [0usize, 1, 2, 5, 16, 17, 33, 100, 1000] {
            for _ in 0..20 {
                let v: Vec<u32> = (0..n).map(|_| (lcg(&mut s) % 50) as u32).collect();
                let mut a = v.clone();
                sort_by(&mut a, &mut |x, y| x < y);
                let mut want = v.clone();
                want.sort();
                assert_eq!(a, want);
                let mid = if n == 0 { 0 } else { (lcg(&mut s) as usize) % (n + 1) };
                let mut b = v.clone();
                partial_sort_by(&mut b, mid, &mut |x, y| x > y);
                let mut desc = v.clone();
                desc.sort_by(|x, y| y.cmp(x));
                assert_eq!(b[..mid], desc[..mid]);
                let mut rest = b.clone();
                rest.sort();
                assert_eq!(rest, want, "a permutation");
            }
        }
    }

    #[test]
    fn bucket_partial_sort_keeps_the_top_in_order() {
        let mut s = 11u64;
        let cur: Vec<TokenData> =
            (0..5000).map(|i| TokenData { id: i, logit: (lcg(&mut s) % 4000) as f32 / 100.0 - 20.0, p: 0.0 }).collect();
        let mut res = Vec::new();
        bucket_partial_sort(&cur, 300, &mut res);
        let mut want: Vec<f32> = cur.iter().map(|t| t.logit).collect();
        want.sort_by(|a, b| b.total_cmp(a));
        let got: Vec<f32> = res[..300].iter().map(|t| t.logit).collect();
        assert_eq!(got, want[..300]);
    }

    #[test]
    fn c_int_is_x86_truncation() {
        assert_eq!(c_int(3.9), 3);
        assert_eq!(c_int(-3.9), -3);
        assert_eq!(c_int(f32::INFINITY), i32::MIN);
        assert_eq!(c_int(f32::NAN), i32::MIN);
        assert_eq!(c_int(-1e20), i32::MIN);
    }
}
