//! What `gguf bench` reports beyond llama-bench's table: which kernel path each weight
//! type takes on this CPU (and when one falls to the generic dequantize path), how many
//! bytes of weights one decode token reads, and the machine's DRAM read bound at the
//! benchmark's thread count, measured by a stream-read loop of our own.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use gguf_format::{SplitGguf, TensorInfo};
use quant_kernels::registry::kernel_for;
use quant_kernels::{ops, Pool};

/// One weight type of a file and the kernel path its matrices take.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeUse {
    /// ggml type name (`q4_0`).
    pub type_name: String,
    /// Tensors of this type with two or more dimensions.
    pub tensors: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The kernel: backend, `+tile` when it has a many-token kernel, the load-time layout
    /// when some of these matrices are repacked; `generic-dequant` when no kernel exists.
    pub path: String,
}

/// The weights of one file, as decoding reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightReport {
    /// Per weight type, by name.
    pub types: Vec<TypeUse>,
    /// Bytes of weights one decode token reads: every tensor but the token embeddings (one
    /// row of which is read, unless they double as the output matrix), MoE expert tensors
    /// (`*_exps`) scaled by `expert_used_count / expert_count`.
    pub decode_bytes: u64,
}

impl WeightReport {
    /// The types that run the generic dequantize path.
    pub fn generic(&self) -> impl Iterator<Item = &TypeUse> {
        self.types.iter().filter(|t| t.path == GENERIC)
    }
}

const GENERIC: &str = "generic-dequant";

/// The report for `file` on this CPU (under `GGUF_CPU_FEATURES`, as the kernels are chosen).
pub fn weight_report(file: &SplitGguf) -> WeightReport {
    let md = file.metadata();
    let arch = md.get_str("general.architecture").unwrap_or("");
    let key = |k: &str| md.get_u64(&format!("{arch}.{k}"));
    let experts = key("expert_count").unwrap_or(0);
    let used = key("expert_used_count").unwrap_or(0);
    let tensors = file.tensors();
    let per_token = read_per_token(tensors);
    // (tensors, bytes, repacked matrices) per type id
    let mut per_type: BTreeMap<u32, (usize, u64, usize)> = BTreeMap::new();
    let mut decode = 0f64;
    for t in tensors.iter() {
        let bytes = t.size.unwrap_or(0);
        if per_token(t) {
            decode += if t.name.contains("_exps") && experts > 0 {
                bytes as f64 * used.min(experts) as f64 / experts as f64
            } else {
                bytes as f64
            };
        }
        if t.dims.len() < 2 {
            continue;
        }
        let e = per_type.entry(t.type_id).or_default();
        e.0 += 1;
        e.1 += bytes;
        let (cols, rows) = (t.dims[0] as usize, t.dims[1..].iter().product::<u64>() as usize);
        let repacked = kernel_for(t.type_id).and_then(|k| k.repack.as_ref()).is_some_and(|r| (r.applies)(rows, cols));
        e.2 += usize::from(repacked);
    }
    let types = per_type
        .into_iter()
        .map(|(id, (n, bytes, repacked))| {
            let type_name = ggml_quants::by_id(id).map(|t| t.name.to_string()).unwrap_or_else(|| format!("type {id}"));
            let path = match kernel_for(id) {
                None => GENERIC.to_string(),
                Some(k) => {
                    let mut p = k.backend.to_string();
                    if k.tile.is_some() {
                        p.push_str("+tile");
                    }
                    if let Some(r) = k.repack.as_ref().filter(|_| repacked > 0) {
                        p.push_str(&format!(", {} layout for {repacked} of {n}", r.name));
                    }
                    p
                }
            };
            TypeUse { type_name, tensors: n, bytes, path }
        })
        .collect();
    WeightReport { types, decode_bytes: decode as u64 }
}

/// The stream-read loop's buffer: 4 × the largest CPU cache (STREAM's rule, so that no
/// pass is served from the last-level cache — a 480 MiB L3 held part of a 512 MiB buffer
/// and gave 20–29 GB/s between runs), at least 512 MiB, at most a quarter of the memory
/// available; with the cache size found (Linux sysfs), if any.
pub fn dram_buffer_bytes() -> (usize, Option<u64>) {
    let llc = largest_cache();
    let want = llc.map_or(0, |c| c.saturating_mul(4)).max(512 << 20);
    let cap = mem_available().map_or(u64::MAX, |m| (m / 4).max(512 << 20));
    (want.min(cap) as usize, llc)
}

/// Bytes of the largest cache of CPU 0 (`/sys/devices/system/cpu/cpu0/cache/index*/size`).
fn largest_cache() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("size")).ok())
        .filter_map(|s| parse_size(s.trim()))
        .max()
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A sysfs cache size: `48K`, `2048K`, `480M`, or plain bytes.
fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// Prefetch distances the stream-read loop tries (bytes; 0: the hardware prefetcher alone).
/// On a Sapphire Rapids VM (2 threads, 1920 MiB of 4 KiB pages): 22 GB/s without software
/// prefetch, 27–29 GB/s with it, 8 KiB ahead best — and the one-token kernels prefetch too,
/// so a bound without it is no bound. Over 2 MiB pages the hardware prefetcher alone is
/// best there (31–34 GB/s).
const STREAM_PREFETCH: [usize; 4] = [0, 4 << 10, 8 << 10, 16 << 10];

/// Sequential read bandwidth in bytes per second over `bytes` (rounded to whole 2 MiB
/// chunks, at least one) with the threads of `pool`: the best of `passes` passes after one
/// that faults the pages in, without and with a software prefetch 4, 8 and 16 KiB ahead,
/// over a heap buffer (4 KiB pages where transparent huge pages are `madvise`-only) and
/// over an anonymous map advised `MADV_HUGEPAGE` (Linux): 2 MiB pages need one TLB entry
/// per 2 MiB, and the same VM reads them at 31–34 GB/s where it read 4 KiB pages at 26–29
/// — the bound is the best the memory gives, so both are tried, one after the other.
/// Each chunk is summed by [`quant_kernels::ops::stream_sum`] (eight independent
/// accumulators, so the loop is bound by memory, not by the adds).
pub fn dram_read_bound(pool: &Pool, bytes: usize, passes: usize) -> DramBound {
    const CHUNK: usize = 2 << 20;
    let n_chunks = bytes.div_ceil(CHUNK).max(1);
    let len = n_chunks * CHUNK;
    let fill = |buf: &mut [u8]| {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
    };
    let best_over = |buf: &[u8]| {
        let pieces: Vec<&[u8]> = buf.chunks(CHUNK).collect();
        len as f64 / best_pass(pool, &pieces, passes).0
    };
    let heap = {
        let mut buf = vec![0u8; len];
        fill(&mut buf);
        best_over(&buf)
    };
    let huge = memmap2::MmapMut::map_anon(len).ok().map(|mut map| {
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        fill(&mut map);
        best_over(&map)
    });
    DramBound { heap, huge }
}

/// The tensors one decode token reads ([`WeightReport::decode_bytes`]'s, MoE expert tensors
/// whole), as slices of the file's map.
fn decode_slices(file: &SplitGguf) -> Vec<&[u8]> {
    let per_token = read_per_token(file.tensors());
    file.tensors().iter().filter(|t| per_token(t)).filter_map(|t| file.tensor_data(t).ok()).collect()
}

/// Whether a decode token reads a tensor of `tensors` whole: all but the token embeddings
/// (one row of which is read), unless they double as the output matrix (no `output.weight`).
fn read_per_token(tensors: &[TensorInfo]) -> impl Fn(&TensorInfo) -> bool {
    let tied = !tensors.iter().any(|t| t.name == "output.weight");
    move |t| t.name != "token_embd.weight" || tied
}

/// Sequential read bandwidth in bytes per second over the weights' own pages: the
/// tensors one decode token reads, through the file's map, in pieces of at most 2 MiB
/// spread over `pool` — the best of `passes` passes (after one that maps the pages in),
/// without and with the software prefetch distances of [`dram_read_bound`]. The bound of
/// [`dram_read_bound`] is measured over memory allocated for it, which on a VM need not
/// read as fast as the pages that hold the model (one Zen 4 and one Zen 5 VM: a fresh
/// buffer read at either ~40 or ~65 GB/s from one process to the next); these are the
/// pages decode reads, unless the engine repacked a matrix into memory of its own (those
/// bytes are then read here from the file's pages). `None`: no weights over 64 MiB.
pub fn weights_read_bound(pool: &Pool, file: &SplitGguf, passes: usize) -> Option<f64> {
    let w = WeightPass::new(file)?;
    Some(w.total as f64 / best_pass(pool, &w.pieces, passes).0)
}

/// The weights one decode token reads, as pieces of at most 2 MiB of the file's map, for
/// timing stream-read passes over them ([`weights_read_bound`], and passes between decode
/// tokens).
pub struct WeightPass<'a> {
    pieces: Vec<&'a [u8]>,
    total: usize,
}

impl<'a> WeightPass<'a> {
    /// `None`: no weights over 64 MiB (a pass would be served from the caches).
    pub fn new(file: &'a SplitGguf) -> Option<Self> {
        const PIECE: usize = 2 << 20;
        let pieces: Vec<&[u8]> = decode_slices(file).into_iter().flat_map(|s| s.chunks(PIECE)).collect();
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        (total >= 64 << 20).then_some(WeightPass { pieces, total })
    }

    /// Seconds of one pass, a software prefetch `prefetch` bytes ahead (0: none).
    pub fn secs(&self, pool: &Pool, prefetch: usize) -> f64 {
        pass_secs(pool, &self.pieces, prefetch)
    }

    /// The prefetch distance (0, 4, 8 or 16 KiB) whose pass is fastest (three passes each, after
    /// one that maps the pages in).
    pub fn best_prefetch(&self, pool: &Pool) -> usize {
        best_pass(pool, &self.pieces, 3).1
    }
}

/// Seconds of one stream-read pass over `pieces` (one piece per item of `pool`).
fn pass_secs(pool: &Pool, pieces: &[&[u8]], prefetch: usize) -> f64 {
    let t = Instant::now();
    pool.for_each(pieces.len(), &|i| {
        black_box(ops::stream_sum(pieces[i], prefetch));
    });
    t.elapsed().as_secs_f64().max(1e-9)
}

/// Seconds of the fastest stream-read pass over `pieces` (one piece per item of `pool`),
/// and its prefetch distance: one pass first that maps the pages in, then `passes` passes
/// at each prefetch distance of [`STREAM_PREFETCH`].
fn best_pass(pool: &Pool, pieces: &[&[u8]], passes: usize) -> (f64, usize) {
    pass_secs(pool, pieces, 0);
    STREAM_PREFETCH
        .iter()
        .flat_map(|&pf| (0..passes.max(1)).map(move |_| pf))
        .map(|pf| (pass_secs(pool, pieces, pf), pf))
        .fold((f64::INFINITY, 0), |a, b| if b.0 < a.0 { b } else { a })
}

/// [`dram_read_bound`]'s measurements, bytes per second.
#[derive(Clone, Copy, Debug)]
pub struct DramBound {
    /// Over a heap buffer.
    pub heap: f64,
    /// Over an anonymous map advised `MADV_HUGEPAGE` (`None`: the map failed).
    pub huge: Option<f64>,
}

impl DramBound {
    /// The bound: the better of the two.
    pub fn best(&self) -> f64 {
        self.heap.max(self.huge.unwrap_or(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("491520K"), Some(480 << 20));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("x1M"), None);
    }

    #[test]
    fn the_buffer_is_at_least_512_mib_and_four_caches_when_memory_allows() {
        let (bytes, llc) = dram_buffer_bytes();
        assert!(bytes >= 512 << 20, "{bytes}");
        if let (Some(c), Some(m)) = (llc, mem_available()) {
            if c * 4 <= m / 4 {
                assert!(bytes as u64 >= 4 * c, "{bytes} for a {c}-byte cache");
            }
        }
    }

    /// The pages the weights' bound reads are the bytes [`weight_report`] counts per token
    /// (the embeddings only when they double as the output matrix); below 64 MiB of them
    /// there is no bound (the caches would hold them).
    #[test]
    fn the_weights_bound_reads_what_decode_reads() {
        let d = tempfile::tempdir().unwrap();
        for tied in [true, false] {
            let path = d.path().join(format!("w{tied}.gguf"));
            let mut w = gguf_format::GgufWriter::new();
            w.add_kv("general.architecture", "llama");
            w.add_tensor_owned("token_embd.weight", &[64, 32], 0, vec![1; 64 * 32 * 4]).unwrap();
            w.add_tensor_owned("blk.0.ffn_up.weight", &[64, 16], 0, vec![2; 64 * 16 * 4]).unwrap();
            w.add_tensor_owned("blk.0.attn_norm.weight", &[64], 0, vec![3; 64 * 4]).unwrap();
            if !tied {
                w.add_tensor_owned("output.weight", &[64, 8], 0, vec![4; 64 * 8 * 4]).unwrap();
            }
            w.write_to_path(&path).unwrap();
            let f = SplitGguf::open(&path).unwrap();
            let read: usize = decode_slices(&f).iter().map(|s| s.len()).sum();
            assert_eq!(read as u64, weight_report(&f).decode_bytes, "tied {tied}");
            let embd = 64 * 32 * 4;
            assert_eq!(read, if tied { embd } else { 64 * 8 * 4 } + 64 * 16 * 4 + 64 * 4, "tied {tied}");
            assert!(decode_slices(&f).iter().flat_map(|s| s.iter()).all(|&b| tied || b != 1));
            assert_eq!(weights_read_bound(&Pool::new(1), &f, 1), None);
        }
    }

    #[test]
    fn stream_loop_measures_a_positive_finite_rate() {
        let pool = Pool::new(2);
        let r = dram_read_bound(&pool, 8 << 20, 2);
        for v in [r.heap, r.huge.expect("an anonymous map")] {
            assert!(v.is_finite() && v > 1e8, "{r:?}");
        }
        assert_eq!(r.best(), r.heap.max(r.huge.unwrap()));
    }
}
