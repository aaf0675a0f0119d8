//! Streaming text: complete UTF-8 out of token bytes, and stop strings held back while
//! they may still be forming (llama-server's `find_partial_stop_string`).

pub use gguf_tokenizer::drain_utf8;

/// Where the first stop string occurs in `text` at or after byte `from` (searching a few
/// bytes back so a stop spanning two tokens is found): `(position, the stop string)`.
pub fn find_stop<'a>(text: &str, from: usize, stops: &'a [String]) -> Option<(usize, &'a str)> {
    let mut best: Option<(usize, &str)> = None;
    for s in stops.iter().filter(|s| !s.is_empty()) {
        let mut start = from.saturating_sub(s.len());
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        if let Some(p) = text[start..].find(s.as_str()) {
            let p = start + p;
            if best.is_none_or(|(b, _)| p < b) {
                best = Some((p, s));
            }
        }
    }
    best
}

/// Bytes at the end of `text` that are a proper prefix of some stop string (to hold back
/// from a stream until the next token decides).
pub fn partial_stop_len(text: &str, stops: &[String]) -> usize {
    let mut hold = 0;
    for s in stops {
        for k in (1..s.len().min(text.len() + 1)).rev() {
            if k <= hold {
                break;
            }
            if s.is_char_boundary(k) && text.ends_with(&s[..k]) {
                hold = k;
                break;
            }
        }
    }
    hold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_across_tokens() {
        let mut p = "é".as_bytes()[..1].to_vec();
        assert_eq!(drain_utf8(&mut p, false), "");
        p.push("é".as_bytes()[1]);
        p.extend_from_slice(b"x");
        assert_eq!(drain_utf8(&mut p, false), "éx");
        let mut p = vec![0xff, b'a', 0xe2];
        assert_eq!(drain_utf8(&mut p, false), "\u{FFFD}a");
        assert_eq!(drain_utf8(&mut p, true), "\u{FFFD}");
    }

    #[test]
    fn stops_full_and_partial() {
        let stops = vec!["\n\n".to_string(), "END".to_string()];
        assert_eq!(find_stop("abc\n\nd", 4, &stops), Some((3, "\n\n")));
        assert_eq!(find_stop("abEN", 3, &stops), None);
        assert_eq!(partial_stop_len("abEN", &stops), 2);
        assert_eq!(partial_stop_len("ab\n", &stops), 1);
        assert_eq!(partial_stop_len("abc", &stops), 0);
        assert_eq!(find_stop("xxENDyyEND", 0, &stops), Some((2, "END")));
    }
}
