//! The random numbers llama.cpp's samplers draw: `std::mt19937` and the libstdc++ (GCC 12)
//! distributions on top of it, bit for bit.
//!
//! - [`Mt19937`]: the standard 32-bit Mersenne Twister (`std::mt19937`, seeded with one
//!   `uint32_t` as `std::mt19937(seed)` does).
//! - [`canonical_f64`] / [`canonical_f32`]: libstdc++'s `std::generate_canonical<T, digits>`,
//!   which `std::uniform_real_distribution<T>(0, 1)` returns unchanged (`r * (1 - 0) + 0`):
//!   two draws for a double (`(g1 + g2·2³²) / 2⁶⁴`), one for a float (`float(g) / 2³²`), and a
//!   result that rounds up to 1 replaced by the largest value below 1.
//! - [`discrete`]: `std::discrete_distribution<int>` built from float weights and drawn once
//!   (`_M_initialize`: double sum, normalised, partial sums with the last forced to 1, then
//!   `lower_bound` of one canonical double; fewer than two weights draw nothing and give 0).

/// `LLAMA_DEFAULT_SEED`: "pick a random seed" (llama.h).
pub const DEFAULT_SEED: u32 = 0xFFFF_FFFF;

/// llama-sampler.cpp's `get_rng_seed`: [`DEFAULT_SEED`] becomes a random seed, any other
/// value is used as is.
pub fn resolve_seed(seed: u32) -> u32 {
    if seed == DEFAULT_SEED {
        rand::random::<u32>()
    } else {
        seed
    }
}

const N: usize = 624;
const M: usize = 397;

/// `std::mt19937`.
#[derive(Clone)]
pub struct Mt19937 {
    mt: [u32; N],
    idx: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").field("idx", &self.idx).finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// `std::mt19937(seed)`.
    pub fn new(seed: u32) -> Mt19937 {
        let mut mt = [0u32; N];
        mt[0] = seed;
        for i in 1..N {
            let prev = mt[i - 1];
            mt[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        Mt19937 { mt, idx: N }
    }

    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const A: u32 = 0x9908_b0df;
        for i in 0..N {
            let y = (self.mt[i] & UPPER) | (self.mt[(i + 1) % N] & LOWER);
            self.mt[i] = self.mt[(i + M) % N] ^ (y >> 1) ^ if y & 1 != 0 { A } else { 0 };
        }
        self.idx = 0;
    }

    /// The next output (`operator()`).
    pub fn next_u32(&mut self) -> u32 {
        if self.idx >= N {
            self.twist();
        }
        let mut y = self.mt[self.idx];
        self.idx += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }
}

/// `std::uniform_real_distribution<double>(0, 1)(rng)` as libstdc++ computes it.
pub fn canonical_f64(rng: &mut Mt19937) -> f64 {
    const R: f64 = 4_294_967_296.0;
    let mut sum = rng.next_u32() as f64;
    sum += rng.next_u32() as f64 * R;
    let ret = sum / (R * R);
    if ret >= 1.0 {
        // std::nextafter(1.0, 0.0)
        f64::from_bits(1.0f64.to_bits() - 1)
    } else {
        ret
    }
}

/// `std::uniform_real_distribution<float>(0, 1)(rng)` as libstdc++ computes it.
pub fn canonical_f32(rng: &mut Mt19937) -> f32 {
    let ret = rng.next_u32() as f32 / 4_294_967_296.0f32;
    if ret >= 1.0 {
        f32::from_bits(1.0f32.to_bits() - 1)
    } else {
        ret
    }
}

/// `std::discrete_distribution<int>(weights.begin(), weights.end())(rng)` (libstdc++).
pub fn discrete(weights: impl ExactSizeIterator<Item = f32>, rng: &mut Mt19937) -> usize {
    if weights.len() < 2 {
        return 0;
    }
    let prob: Vec<f64> = weights.map(f64::from).collect();
    let sum: f64 = prob.iter().fold(0.0, |a, &p| a + p);
    let mut cp = Vec::with_capacity(prob.len());
    let mut acc = 0.0f64;
    for (i, &p) in prob.iter().enumerate() {
        let q = p / sum;
        acc = if i == 0 { q } else { acc + q };
        cp.push(acc);
    }
    let last = cp.len() - 1;
    cp[last] = 1.0;
    let p = canonical_f64(rng);
    // std::lower_bound: the first position whose value is not less than p
    cp.partition_point(|&c| c < p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_standard() {
        // [rand.predef]: the 10000th consecutive invocation of a default-constructed
        // mt19937 (seed 5489) produces 4123659995.
        let mut g = Mt19937::new(5489);
        let mut v = 0;
        for _ in 0..10_000 {
            v = g.next_u32();
        }
        assert_eq!(v, 4_123_659_995);
    }

    #[test]
    fn canonical_values_lie_in_the_unit_interval_and_use_two_draws_for_a_double() {
        let mut a = Mt19937::new(42);
        let mut b = Mt19937::new(42);
        for _ in 0..1000 {
            let x = canonical_f64(&mut a);
            assert!((0.0..1.0).contains(&x));
            let (g1, g2) = (b.next_u32() as f64, b.next_u32() as f64);
            assert_eq!(x, (g1 + g2 * 4_294_967_296.0) / 18_446_744_073_709_551_616.0);
            let y = canonical_f32(&mut a);
            assert!((0.0..1.0).contains(&y));
            b.next_u32();
        }
    }

    #[test]
    fn discrete_follows_the_weights_and_skips_the_draw_for_one_weight() {
        let mut g = Mt19937::new(1);
        let before = g.clone().next_u32();
        assert_eq!(discrete([3.0f32].into_iter(), &mut g), 0);
        assert_eq!(g.next_u32(), before, "a single weight draws nothing");
        let mut counts = [0usize; 3];
        for _ in 0..30_000 {
            counts[discrete([1.0f32, 0.0, 3.0].into_iter(), &mut g)] += 1;
        }
        assert_eq!(counts[1], 0);
        let ratio = counts[2] as f64 / counts[0] as f64;
        assert!((2.7..3.3).contains(&ratio), "{counts:?}");
    }
}
