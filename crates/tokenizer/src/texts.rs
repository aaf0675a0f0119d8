//! Compact storage for the vocabulary's byte strings: every text end to end in one
//! buffer ([`Texts`]) and an id-by-text index that holds only ids ([`TextIndex`]).
//!
//! A vocabulary of 262,144 tokens (gemma 3) held as `Vec<Vec<u8>>` plus a
//! `HashMap<Vec<u8>, u32>` took about 42 MB, and its pieces another 14 MB: one heap
//! block per string and a second copy of every text as a key. Here the same data takes
//! the bytes themselves, four bytes of offset per string and five per index slot.

use std::hash::Hasher;

use hashbrown::HashTable;

use crate::hash::FxHasher;

/// Byte strings stored end to end; string `i` is `bytes[ends[i - 1]..ends[i]]`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Texts {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Texts {
    /// Room for `n` strings of `bytes` bytes in all.
    pub(crate) fn with_capacity(n: usize, bytes: usize) -> Texts {
        Texts { bytes: Vec::with_capacity(bytes), ends: Vec::with_capacity(n) }
    }

    /// Appends a string; `None` once the buffer would pass 4 GiB (its offsets are `u32`).
    pub(crate) fn push(&mut self, s: &[u8]) -> Option<()> {
        let end = u32::try_from(self.bytes.len() + s.len()).ok()?;
        self.bytes.extend_from_slice(s);
        self.ends.push(end);
        Some(())
    }

    /// String `i`.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// Bytes of all the strings.
    pub(crate) fn total_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Number of strings.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Frees the spare capacity.
    pub(crate) fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

#[inline]
fn hash(s: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(s);
    h.finish()
}

/// The id of each string of a [`Texts`], looked up by its bytes; the table stores ids
/// only and compares through the `Texts` it indexes.
#[derive(Debug, Default)]
pub(crate) struct TextIndex {
    table: HashTable<u32>,
}

impl TextIndex {
    /// An index with room for `n` ids.
    pub(crate) fn with_capacity(n: usize) -> TextIndex {
        TextIndex { table: HashTable::with_capacity(n) }
    }

    /// Adds id `id` (string `id` of `texts`); `Err(other)` when its text is already
    /// indexed as `other`.
    pub(crate) fn insert(&mut self, texts: &Texts, id: u32) -> Result<(), u32> {
        let s = texts.get(id as usize);
        let h = hash(s);
        if let Some(&other) = self.table.find(h, |&j| texts.get(j as usize) == s) {
            return Err(other);
        }
        self.table.insert_unique(h, id, |&j| hash(texts.get(j as usize)));
        Ok(())
    }

    /// The id whose text is `s`.
    #[inline]
    pub(crate) fn get(&self, texts: &Texts, s: &[u8]) -> Option<u32> {
        self.table.find(hash(s), |&j| texts.get(j as usize) == s).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_come_back_and_index_finds_them() {
        let words: Vec<Vec<u8>> = (0..5000u32).map(|i| format!("w{i}").into_bytes()).chain([vec![]]).collect();
        let mut t = Texts::default();
        let mut ix = TextIndex::with_capacity(words.len());
        for (i, w) in words.iter().enumerate() {
            t.push(w).unwrap();
            ix.insert(&t, i as u32).unwrap();
        }
        assert_eq!(t.len(), words.len());
        for (i, w) in words.iter().enumerate() {
            assert_eq!(t.get(i), &w[..]);
            assert_eq!(ix.get(&t, w), Some(i as u32));
        }
        assert_eq!(ix.get(&t, b"w5000"), None);
        // a repeated text is refused and names the first id
        t.push(b"w17").unwrap();
        assert_eq!(ix.insert(&t, t.len() as u32 - 1), Err(17));
    }
}
