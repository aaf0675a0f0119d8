//! A small, fast non-cryptographic hasher (the Fx hash of rustc) for the vocabulary
//! maps; keys are token texts and pairs of ids, not attacker-chosen at scale.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Fx hasher state.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

const K: u64 = 0xf1357aea2e62a9c5;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(26) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let r = chunks.remainder();
        if !r.is_empty() {
            let mut buf = [0u8; 8];
            buf[..r.len()].copy_from_slice(r);
            self.add(u64::from_le_bytes(buf) ^ ((r.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits and a tag from the top 7: move
        // the best-mixed (high) bits of the last multiply down, as rustc-hash 2 does
        self.0.rotate_left(26)
    }
}

/// A `HashMap` with [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
