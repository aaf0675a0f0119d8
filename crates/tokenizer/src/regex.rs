//! A small backtracking regex engine over codepoint slices with ECMAScript semantics, as
//! libstdc++'s `std::regex`/`std::wregex` (what llama.cpp falls back to for
//! pre-tokenizer patterns it has no hand-written splitter for).
//!
//! Supported: alternation, `(...)`, `(?:...)`, `(?=...)`, `(?!...)`, classes with ranges
//! and `\s \S \d \D \w \W`, `.`, `^ $ \b \B`, quantifiers `* + ? {n} {n,} {n,m}` (greedy
//! and lazy), escapes `\r \n \t \f \v \0 \xHH \uHHHH` and identity escapes. Classes are
//! ASCII (the "C" locale), as in llama.cpp, which maps non-ASCII text to placeholders
//! before matching. Matching is leftmost, first alternative wins — ECMAScript's rule.

use crate::Error;

#[derive(Debug, Clone)]
enum ClassItem {
    Range(u32, u32),
    Space(bool),
    Digit(bool),
    Word(bool),
}

#[derive(Debug, Clone)]
enum CharSet {
    Lit(u32),
    Dot,
    Class { neg: bool, items: Vec<ClassItem> },
}

#[derive(Debug, Clone)]
enum Node {
    Set(CharSet),
    Bol,
    Eol,
    WordBoundary(bool),
    Group(Vec<Vec<Node>>),
    Look { neg: bool, alts: Vec<Vec<Node>> },
    Repeat { node: Box<Node>, min: u32, max: u32, greedy: bool },
}

#[inline]
fn is_space(c: u32) -> bool {
    matches!(c, 0x20 | 0x09..=0x0D)
}
#[inline]
fn is_digit(c: u32) -> bool {
    (0x30..=0x39).contains(&c)
}
#[inline]
fn is_word(c: u32) -> bool {
    c == '_' as u32 || is_digit(c) || (0x41..=0x5A).contains(&c) || (0x61..=0x7A).contains(&c)
}

impl CharSet {
    #[inline]
    fn matches(&self, c: u32) -> bool {
        match self {
            CharSet::Lit(l) => *l == c,
            CharSet::Dot => c != '\n' as u32 && c != '\r' as u32,
            CharSet::Class { neg, items } => {
                let hit = items.iter().any(|it| match *it {
                    ClassItem::Range(a, b) => a <= c && c <= b,
                    ClassItem::Space(n) => is_space(c) != n,
                    ClassItem::Digit(n) => is_digit(c) != n,
                    ClassItem::Word(n) => is_word(c) != n,
                });
                hit != *neg
            }
        }
    }
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Regex {
    alts: Vec<Vec<Node>>,
    /// Whether matching may recurse once per input character (a repeated group).
    deep: bool,
}

fn has_deep_repeat(alts: &[Vec<Node>]) -> bool {
    alts.iter().flatten().any(|n| match n {
        Node::Repeat { node, max, .. } => {
            !matches!(**node, Node::Set(_)) && (*max > 16 || has_deep_repeat(&[vec![(**node).clone()]]))
        }
        Node::Group(a) | Node::Look { alts: a, .. } => has_deep_repeat(a),
        _ => false,
    })
}

/// Stack reserved per level of matcher recursion (measured: ~250 bytes optimized; a
/// repeated group takes ~7 levels per character).
const BYTES_PER_LEVEL: usize = if cfg!(debug_assertions) { 2048 } else { 512 };
/// Levels reserved per input character for patterns that recurse per character.
const LEVELS_PER_CHAR: usize = 16;
/// Recursion allowed on the caller's stack (assumed to have at least 1 MiB free).
const INLINE_LEVELS: usize = 512;

struct Parser<'a> {
    p: &'a [u32],
    i: usize,
    src: String,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        Error::Regex { pattern: self.src.clone(), message: format!("{what} at {}", self.i) }
    }
    fn peek(&self) -> Option<u32> {
        self.p.get(self.i).copied()
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c as u32) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn alts(&mut self) -> Result<Vec<Vec<Node>>, Error> {
        let mut alts = vec![self.seq()?];
        while self.eat('|') {
            alts.push(self.seq()?);
        }
        Ok(alts)
    }
    fn seq(&mut self) -> Result<Vec<Node>, Error> {
        let mut seq = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' as u32 || c == ')' as u32 {
                break;
            }
            let atom = self.atom()?;
            let atom = self.quant(atom)?;
            seq.push(atom);
        }
        Ok(seq)
    }
    fn number(&mut self) -> Option<u32> {
        let start = self.i;
        let mut v: u32 = 0;
        while let Some(c) = self.peek() {
            if !is_digit(c) {
                break;
            }
            v = v.saturating_mul(10).saturating_add(c - 0x30);
            self.i += 1;
        }
        (self.i > start).then_some(v)
    }
    fn quant(&mut self, atom: Node) -> Result<Node, Error> {
        let (min, max) = match self.peek() {
            Some(0x2A) => (0, u32::MAX),
            Some(0x2B) => (1, u32::MAX),
            Some(0x3F) => (0, 1),
            Some(0x7B) => {
                let save = self.i;
                self.i += 1;
                let Some(min) = self.number() else {
                    self.i = save;
                    return Err(self.err("bad repeat"));
                };
                let max = if self.eat(',') { self.number().unwrap_or(u32::MAX) } else { min };
                if !self.eat('}') || max < min {
                    return Err(self.err("bad repeat"));
                }
                self.i -= 1; // the '}' is consumed below
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.i += 1;
        if matches!(atom, Node::Bol | Node::Eol | Node::WordBoundary(_) | Node::Look { .. }) {
            return Err(self.err("nothing to repeat"));
        }
        let greedy = !self.eat('?');
        Ok(Node::Repeat { node: Box::new(atom), min, max, greedy })
    }
    fn hex(&mut self, n: usize) -> Result<u32, Error> {
        let mut v = 0;
        for _ in 0..n {
            let c =
                self.peek().and_then(|c| char::from_u32(c)?.to_digit(16)).ok_or_else(|| self.err("bad hex escape"))?;
            v = v * 16 + c;
            self.i += 1;
        }
        Ok(v)
    }
    /// An escape after `\`: a single char, or a class item.
    fn escape(&mut self, in_class: bool) -> Result<Result<u32, ClassItem>, Error> {
        let c = self.peek().ok_or_else(|| self.err("trailing backslash"))?;
        self.i += 1;
        let ch = char::from_u32(c).unwrap_or('\0');
        Ok(match ch {
            'd' => Err(ClassItem::Digit(false)),
            'D' => Err(ClassItem::Digit(true)),
            's' => Err(ClassItem::Space(false)),
            'S' => Err(ClassItem::Space(true)),
            'w' => Err(ClassItem::Word(false)),
            'W' => Err(ClassItem::Word(true)),
            'r' => Ok(0x0D),
            'n' => Ok(0x0A),
            't' => Ok(0x09),
            'f' => Ok(0x0C),
            'v' => Ok(0x0B),
            '0' => Ok(0),
            'b' if in_class => Ok(0x08),
            'x' => Ok(self.hex(2)?),
            'u' => Ok(self.hex(4)?),
            'p' | 'P' => return Err(self.err("unicode property escapes are not supported")),
            _ if ch.is_ascii_digit() => return Err(self.err("back-references are not supported")),
            _ => Ok(c),
        })
    }
    fn class(&mut self) -> Result<Node, Error> {
        let neg = self.eat('^');
        let mut items = Vec::new();
        loop {
            let c = self.peek().ok_or_else(|| self.err("unterminated class"))?;
            if c == ']' as u32 {
                self.i += 1;
                break;
            }
            self.i += 1;
            let lo = if c == '\\' as u32 {
                match self.escape(true)? {
                    Ok(v) => v,
                    Err(item) => {
                        items.push(item);
                        continue;
                    }
                }
            } else {
                c
            };
            // range?
            if self.peek() == Some('-' as u32) && self.p.get(self.i + 1).is_some_and(|&n| n != ']' as u32) {
                self.i += 1;
                let c2 = self.peek().ok_or_else(|| self.err("unterminated class"))?;
                self.i += 1;
                let hi = if c2 == '\\' as u32 {
                    match self.escape(true)? {
                        Ok(v) => v,
                        Err(_) => return Err(self.err("class in range")),
                    }
                } else {
                    c2
                };
                if hi < lo {
                    return Err(self.err("range out of order"));
                }
                items.push(ClassItem::Range(lo, hi));
            } else {
                items.push(ClassItem::Range(lo, lo));
            }
        }
        Ok(Node::Set(CharSet::Class { neg, items }))
    }
    fn atom(&mut self) -> Result<Node, Error> {
        let c = self.peek().ok_or_else(|| self.err("unexpected end"))?;
        self.i += 1;
        match char::from_u32(c).unwrap_or('\0') {
            '(' => {
                let kind = if self.peek() == Some('?' as u32) {
                    self.i += 1;
                    let k = self.peek().ok_or_else(|| self.err("bad group"))?;
                    self.i += 1;
                    match char::from_u32(k).unwrap_or('\0') {
                        ':' => 0,
                        '=' => 1,
                        '!' => 2,
                        _ => return Err(self.err("unsupported group")),
                    }
                } else {
                    0
                };
                let alts = self.alts()?;
                if !self.eat(')') {
                    return Err(self.err("missing )"));
                }
                Ok(match kind {
                    0 => Node::Group(alts),
                    1 => Node::Look { neg: false, alts },
                    _ => Node::Look { neg: true, alts },
                })
            }
            '[' => self.class(),
            '.' => Ok(Node::Set(CharSet::Dot)),
            '^' => Ok(Node::Bol),
            '$' => Ok(Node::Eol),
            '\\' => {
                if self.peek() == Some('b' as u32) {
                    self.i += 1;
                    return Ok(Node::WordBoundary(false));
                }
                if self.peek() == Some('B' as u32) {
                    self.i += 1;
                    return Ok(Node::WordBoundary(true));
                }
                Ok(match self.escape(false)? {
                    Ok(v) => Node::Set(CharSet::Lit(v)),
                    Err(item) => Node::Set(CharSet::Class { neg: false, items: vec![item] }),
                })
            }
            '*' | '+' | '?' => Err(self.err("nothing to repeat")),
            ')' => Err(self.err("unmatched )")),
            _ => Ok(Node::Set(CharSet::Lit(c))),
        }
    }
}

struct Matcher<'t> {
    text: &'t [u32],
    depth: std::cell::Cell<usize>,
    limit: usize,
    overflow: std::cell::Cell<bool>,
    /// Whether `text[start-1]` may be consulted at the search start (match_prev_avail).
    prev_avail: bool,
    /// Where this search began (for `^` and `\b`).
    begin: usize,
}

impl Matcher<'_> {
    fn word_at(&self, pos: usize) -> bool {
        pos < self.text.len() && is_word(self.text[pos])
    }
    fn at_boundary(&self, pos: usize) -> bool {
        let left = if pos == self.begin && !self.prev_avail { false } else { pos > 0 && is_word(self.text[pos - 1]) };
        left != self.word_at(pos)
    }

    fn m(&self, seq: &[Node], pos: usize, k: &mut dyn FnMut(usize) -> bool) -> bool {
        let d = self.depth.get() + 1;
        if d > self.limit {
            self.overflow.set(true);
            return false;
        }
        self.depth.set(d);
        let r = self.m_inner(seq, pos, k);
        self.depth.set(d - 1);
        r
    }

    fn m_inner(&self, seq: &[Node], pos: usize, k: &mut dyn FnMut(usize) -> bool) -> bool {
        if self.overflow.get() {
            return false;
        }
        let Some((node, rest)) = seq.split_first() else {
            return k(pos);
        };
        match node {
            Node::Set(s) => pos < self.text.len() && s.matches(self.text[pos]) && self.m(rest, pos + 1, k),
            Node::Bol => pos == 0 && !self.prev_avail && self.m(rest, pos, k),
            Node::Eol => pos == self.text.len() && self.m(rest, pos, k),
            Node::WordBoundary(neg) => (self.at_boundary(pos) != *neg) && self.m(rest, pos, k),
            Node::Group(alts) => alts.iter().any(|alt| self.m(alt, pos, &mut |p| self.m(rest, p, k))),
            Node::Look { neg, alts } => {
                let found = alts.iter().any(|alt| self.m(alt, pos, &mut |_| true));
                found != *neg && self.m(rest, pos, k)
            }
            Node::Repeat { node, min, max, greedy } => {
                if let Node::Set(s) = &**node {
                    // single-character atom: count the run, then back off
                    let mut n = 0usize;
                    let lim = (*max as usize).min(self.text.len() - pos);
                    while n < lim && s.matches(self.text[pos + n]) {
                        n += 1;
                    }
                    let min = *min as usize;
                    if n < min {
                        return false;
                    }
                    if *greedy {
                        (min..=n).rev().any(|i| self.m(rest, pos + i, k))
                    } else {
                        (min..=n).any(|i| self.m(rest, pos + i, k))
                    }
                } else {
                    self.rep(node, *min, *max, *greedy, 0, pos, rest, k)
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rep(
        &self,
        node: &Node,
        min: u32,
        max: u32,
        greedy: bool,
        count: u32,
        pos: usize,
        rest: &[Node],
        k: &mut dyn FnMut(usize) -> bool,
    ) -> bool {
        let more = |k: &mut dyn FnMut(usize) -> bool| {
            count < max
                && self.m(std::slice::from_ref(node), pos, &mut |p| {
                    if p == pos && count >= min {
                        return false; // ECMAScript: an empty iteration past the minimum fails
                    }
                    self.rep(node, min, max, greedy, count.saturating_add(1), p, rest, k)
                })
        };
        if greedy {
            if more(k) {
                return true;
            }
            count >= min && self.m(rest, pos, k)
        } else {
            if count >= min && self.m(rest, pos, k) {
                return true;
            }
            more(k)
        }
    }
}

impl Regex {
    /// Compiles a pattern given as codepoints.
    pub fn new(pattern: &[u32]) -> Result<Regex, Error> {
        let src: String = pattern.iter().map(|&c| char::from_u32(c).unwrap_or('\u{FFFD}')).collect();
        let mut p = Parser { p: pattern, i: 0, src };
        let alts = p.alts()?;
        if p.i != pattern.len() {
            return Err(p.err("unmatched )"));
        }
        let deep = has_deep_repeat(&alts);
        Ok(Regex { alts, deep })
    }

    /// Compiles a pattern given as text.
    pub fn from_text(pattern: &str) -> Result<Regex, Error> {
        Regex::new(&pattern.chars().map(|c| c as u32).collect::<Vec<_>>())
    }

    /// The first match in `text[start..]`: leftmost start, ECMAScript priority.
    /// `not_null`/`continuous` are libstdc++'s `match_not_null`/`match_continuous`.
    #[allow(clippy::too_many_arguments)]
    fn search(
        &self,
        text: &[u32],
        start: usize,
        prev_avail: bool,
        not_null: bool,
        continuous: bool,
        limit: usize,
    ) -> Result<Option<(usize, usize)>, Error> {
        let m = Matcher {
            text,
            prev_avail,
            begin: start,
            depth: std::cell::Cell::new(0),
            limit,
            overflow: std::cell::Cell::new(false),
        };
        let last = if continuous { start } else { text.len() };
        for s in start..=last {
            let mut end = None;
            let ok = self.alts.iter().any(|alt| {
                m.m(alt, s, &mut |p| {
                    if not_null && p == s {
                        return false;
                    }
                    end = Some(p);
                    true
                })
            });
            if m.overflow.get() {
                return Err(Error::Regex {
                    pattern: String::new(),
                    message: format!("input of {} characters is too long for this pattern's backtracking", text.len()),
                });
            }
            if ok {
                return Ok(end.map(|e| (s, e)));
            }
        }
        Ok(None)
    }

    /// Every match of the pattern in `text`, as `std::regex_iterator` yields them
    /// (including its handling of empty matches). Patterns whose matching recurses per
    /// character run on a thread with a stack sized for the input.
    pub fn find_iter(&self, text: &[u32]) -> Result<Vec<(usize, usize)>, Error> {
        let mut out = Vec::new();
        self.for_each_match(text, &mut |s, e| out.push((s, e)))?;
        Ok(out)
    }

    /// [`Regex::find_iter`] without collecting: `f` gets each match `(start, end)` in
    /// order (a pattern that recurses per character, on a long text, still collects
    /// them on its matcher thread first).
    pub fn for_each_match(&self, text: &[u32], f: &mut dyn FnMut(usize, usize)) -> Result<(), Error> {
        if !self.deep || text.len() * LEVELS_PER_CHAR <= INLINE_LEVELS {
            return self.find_each_with(text, INLINE_LEVELS, f);
        }
        for (s, e) in self.find_iter_deep(text)? {
            f(s, e);
        }
        Ok(())
    }

    fn find_iter_deep(&self, text: &[u32]) -> Result<Vec<(usize, usize)>, Error> {
        let levels = 64 + LEVELS_PER_CHAR * text.len();
        let stack = levels.saturating_mul(BYTES_PER_LEVEL).clamp(8 << 20, 4 << 30);
        std::thread::scope(|sc| {
            std::thread::Builder::new()
                .stack_size(stack)
                .spawn_scoped(sc, || self.find_iter_with(text, stack / BYTES_PER_LEVEL))
                .map_err(|e| Error::Regex {
                    pattern: String::new(),
                    message: format!("spawning the matcher thread: {e}"),
                })?
                .join()
                .map_err(|_| Error::Regex { pattern: String::new(), message: "matcher thread panicked".into() })?
        })
    }

    fn find_iter_with(&self, text: &[u32], limit: usize) -> Result<Vec<(usize, usize)>, Error> {
        let mut out = Vec::new();
        self.find_each_with(text, limit, &mut |s, e| out.push((s, e)))?;
        Ok(out)
    }

    fn find_each_with(&self, text: &[u32], limit: usize, f: &mut dyn FnMut(usize, usize)) -> Result<(), Error> {
        let mut cur = self.search(text, 0, false, false, false, limit)?;
        while let Some((s, e)) = cur {
            f(s, e);
            let mut start = e;
            if s == e {
                if start == text.len() {
                    break;
                }
                if let Some(m) = self.search(text, start, true, true, true, limit)? {
                    cur = Some(m);
                    continue;
                }
                start += 1;
            }
            cur = self.search(text, start, true, false, false, limit)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cps(s: &str) -> Vec<u32> {
        s.chars().map(|c| c as u32).collect()
    }
    fn find(p: &str, t: &str) -> Vec<String> {
        let r = Regex::from_text(p).unwrap();
        let t = cps(t);
        r.find_iter(&t)
            .unwrap()
            .into_iter()
            .map(|(s, e)| t[s..e].iter().map(|&c| char::from_u32(c).unwrap()).collect())
            .collect()
    }

    #[test]
    fn alternation_priority_and_lookahead() {
        assert_eq!(find(r"\s+(?!\S)|\s+", "a   b"), vec!["  ", " "]);
        assert_eq!(find(r"'s|'t| ?[a-z]+", "it's ok"), vec!["it", "'s", " ok"]);
        assert_eq!(find(r"[0-9]{1,3}", "12345"), vec!["123", "45"]);
        assert_eq!(find(r"a+?", "aaa"), vec!["a", "a", "a"]);
        assert_eq!(find(r"\s+$", "a  "), vec!["  "]);
        assert_eq!(find(r"((?=[a-z])([^A-Z]))+", "abC"), vec!["ab"]);
    }

    #[test]
    fn empty_matches_advance() {
        // like superbpe's "(?=(\d{3})+(?!\d))": only empty matches
        let r = Regex::from_text(r"(?=(\d{3})+(?!\d))").unwrap();
        let m = r.find_iter(&cps("1234567")).unwrap();
        assert_eq!(m, vec![(1, 1), (4, 4)]);
    }

    #[test]
    fn long_inputs_to_recursive_patterns_do_not_overflow() {
        // a repeated group recurses once per character: 20k letters
        let r = Regex::from_text(r"((?=[a-z])([^A-Z]))+").unwrap();
        assert!(r.deep);
        let t = vec!['a' as u32; 20_000];
        assert_eq!(r.find_iter(&t).unwrap(), vec![(0, 20_000)]);
        // and a plain class repeat needs no thread at all
        let r = Regex::from_text(r"[a-z]+").unwrap();
        assert!(!r.deep);
        assert_eq!(r.find_iter(&t).unwrap(), vec![(0, 20_000)]);
        // past the recursion budget: an error, not a crash
        let r = Regex::from_text(r"((?=[a-z])([^A-Z]))+").unwrap();
        assert!(r.find_iter_with(&t, 1000).is_err());
    }

    #[test]
    fn bad_patterns_are_errors() {
        assert!(Regex::from_text("(abc").is_err());
        assert!(Regex::from_text("[abc").is_err());
        assert!(Regex::from_text("*a").is_err());
        assert!(Regex::from_text(r"\p{L}").is_err());
    }
}
