//! Sets of Unicode code points as sorted, disjoint, non-adjacent inclusive ranges: the
//! FIRST/FOLLOW sets of the GBNF analysis.

/// The largest code point.
pub(crate) const MAX_CHAR: u32 = 0x10FFFF;

/// A set of code points.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CharSet {
    ranges: Vec<(u32, u32)>,
}

impl CharSet {
    /// The empty set.
    pub(crate) fn new() -> CharSet {
        CharSet::default()
    }

    /// Every code point.
    pub(crate) fn all() -> CharSet {
        CharSet { ranges: vec![(0, MAX_CHAR)] }
    }

    /// The set of one code point.
    pub(crate) fn single(c: u32) -> CharSet {
        CharSet { ranges: vec![(c, c)] }
    }

    /// The set of `ranges` (in any order, possibly overlapping; empty ranges ignored).
    pub(crate) fn from_ranges(ranges: &[(u32, u32)]) -> CharSet {
        let mut s = CharSet::new();
        for &(lo, hi) in ranges {
            if lo <= hi {
                s.ranges.push((lo, hi.min(MAX_CHAR)));
            }
        }
        s.normalize();
        s
    }

    fn normalize(&mut self) {
        self.ranges.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(self.ranges.len());
        for &(lo, hi) in &self.ranges {
            match out.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        self.ranges = out;
    }

    /// The ranges, sorted and disjoint.
    pub(crate) fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges
    }

    /// Whether the set is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Adds `other` to `self`; true if `self` grew.
    pub(crate) fn union_with(&mut self, other: &CharSet) -> bool {
        if other.ranges.is_empty() {
            return false;
        }
        let before = self.ranges.clone();
        self.ranges.extend_from_slice(&other.ranges);
        self.normalize();
        self.ranges != before
    }

    /// The complement within `0..=MAX_CHAR`.
    pub(crate) fn complement(&self) -> CharSet {
        let mut out = Vec::new();
        let mut next = 0u32;
        for &(lo, hi) in &self.ranges {
            if lo > next {
                out.push((next, lo - 1));
            }
            next = hi.saturating_add(1);
        }
        if next <= MAX_CHAR {
            out.push((next, MAX_CHAR));
        }
        CharSet { ranges: out }
    }

    /// The first UTF-8 bytes of the code points in the set (surrogates included, which is
    /// harmless: it can only over-approximate).
    pub(crate) fn first_bytes(&self) -> [bool; 256] {
        let mut out = [false; 256];
        // (range start, range end, function from a code point to its first byte)
        type Segment = (u32, u32, fn(u32) -> u32);
        let segments: [Segment; 4] = [
            (0, 0x7F, |c| c),
            (0x80, 0x7FF, |c| 0xC0 | (c >> 6)),
            (0x800, 0xFFFF, |c| 0xE0 | (c >> 12)),
            (0x10000, MAX_CHAR, |c| 0xF0 | (c >> 18)),
        ];
        for &(lo, hi) in &self.ranges {
            for &(slo, shi, first) in &segments {
                let (a, b) = (lo.max(slo), hi.min(shi));
                if a <= b {
                    for byte in first(a)..=first(b) {
                        out[byte as usize] = true;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_merges_adjacent_and_overlapping_ranges() {
        let mut s = CharSet::from_ranges(&[(10, 20), (0, 3)]);
        assert!(s.union_with(&CharSet::from_ranges(&[(4, 9), (30, 40)])));
        assert_eq!(s.ranges(), &[(0, 20), (30, 40)]);
        assert!(!s.union_with(&CharSet::single(35)));
        assert_eq!(s.complement().ranges(), &[(21, 29), (41, MAX_CHAR)]);
        assert_eq!(CharSet::all().complement(), CharSet::new());
    }

    #[test]
    fn first_bytes_follow_utf8() {
        let fb = CharSet::from_ranges(&[('a' as u32, 'c' as u32), (0xE9, 0xE9), (0x3041, 0x309F)]).first_bytes();
        let set: Vec<usize> = (0..256).filter(|&b| fb[b]).collect();
        assert_eq!(set, vec![0x61, 0x62, 0x63, 0xC3, 0xE3]);
    }
}
