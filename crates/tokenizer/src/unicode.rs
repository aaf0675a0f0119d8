//! Unicode helpers with llama.cpp's semantics: its lenient UTF-8 decoder (invalid bytes
//! become U+FFFD one byte at a time), its per-codepoint category flags (from the same
//! tables, `unicode_data.rs`), lowercase map, single-codepoint NFD and the GPT-2 byte
//! ↔ unicode mapping.

use std::sync::OnceLock;

use crate::unicode_data::{MAP_LOWERCASE, MAP_UPPERCASE, RANGES_FLAGS, RANGES_NFD, WHITESPACE};

/// Number of codepoints covered by the flag table.
pub const MAX_CODEPOINTS: u32 = 0x110000;

/// Category and helper flags of one codepoint (llama.cpp's `unicode_cpt_flags`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags(pub u16);

#[allow(missing_docs)]
impl Flags {
    pub const UNDEFINED: u16 = 0x0001;
    pub const NUMBER: u16 = 0x0002;
    pub const LETTER: u16 = 0x0004;
    pub const SEPARATOR: u16 = 0x0008;
    pub const ACCENT_MARK: u16 = 0x0010;
    pub const PUNCTUATION: u16 = 0x0020;
    pub const SYMBOL: u16 = 0x0040;
    pub const CONTROL: u16 = 0x0080;
    pub const MASK_CATEGORIES: u16 = 0x00FF;
    pub const WHITESPACE: u16 = 0x0100;
    pub const LOWERCASE: u16 = 0x0200;
    pub const UPPERCASE: u16 = 0x0400;
    pub const NFD: u16 = 0x0800;

    #[inline]
    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    #[inline]
    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    #[inline]
    pub fn is_separator(self) -> bool {
        self.0 & Self::SEPARATOR != 0
    }
    #[inline]
    pub fn is_accent_mark(self) -> bool {
        self.0 & Self::ACCENT_MARK != 0
    }
    #[inline]
    pub fn is_punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }
    #[inline]
    pub fn is_symbol(self) -> bool {
        self.0 & Self::SYMBOL != 0
    }
    #[inline]
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }
    #[inline]
    pub fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    #[inline]
    pub fn category(self) -> u16 {
        self.0 & Self::MASK_CATEGORIES
    }
}

fn flag_table() -> &'static [u16] {
    static TABLE: OnceLock<Vec<u16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = vec![Flags::UNDEFINED; MAX_CODEPOINTS as usize];
        for w in RANGES_FLAGS.windows(2) {
            let (start, flags) = w[0];
            let end = w[1].0.min(MAX_CODEPOINTS);
            for slot in &mut t[start as usize..end as usize] {
                *slot = flags;
            }
        }
        for &c in WHITESPACE {
            t[c as usize] |= Flags::WHITESPACE;
        }
        for &(_, lo) in MAP_LOWERCASE {
            if lo < MAX_CODEPOINTS {
                t[lo as usize] |= Flags::LOWERCASE;
            }
        }
        for &(_, up) in MAP_UPPERCASE {
            if up < MAX_CODEPOINTS {
                t[up as usize] |= Flags::UPPERCASE;
            }
        }
        for &(_, _, nfd) in RANGES_NFD {
            if nfd < MAX_CODEPOINTS {
                t[nfd as usize] |= Flags::NFD;
            }
        }
        t
    })
}

/// Flags of a codepoint; beyond the table, `UNDEFINED` (as llama.cpp).
#[inline]
pub fn flags(cpt: u32) -> Flags {
    let t = flag_table();
    Flags(t.get(cpt as usize).copied().unwrap_or(Flags::UNDEFINED))
}

/// Lowercase of a codepoint (simple mapping), or the codepoint itself.
pub fn to_lower(cpt: u32) -> u32 {
    match MAP_LOWERCASE.binary_search_by_key(&cpt, |p| p.0) {
        Ok(i) => MAP_LOWERCASE[i].1,
        Err(_) => cpt,
    }
}

/// llama.cpp's one-codepoint NFD: the base character of a precomposed codepoint.
pub fn nfd(cpt: u32) -> u32 {
    let i = RANGES_NFD.partition_point(|r| r.0 <= cpt);
    if i == 0 {
        return cpt;
    }
    let (first, last, base) = RANGES_NFD[i - 1];
    if first <= cpt && cpt <= last {
        base
    } else {
        cpt
    }
}

/// Whether `cpt` is a Han (CJK) character (llama.cpp's `unicode_cpt_is_han`).
pub fn is_han(cpt: u32) -> bool {
    matches!(cpt,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF | 0x2CEB0..=0x2EBEF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

/// Length of a UTF-8 sequence from its first byte (llama.cpp's `unicode_len_utf8`).
#[inline]
pub fn len_utf8(b: u8) -> usize {
    const LOOKUP: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[(b >> 4) as usize]
}

/// Decodes one codepoint at `*off`; `None` where llama.cpp throws "invalid character".
#[inline]
pub fn cpt_from_utf8(s: &[u8], off: &mut usize) -> Option<u32> {
    let o = *off;
    let b0 = s[o] as u32;
    if b0 & 0x80 == 0 {
        *off += 1;
        return Some(b0);
    }
    if b0 & 0x40 == 0 {
        return None;
    }
    let cont = |i: usize| o + i < s.len() && s[o + i] & 0xc0 == 0x80;
    if b0 & 0x20 == 0 {
        if !cont(1) {
            return None;
        }
        *off += 2;
        return Some(((b0 & 0x1f) << 6) | (s[o + 1] as u32 & 0x3f));
    }
    if b0 & 0x10 == 0 {
        if !(cont(1) && cont(2)) {
            return None;
        }
        *off += 3;
        return Some(((b0 & 0x0f) << 12) | ((s[o + 1] as u32 & 0x3f) << 6) | (s[o + 2] as u32 & 0x3f));
    }
    if b0 & 0x08 == 0 {
        if !(cont(1) && cont(2) && cont(3)) {
            return None;
        }
        *off += 4;
        return Some(
            ((b0 & 0x07) << 18)
                | ((s[o + 1] as u32 & 0x3f) << 12)
                | ((s[o + 2] as u32 & 0x3f) << 6)
                | (s[o + 3] as u32 & 0x3f),
        );
    }
    None
}

/// Decodes bytes to codepoints; each invalid byte becomes U+FFFD (llama.cpp's
/// `unicode_cpts_from_utf8`).
pub fn cpts_from_utf8(s: &[u8]) -> Vec<u32> {
    let mut out = Vec::with_capacity(s.len());
    let mut off = 0;
    while off < s.len() {
        match cpt_from_utf8(s, &mut off) {
            Some(c) => out.push(c),
            None => {
                off += 1;
                out.push(0xFFFD);
            }
        }
    }
    out
}

/// Appends the UTF-8 encoding of `cpt`; `false` for a codepoint above U+10FFFF (which
/// llama.cpp refuses with an exception).
#[inline]
pub fn push_utf8(out: &mut Vec<u8>, cpt: u32) -> bool {
    if cpt <= 0x7f {
        out.push(cpt as u8);
    } else if cpt <= 0x7ff {
        out.extend_from_slice(&[0xc0 | ((cpt >> 6) & 0x1f) as u8, 0x80 | (cpt & 0x3f) as u8]);
    } else if cpt <= 0xffff {
        out.extend_from_slice(&[
            0xe0 | ((cpt >> 12) & 0x0f) as u8,
            0x80 | ((cpt >> 6) & 0x3f) as u8,
            0x80 | (cpt & 0x3f) as u8,
        ]);
    } else if cpt <= 0x10ffff {
        out.extend_from_slice(&[
            0xf0 | ((cpt >> 18) & 0x07) as u8,
            0x80 | ((cpt >> 12) & 0x3f) as u8,
            0x80 | ((cpt >> 6) & 0x3f) as u8,
            0x80 | (cpt & 0x3f) as u8,
        ]);
    } else {
        return false;
    }
    true
}

/// GPT-2's byte → codepoint table (printable bytes map to themselves, the rest to
/// U+0100…).
pub fn byte_to_cpt_table() -> &'static [u32; 256] {
    static T: OnceLock<[u32; 256]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = [0u32; 256];
        let mut set = [false; 256];
        for ch in (0x21..=0x7E).chain(0xA1..=0xAC).chain(0xAE..=0xFF) {
            t[ch] = ch as u32;
            set[ch] = true;
        }
        let mut n = 0;
        for ch in 0..256 {
            if !set[ch] {
                t[ch] = 256 + n;
                n += 1;
            }
        }
        t
    })
}

/// The inverse of [`byte_to_cpt_table`]: a codepoint to its byte, if it is one of the 256.
pub fn cpt_to_byte(cpt: u32) -> Option<u8> {
    static T: OnceLock<Vec<i16>> = OnceLock::new();
    let t = T.get_or_init(|| {
        let mut v = vec![-1i16; 512];
        for (b, &c) in byte_to_cpt_table().iter().enumerate() {
            v[c as usize] = b as i16;
        }
        v
    });
    match t.get(cpt as usize) {
        Some(&b) if b >= 0 => Some(b as u8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_basic() {
        assert!(flags('a' as u32).is_letter());
        assert!(flags('5' as u32).is_number());
        assert!(flags(' ' as u32).is_whitespace());
        assert!(flags(0x3000).is_whitespace());
        assert!(flags('!' as u32).is_punctuation());
        assert!(flags(0x4E2D).is_letter());
        assert_eq!(flags(0x110000).0, Flags::UNDEFINED);
    }

    #[test]
    fn lenient_utf8() {
        assert_eq!(cpts_from_utf8(b"a\xffb"), vec![97, 0xFFFD, 98]);
        assert_eq!(cpts_from_utf8("é€😀".as_bytes()), vec![0xE9, 0x20AC, 0x1F600]);
        assert_eq!(cpts_from_utf8(b"\xe2\x82"), vec![0xFFFD, 0xFFFD]);
    }

    #[test]
    fn byte_map_roundtrip() {
        for b in 0..=255u8 {
            assert_eq!(cpt_to_byte(byte_to_cpt_table()[b as usize]), Some(b));
        }
        assert_eq!(byte_to_cpt_table()[b' ' as usize], 0x120);
    }

    #[test]
    fn lower_and_nfd() {
        assert_eq!(to_lower('A' as u32), 'a' as u32);
        assert_eq!(nfd(0xE9), 'e' as u32);
        assert_eq!(nfd('x' as u32), 'x' as u32);
    }
}
