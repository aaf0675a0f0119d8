//! GBNF (llama.cpp's grammar format, `grammars/README.md`) translated to llguidance's
//! Lark dialect.
//!
//! The parser follows llama.cpp's `llama_grammar_parser` (`llama-grammar.cpp`): rules
//! `name ::= alternatives`, a newline ends a rule except inside parentheses or after `|`,
//! `# comments`, `"strings"` and `[classes]` (negation, ranges) with the escapes `\x`, `\u`,
//! `\U`, `\t`, `\r`, `\n`, `\\`, `\"`, `\[`, `\]`, `\-`, `.`, grouping, `*`, `+`, `?`,
//! `{m}`, `{m,}`, `{m,n}`, token references `<[id]>`, `<text>` and their negation `!<...>`;
//! `root` is the start rule and the last definition of a name wins.
//!
//! GBNF is a character-level grammar. llguidance splits text into lexemes that are
//! matched greedily (a lexeme ends only where the next byte cannot continue it), which is
//! much faster but would change the language if done carelessly: in llama.cpp's
//! `arithmetic.gbnf`, `num ::= [0-9]+ ws` with `ws ::= [ \t\n]*` followed by `"\n"` would
//! swallow the newline the grammar needs next (llguidance's own `gbnf_to_lark.py` makes
//! that mistake: its arithmetic grammar can never end). So a piece of the grammar becomes
//! one lexeme only when that is safe: no byte that continues a complete match of the
//! piece starts a character of what may follow it (checked on the piece's DFA against the
//! FOLLOW set at that position). Then:
//! - non-recursive rules made only of strings, classes and such rules become Lark
//!   terminals (uppercase) when safe, as in `gbnf_to_lark.py`;
//! - in the other rules, runs of adjacent strings/classes (and groups and repetitions of
//!   them) become one inline `/regex/` lexeme when safe, as do repetitions of small
//!   terminals (`letter+`); references to terminals stay lexemes of their own;
//! - what is unsafe is expanded at the grammar level (`ws: /[\t\n ]/*`), down to single
//!   characters if need be.
//!
//! One greedy effect remains: when several lexemes are possible at one position and a
//! complete match of one is a proper prefix of another (`("a" | "ab") "bc"`), the longer
//! one wins, so `abc` is rejected there. The llama.cpp grammars do not do this.

use std::collections::HashMap;

use crate::charset::CharSet;
use crate::{Error, Result};

/// Deepest nesting of parentheses (the translation recurses over it).
const MAX_GROUP_DEPTH: usize = 64;
/// Most repetition operators applied to one item (`x?*+`).
const MAX_STACKED_OPS: usize = 4;
/// llama.cpp's `MAX_REPETITION_THRESHOLD`.
const MAX_REPETITION: u32 = 2000;
/// Most DFA states explored when checking whether a lexeme is safe.
const MAX_DFA_STATES: usize = 4000;
/// Precedence of emitted Lark: alternation, sequence/repetition, atom.
const ALT: u8 = 0;
const SEQ: u8 = 1;
const ATOM: u8 = 2;
/// Longest regex (in bytes) of a repetition of terminal rules made one inline lexeme.
const MAX_INLINE_REP: usize = 1024;
/// Longest regex (in bytes) analysed or emitted as one lexeme.
const MAX_REGEX_LEN: usize = 1 << 16;

/// A token reference.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenRef {
    /// `<[id]>`, or a `<text>` resolved to an id.
    Id(u32),
    /// `<text>` left for llguidance to resolve against the special tokens.
    Name(String),
}

/// A GBNF expression.
#[derive(Debug, Clone)]
enum Expr {
    /// A string (possibly empty).
    Lit(Vec<char>),
    /// A character class or `.`.
    Class(CharSet),
    /// A reference to a rule.
    Ref(usize),
    /// A token or (negated) any token but it.
    Token {
        token: TokenRef,
        negated: bool,
    },
    Seq(Vec<Expr>),
    Alt(Vec<Expr>),
    Rep {
        inner: Box<Expr>,
        min: u32,
        max: Option<u32>,
    },
}

struct Rule {
    name: String,
    body: Option<Expr>,
    /// Byte offset of the first reference or definition, for errors.
    pos: usize,
}

/// Resolves the text of a `<token>` reference to its id.
pub(crate) type TokenLookup<'a> = &'a dyn Fn(&[u8]) -> Option<u32>;

/// Translates a GBNF grammar to llguidance Lark. Without `lookup`, `<text>` token
/// references are passed through for llguidance to resolve among the special tokens.
pub(crate) fn to_lark(src: &str, lookup: Option<TokenLookup>) -> Result<String> {
    let rules = Parser { src, pos: 0, rules: Vec::new(), ids: HashMap::new(), lookup, depth: 0 }.parse()?;
    Translator::new(rules).emit()
}

/// Translates a GBNF grammar to llguidance's Lark dialect (without a vocabulary: `<text>`
/// token references are left for llguidance to resolve among the special tokens).
pub fn gbnf_to_lark(src: &str) -> Result<String> {
    to_lark(src, None)
}

fn line_col(src: &str, pos: usize) -> (usize, usize) {
    let before = &src[..pos.min(src.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn gbnf_error(src: &str, pos: usize, message: impl std::fmt::Display) -> Error {
    let (line, col) = line_col(src, pos);
    let rest: String = src[pos.min(src.len())..].chars().take(24).collect();
    let near = if rest.is_empty() { "end of input".to_string() } else { format!("{rest:?}") };
    Error::Gbnf(format!("line {line}, column {col}: {message} (at {near})"))
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    rules: Vec<Rule>,
    ids: HashMap<String, usize>,
    lookup: Option<TokenLookup<'a>>,
    /// Current nesting of parentheses.
    depth: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

impl Parser<'_> {
    fn err(&self, message: impl std::fmt::Display) -> Error {
        gbnf_error(self.src, self.pos, message)
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.src[self.pos..].chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newline_ok => self.pos += 1,
                '#' => {
                    while let Some(c) = self.peek() {
                        if c == '\r' || c == '\n' {
                            break;
                        }
                        self.pos += c.len_utf8();
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected a rule name"));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn int(&mut self) -> Result<u32> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected an integer"));
        }
        let s = &self.src[start..self.pos];
        s.parse::<u32>().ok().filter(|&n| n <= MAX_REPETITION).ok_or_else(|| {
            gbnf_error(self.src, start, format!("repetition count {s} exceeds the limit of {MAX_REPETITION}"))
        })
    }

    fn symbol(&mut self, name: &str, pos: usize) -> usize {
        if let Some(&i) = self.ids.get(name) {
            return i;
        }
        self.rules.push(Rule { name: name.to_string(), body: None, pos });
        self.ids.insert(name.to_string(), self.rules.len() - 1);
        self.rules.len() - 1
    }

    fn hex(&mut self, digits: usize) -> Result<u32> {
        let start = self.pos;
        let mut v = 0u32;
        for _ in 0..digits {
            match self.peek().and_then(|c| c.to_digit(16)) {
                Some(d) => {
                    v = v * 16 + d;
                    self.pos += 1;
                }
                None => return Err(gbnf_error(self.src, start, format!("expected {digits} hex digits"))),
            }
        }
        if v > crate::charset::MAX_CHAR || (0xD800..=0xDFFF).contains(&v) {
            return Err(gbnf_error(self.src, start, format!("U+{v:X} is not a valid code point")));
        }
        Ok(v)
    }

    /// One character of a string or class (llama.cpp's `parse_char`).
    fn char(&mut self) -> Result<u32> {
        let start = self.pos;
        match self.bump() {
            None => Err(self.err("unexpected end of input")),
            Some('\\') => match self.bump() {
                Some('x') => self.hex(2),
                Some('u') => self.hex(4),
                Some('U') => self.hex(8),
                Some('t') => Ok('\t' as u32),
                Some('r') => Ok('\r' as u32),
                Some('n') => Ok('\n' as u32),
                Some(c @ ('\\' | '"' | '[' | ']' | '-')) => Ok(c as u32),
                _ => Err(gbnf_error(self.src, start, "unknown escape")),
            },
            Some(c) => Ok(c as u32),
        }
    }

    fn parse(mut self) -> Result<Vec<Rule>> {
        self.skip_space(true);
        while self.pos < self.src.len() {
            self.rule()?;
        }
        for r in &self.rules {
            if r.body.is_none() {
                return Err(gbnf_error(self.src, r.pos, format!("undefined rule '{}'", r.name)));
            }
        }
        if !self.ids.contains_key("root") {
            return Err(Error::Gbnf("the grammar has no 'root' rule".into()));
        }
        Ok(self.rules)
    }

    fn rule(&mut self) -> Result<()> {
        let start = self.pos;
        let name = self.name()?;
        self.skip_space(false);
        if !self.src[self.pos..].starts_with("::=") {
            return Err(self.err(format!("expected '::=' after rule name '{name}'")));
        }
        self.pos += 3;
        self.skip_space(true);
        let body = self.alternates(false)?;
        match self.peek() {
            None => {}
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
            }
            Some('\n') => self.pos += 1,
            Some(_) => return Err(self.err("expected a newline or the end of the rule")),
        }
        self.skip_space(true);
        let id = self.symbol(&name, start);
        self.rules[id].body = Some(body);
        Ok(())
    }

    fn alternates(&mut self, nested: bool) -> Result<Expr> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(if alts.len() == 1 { alts.pop().unwrap() } else { Expr::Alt(alts) })
    }

    fn sequence(&mut self, nested: bool) -> Result<Expr> {
        let mut items: Vec<Expr> = Vec::new();
        loop {
            let start = self.pos;
            let Some(c) = self.peek() else { break };
            match c {
                '"' => {
                    self.pos += 1;
                    let mut s = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(gbnf_error(self.src, start, "unterminated string")),
                            Some('"') => break,
                            Some(_) => s.push(char::from_u32(self.char()?).unwrap_or('\u{FFFD}')),
                        }
                    }
                    self.pos += 1;
                    items.push(Expr::Lit(s));
                }
                '[' => {
                    self.pos += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(gbnf_error(self.src, start, "unterminated character class")),
                            Some(']') => break,
                            Some(_) => {
                                let lo = self.char()?;
                                let mut hi = lo;
                                if self.peek() == Some('-') && self.peek2().is_some_and(|c| c != ']') {
                                    self.pos += 1;
                                    hi = self.char()?;
                                }
                                ranges.push((lo, hi));
                            }
                        }
                    }
                    self.pos += 1;
                    let set = CharSet::from_ranges(&ranges);
                    let set = if negated { set.complement() } else { set };
                    if set.is_empty() {
                        return Err(gbnf_error(self.src, start, "character class matches no character"));
                    }
                    items.push(Expr::Class(set));
                }
                '<' | '!' => {
                    let negated = c == '!';
                    if negated {
                        self.pos += 1;
                    }
                    let tok_start = self.pos;
                    let token = self.token()?;
                    if negated && matches!(token, TokenRef::Name(_)) {
                        return Err(gbnf_error(self.src, tok_start, "a negated token by name needs the vocabulary"));
                    }
                    items.push(Expr::Token { token, negated });
                }
                '(' => {
                    if self.depth >= MAX_GROUP_DEPTH {
                        return Err(self.err(format!("parentheses nested deeper than {MAX_GROUP_DEPTH}")));
                    }
                    self.pos += 1;
                    self.skip_space(true);
                    self.depth += 1;
                    let inner = self.alternates(true);
                    self.depth -= 1;
                    let inner = inner?;
                    if self.peek() != Some(')') {
                        return Err(gbnf_error(self.src, start, "unclosed '('"));
                    }
                    self.pos += 1;
                    items.push(inner);
                }
                '.' => {
                    self.pos += 1;
                    items.push(Expr::Class(CharSet::all()));
                }
                '*' | '+' | '?' | '{' => {
                    let Some(last) = items.pop() else {
                        return Err(self.err(format!("'{c}' needs a preceding item")));
                    };
                    let mut stacked = 0;
                    let mut e = &last;
                    while let Expr::Rep { inner, .. } = e {
                        stacked += 1;
                        e = inner;
                    }
                    if stacked >= MAX_STACKED_OPS {
                        return Err(self.err(format!("more than {MAX_STACKED_OPS} repetition operators on one item")));
                    }
                    self.pos += 1;
                    let (min, max) = match c {
                        '*' => (0, None),
                        '+' => (1, None),
                        '?' => (0, Some(1)),
                        _ => {
                            self.skip_space(nested);
                            let min = self.int()?;
                            self.skip_space(nested);
                            let max = match self.bump() {
                                Some('}') => Some(min),
                                Some(',') => {
                                    self.skip_space(nested);
                                    let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                                        Some(self.int()?)
                                    } else {
                                        None
                                    };
                                    self.skip_space(nested);
                                    if self.bump() != Some('}') {
                                        return Err(gbnf_error(
                                            self.src,
                                            start,
                                            "expected '}' to close the repetition",
                                        ));
                                    }
                                    max
                                }
                                _ => return Err(gbnf_error(self.src, start, "expected ',' or '}' in the repetition")),
                            };
                            if max.is_some_and(|m| m < min) {
                                return Err(gbnf_error(self.src, start, "repetition maximum is below its minimum"));
                            }
                            (min, max)
                        }
                    };
                    items.push(Expr::Rep { inner: Box::new(last), min, max });
                }
                c if is_word_char(c) => {
                    let name = self.name()?;
                    let id = self.symbol(&name, start);
                    items.push(Expr::Ref(id));
                }
                _ => break,
            }
            self.skip_space(nested);
        }
        Ok(if items.len() == 1 { items.pop().unwrap() } else { Expr::Seq(items) })
    }

    fn token(&mut self) -> Result<TokenRef> {
        let start = self.pos;
        if self.bump() != Some('<') {
            return Err(self.err("expected '<' to start a token"));
        }
        if self.peek() == Some('[') {
            self.pos += 1;
            let s = self.pos;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
            let id = self.src[s..self.pos].parse::<u32>().map_err(|_| self.err("expected a token id"))?;
            if self.bump() != Some(']') || self.bump() != Some('>') {
                return Err(gbnf_error(self.src, start, "expected ']>' to close the token id"));
            }
            return Ok(TokenRef::Id(id));
        }
        let end = self.src[self.pos..].find('>').ok_or_else(|| gbnf_error(self.src, start, "unclosed token '<'"))?;
        self.pos += end + 1;
        let text = &self.src[start..self.pos];
        match self.lookup {
            Some(f) => f(text.as_bytes())
                .map(TokenRef::Id)
                .ok_or_else(|| gbnf_error(self.src, start, format!("{text} is not a single token of the vocabulary"))),
            None => Ok(TokenRef::Name(text.to_string())),
        }
    }
}

/// Regex syntax for one code point (inside or outside a class).
fn rx_char(c: u32, out: &mut String) {
    match char::from_u32(c) {
        Some(ch) if ch.is_ascii_alphanumeric() || ch == '_' || ch == ' ' => out.push(ch),
        Some(ch) if ch.is_ascii_graphic() && !"\\.+*?()|[]{}^$#&-~/\"".contains(ch) => out.push(ch),
        _ => out.push_str(&format!("\\x{{{c:X}}}")),
    }
}

fn rx_class(set: &CharSet, out: &mut String) {
    if let [(lo, hi)] = set.ranges() {
        if lo == hi {
            rx_char(*lo, out);
            return;
        }
    }
    out.push('[');
    for &(lo, hi) in set.ranges() {
        rx_char(lo, out);
        if hi > lo {
            if hi > lo + 1 {
                out.push('-');
            }
            rx_char(hi, out);
        }
    }
    out.push(']');
}

/// A Lark (JSON-syntax) string literal.
fn lark_string(s: &[char]) -> String {
    let mut out = String::from("\"");
    for &c in s {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn rep_suffix(min: u32, max: Option<u32>) -> String {
    match (min, max) {
        (0, None) => "*".into(),
        (1, None) => "+".into(),
        (0, Some(1)) => "?".into(),
        (m, None) => format!("{{{m},}}"),
        (m, Some(n)) if m == n => format!("{{{m}}}"),
        (m, Some(n)) => format!("{{{m},{n}}}"),
    }
}

struct Translator {
    rules: Vec<Rule>,
    root: usize,
    reachable: Vec<bool>,
    nullable: Vec<bool>,
    first: Vec<CharSet>,
    follow: Vec<CharSet>,
    /// Rules emitted as Lark terminals.
    terminal: Vec<bool>,
    /// Regex of each terminal rule (None: not yet computed or too long).
    term_rx: Vec<Option<String>>,
    names: Vec<String>,
    /// Memo of `safe`.
    safe_memo: HashMap<(String, Vec<(u32, u32)>), bool>,
}

impl Translator {
    fn new(rules: Vec<Rule>) -> Translator {
        let n = rules.len();
        let root = rules.iter().position(|r| r.name == "root").expect("checked by the parser");
        let mut t = Translator {
            rules,
            root,
            reachable: vec![false; n],
            nullable: vec![false; n],
            first: vec![CharSet::new(); n],
            follow: vec![CharSet::new(); n],
            terminal: vec![false; n],
            term_rx: vec![None; n],
            names: Vec::new(),
            safe_memo: HashMap::new(),
        };
        t.mark_reachable();
        t.compute_first();
        t.compute_follow();
        t.assign_names();
        t.choose_terminals();
        t
    }

    fn body(&self, r: usize) -> &Expr {
        self.rules[r].body.as_ref().expect("checked by the parser")
    }

    fn refs(e: &Expr, out: &mut Vec<usize>) {
        match e {
            Expr::Ref(r) => out.push(*r),
            Expr::Seq(v) | Expr::Alt(v) => v.iter().for_each(|e| Self::refs(e, out)),
            Expr::Rep { inner, .. } => Self::refs(inner, out),
            Expr::Lit(_) | Expr::Class(_) | Expr::Token { .. } => {}
        }
    }

    fn rule_refs(&self, r: usize) -> Vec<usize> {
        let mut v = Vec::new();
        Self::refs(self.body(r), &mut v);
        v
    }

    fn mark_reachable(&mut self) {
        let mut stack = vec![self.root];
        self.reachable[self.root] = true;
        while let Some(r) = stack.pop() {
            for s in self.rule_refs(r) {
                if !self.reachable[s] {
                    self.reachable[s] = true;
                    stack.push(s);
                }
            }
        }
    }

    fn expr_nullable(&self, e: &Expr) -> bool {
        match e {
            Expr::Lit(s) => s.is_empty(),
            Expr::Class(_) | Expr::Token { .. } => false,
            Expr::Ref(r) => self.nullable[*r],
            Expr::Seq(v) => v.iter().all(|e| self.expr_nullable(e)),
            Expr::Alt(v) => v.iter().any(|e| self.expr_nullable(e)),
            Expr::Rep { inner, min, .. } => *min == 0 || self.expr_nullable(inner),
        }
    }

    /// The characters a match of `e` can start with. Tokens contribute none: their bytes
    /// start with 0xFF in the trie (special tokens) or end any text lexeme anyway.
    fn expr_first(&self, e: &Expr) -> CharSet {
        match e {
            Expr::Lit(s) => s.first().map_or_else(CharSet::new, |&c| CharSet::single(c as u32)),
            Expr::Class(set) => set.clone(),
            Expr::Token { .. } => CharSet::new(),
            Expr::Ref(r) => self.first[*r].clone(),
            Expr::Seq(v) => {
                let mut out = CharSet::new();
                for e in v {
                    out.union_with(&self.expr_first(e));
                    if !self.expr_nullable(e) {
                        break;
                    }
                }
                out
            }
            Expr::Alt(v) => {
                let mut out = CharSet::new();
                for e in v {
                    out.union_with(&self.expr_first(e));
                }
                out
            }
            Expr::Rep { inner, max, .. } => {
                if *max == Some(0) {
                    CharSet::new()
                } else {
                    self.expr_first(inner)
                }
            }
        }
    }

    fn compute_first(&mut self) {
        loop {
            let mut changed = false;
            for r in 0..self.rules.len() {
                if !self.reachable[r] {
                    continue;
                }
                let n = self.expr_nullable(self.body(r));
                if n && !self.nullable[r] {
                    self.nullable[r] = true;
                    changed = true;
                }
                let f = self.expr_first(self.body(r));
                changed |= self.first[r].union_with(&f);
            }
            if !changed {
                break;
            }
        }
    }

    /// Adds to `follow` of every rule referenced in `e` what can follow that reference,
    /// given that `after` can follow `e`; true if something grew.
    fn walk_follow(&self, e: &Expr, after: &CharSet, follow: &mut [CharSet]) -> bool {
        match e {
            Expr::Ref(r) => follow[*r].union_with(after),
            Expr::Seq(v) => {
                let mut changed = false;
                let mut acc = after.clone();
                for item in v.iter().rev() {
                    changed |= self.walk_follow(item, &acc, follow);
                    let f = self.expr_first(item);
                    if self.expr_nullable(item) {
                        acc.union_with(&f);
                    } else {
                        acc = f;
                    }
                }
                changed
            }
            Expr::Alt(v) => v.iter().fold(false, |ch, e| self.walk_follow(e, after, follow) | ch),
            Expr::Rep { inner, max, .. } => {
                let inner_after = self.rep_inner_follow(inner, *max, after);
                self.walk_follow(inner, &inner_after, follow)
            }
            Expr::Lit(_) | Expr::Class(_) | Expr::Token { .. } => false,
        }
    }

    fn rep_inner_follow(&self, inner: &Expr, max: Option<u32>, after: &CharSet) -> CharSet {
        let mut f = after.clone();
        if max.is_none_or(|m| m > 1) {
            f.union_with(&self.expr_first(inner));
        }
        f
    }

    fn compute_follow(&mut self) {
        let mut follow = vec![CharSet::new(); self.rules.len()];
        loop {
            let mut changed = false;
            for r in 0..self.rules.len() {
                if self.reachable[r] {
                    let after = follow[r].clone();
                    changed |= self.walk_follow(self.body(r), &after, &mut follow);
                }
            }
            if !changed {
                break;
            }
        }
        self.follow = follow;
    }

    fn assign_names(&mut self) {
        let mut used: std::collections::HashSet<String> = ["start".to_string()].into();
        self.names = (0..self.rules.len())
            .map(|r| {
                if r == self.root {
                    return "start".to_string();
                }
                let mut base: String =
                    self.rules[r].name.chars().map(|c| if c == '-' { '_' } else { c.to_ascii_lowercase() }).collect();
                if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
                    base = format!("r_{base}");
                }
                let mut name = base.clone();
                let mut i = 2;
                while !used.insert(name.clone()) {
                    name = format!("{base}_{i}");
                    i += 1;
                }
                name
            })
            .collect();
    }

    fn is_recursive(&self, r: usize) -> bool {
        let mut seen = vec![false; self.rules.len()];
        let mut stack = self.rule_refs(r);
        while let Some(s) = stack.pop() {
            if s == r {
                return true;
            }
            if !seen[s] {
                seen[s] = true;
                stack.extend(self.rule_refs(s));
            }
        }
        false
    }

    /// Whether `e` is regular with every reference a terminal rule.
    fn expr_is_terminal(&self, e: &Expr) -> bool {
        match e {
            Expr::Lit(_) | Expr::Class(_) => true,
            Expr::Token { .. } => false,
            Expr::Ref(r) => self.terminal[*r],
            Expr::Seq(v) | Expr::Alt(v) => v.iter().all(|e| self.expr_is_terminal(e)),
            Expr::Rep { inner, .. } => self.expr_is_terminal(inner),
        }
    }

    /// Whether `e` is regular without rule references: such pieces are merged into inline
    /// lexemes; references to terminal rules stay lexemes of their own (merging them would
    /// glue whole key/value chains into one huge lexeme).
    fn expr_is_primitive(e: &Expr) -> bool {
        match e {
            Expr::Lit(_) | Expr::Class(_) => true,
            Expr::Token { .. } | Expr::Ref(_) => false,
            Expr::Seq(v) | Expr::Alt(v) => v.iter().all(Self::expr_is_primitive),
            Expr::Rep { inner, .. } => Self::expr_is_primitive(inner),
        }
    }

    /// Whether the regex of `e` takes a postfix operator without a group: a class, one
    /// character, an alternation (which brings its own group), or a rule that is one.
    fn rx_is_atom(&self, e: &Expr) -> bool {
        match e {
            Expr::Class(_) | Expr::Alt(_) => true,
            Expr::Lit(s) => s.len() == 1,
            Expr::Ref(r) => self.rx_is_atom(self.body(*r)),
            Expr::Seq(v) => v.len() == 1 && self.rx_is_atom(&v[0]),
            Expr::Token { .. } | Expr::Rep { .. } => false,
        }
    }

    /// The regex of a terminal expression (references inlined), or None if too long.
    fn regex(&self, e: &Expr) -> Option<String> {
        let mut out = String::new();
        self.regex_into(e, &mut out).then_some(out)
    }

    fn regex_into(&self, e: &Expr, out: &mut String) -> bool {
        if out.len() > MAX_REGEX_LEN {
            return false;
        }
        match e {
            Expr::Lit(s) if s.is_empty() => out.push_str("(?:)"),
            Expr::Lit(s) => s.iter().for_each(|&c| rx_char(c as u32, out)),
            Expr::Class(set) => rx_class(set, out),
            Expr::Ref(r) => match &self.term_rx[*r] {
                // no group needed: alternations and repetitions bring their own
                Some(rx) => out.push_str(rx),
                None => return false,
            },
            Expr::Token { .. } => return false,
            Expr::Seq(v) => {
                // every item's regex concatenates as is: alternations and repetitions bring
                // their own groups
                for e in v {
                    if !self.regex_into(e, out) {
                        return false;
                    }
                }
            }
            Expr::Alt(v) => {
                out.push_str("(?:");
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        out.push('|');
                    }
                    if !self.regex_into(e, out) {
                        return false;
                    }
                }
                out.push(')');
            }
            Expr::Rep { inner, min, max } => {
                if self.rx_is_atom(inner) {
                    self.regex_into(inner, out);
                } else {
                    out.push_str("(?:");
                    if !self.regex_into(inner, out) {
                        return false;
                    }
                    out.push(')');
                }
                out.push_str(&rep_suffix(*min, *max));
            }
        }
        out.len() <= MAX_REGEX_LEN
    }

    /// Whether `rx`, as one greedily matched lexeme, can be followed by any of `follow`
    /// without swallowing it: no byte that continues a complete match starts a
    /// character of `follow`.
    fn safe(&mut self, rx: &str, follow: &CharSet) -> bool {
        let key = (rx.to_string(), follow.ranges().to_vec());
        if let Some(&v) = self.safe_memo.get(&key) {
            return v;
        }
        let v = lexeme_is_safe(rx, follow);
        self.safe_memo.insert(key, v);
        v
    }

    fn choose_terminals(&mut self) {
        // Rules in dependency order (references first); recursive rules never qualify.
        let n = self.rules.len();
        let mut order = Vec::new();
        let mut state = vec![0u8; n]; // 0 new, 1 visiting, 2 done
        fn visit(t: &Translator, r: usize, state: &mut [u8], order: &mut Vec<usize>) {
            if state[r] != 0 {
                return;
            }
            state[r] = 1;
            for s in t.rule_refs(r) {
                visit(t, s, state, order);
            }
            state[r] = 2;
            order.push(r);
        }
        visit(self, self.root, &mut state, &mut order);
        for r in order {
            if r == self.root || !self.reachable[r] || self.is_recursive(r) {
                continue;
            }
            if !self.expr_is_terminal(self.body(r)) {
                continue;
            }
            let Some(rx) = self.regex(self.body(r)) else { continue };
            let follow = self.follow[r].clone();
            if self.safe(&rx, &follow) {
                self.terminal[r] = true;
                self.term_rx[r] = Some(rx);
            }
        }
    }

    /// A Lark terminal body (inside an uppercase definition).
    fn lark_terminal(&self, e: &Expr, out: &mut String) {
        match e {
            Expr::Lit(s) => out.push_str(&lark_string(s)),
            Expr::Class(set) => {
                out.push('/');
                rx_class(set, out);
                out.push('/');
            }
            Expr::Ref(r) => out.push_str(&self.names[*r].to_ascii_uppercase()),
            Expr::Token { .. } => unreachable!("tokens are never in terminals"),
            Expr::Seq(v) => {
                if v.is_empty() {
                    out.push_str("\"\"");
                }
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    self.lark_terminal_wrapped(e, matches!(e, Expr::Alt(_)), out);
                }
            }
            Expr::Alt(v) => {
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        out.push_str(" | ");
                    }
                    self.lark_terminal(e, out);
                }
            }
            Expr::Rep { max: Some(0), .. } => out.push_str("\"\""),
            Expr::Rep { inner, min, max } => {
                let wrap = matches!(&**inner, Expr::Seq(_) | Expr::Alt(_) | Expr::Rep { .. });
                self.lark_terminal_wrapped(inner, wrap, out);
                out.push_str(&rep_suffix(*min, *max));
            }
        }
    }

    fn lark_terminal_wrapped(&self, e: &Expr, wrap: bool, out: &mut String) {
        if wrap {
            out.push('(');
            self.lark_terminal(e, out);
            out.push(')');
        } else {
            self.lark_terminal(e, out);
        }
    }

    fn token_lark(token: &TokenRef, negated: bool) -> String {
        match (token, negated) {
            (TokenRef::Id(id), false) => format!("<[{id}]>"),
            (TokenRef::Id(id), true) => format!("<[^{id}]>"),
            (TokenRef::Name(n), _) => n.clone(),
        }
    }

    /// A Lark rule body for `e`, which `follow` can follow, and its precedence: `ALT`
    /// (an alternation), `SEQ` (a sequence or a repetition) or `ATOM`.
    fn lark_rule(&mut self, e: &Expr, follow: &CharSet) -> (String, u8) {
        match e {
            Expr::Lit(s) => (lark_string(s), ATOM),
            Expr::Class(set) => {
                let mut s = String::from("/");
                rx_class(set, &mut s);
                s.push('/');
                (s, ATOM)
            }
            Expr::Ref(r) if self.terminal[*r] => (self.names[*r].to_ascii_uppercase(), ATOM),
            Expr::Ref(r) => (self.names[*r].clone(), ATOM),
            Expr::Token { token, negated } => (Self::token_lark(token, *negated), ATOM),
            Expr::Seq(v) if v.is_empty() => ("\"\"".into(), ATOM),
            Expr::Seq(v) => {
                // follows[k]: what can follow item k
                let mut follows = vec![CharSet::new(); v.len()];
                let mut acc = follow.clone();
                for (k, item) in v.iter().enumerate().rev() {
                    follows[k] = acc.clone();
                    let f = self.expr_first(item);
                    if self.expr_nullable(item) {
                        acc.union_with(&f);
                    } else {
                        acc = f;
                    }
                }
                let mut parts = Vec::new();
                let mut i = 0;
                while i < v.len() {
                    let mut end = i; // exclusive end of the run emitted as one lexeme
                    if Self::expr_is_primitive(&v[i]) {
                        let mut j = i;
                        while j + 1 < v.len() && Self::expr_is_primitive(&v[j + 1]) {
                            j += 1;
                        }
                        // the longest safe run i..=k of two or more items
                        for k in (i + 1..=j).rev() {
                            let run = Expr::Seq(v[i..=k].to_vec());
                            if let Some(rx) = self.regex(&run) {
                                if self.safe(&rx, &follows[k]) {
                                    parts.push(format!("/{rx}/"));
                                    end = k + 1;
                                    break;
                                }
                            }
                        }
                    }
                    if end == i {
                        parts.push(self.lark_rule_min(&v[i], &follows[i], SEQ));
                        end = i + 1;
                    }
                    i = end;
                }
                let prec = if parts.len() == 1 { ATOM } else { SEQ };
                (parts.join(" "), prec)
            }
            Expr::Alt(v) => {
                let alts: Vec<String> = v.iter().map(|e| self.lark_rule(e, follow).0).collect();
                (alts.join(" | "), ALT)
            }
            Expr::Rep { max: Some(0), .. } => ("\"\"".into(), ATOM),
            Expr::Rep { inner, min, max } => {
                // a repetition of a small terminal is one lexeme, not a grammar-level loop
                // over (often single-character) lexemes
                let repeats = max.is_none_or(|m| m > 1);
                if Self::expr_is_primitive(e) || (repeats && self.expr_is_terminal(e)) {
                    if let Some(rx) =
                        self.regex(e).filter(|rx| Self::expr_is_primitive(e) || rx.len() <= MAX_INLINE_REP)
                    {
                        if self.safe(&rx, follow) {
                            return (format!("/{rx}/"), ATOM);
                        }
                    }
                }
                let inner_follow = self.rep_inner_follow(inner, *max, follow);
                let mut s = self.lark_rule_min(inner, &inner_follow, ATOM);
                s.push_str(&rep_suffix(*min, *max));
                (s, SEQ)
            }
        }
    }

    /// [`Translator::lark_rule`], parenthesized if its precedence is below `min`.
    fn lark_rule_min(&mut self, e: &Expr, follow: &CharSet, min: u8) -> String {
        match self.lark_rule(e, follow) {
            (s, p) if p >= min => s,
            (s, _) => format!("({s})"),
        }
    }

    fn emit(mut self) -> Result<String> {
        let mut out = String::from("%llguidance {}\n\n");
        let root = self.root;
        let order: Vec<usize> = std::iter::once(root).chain((0..self.rules.len()).filter(|&r| r != root)).collect();
        for r in order {
            if !self.reachable[r] {
                continue;
            }
            let body = self.body(r).clone();
            let mut s = String::new();
            if self.terminal[r] {
                s.push_str(&self.names[r].to_ascii_uppercase());
                s.push_str(": ");
                self.lark_terminal(&body, &mut s);
            } else {
                s.push_str(&self.names[r]);
                s.push_str(": ");
                let follow = self.follow[r].clone();
                s.push_str(&self.lark_rule(&body, &follow).0);
            }
            out.push_str(&s);
            out.push('\n');
        }
        Ok(out)
    }
}

/// Explores the DFA of `rx`: true if no accepting state has a live transition on a byte
/// that starts a character of `follow`. Regexes that fail to build or have too many
/// states count as unsafe.
fn lexeme_is_safe(rx: &str, follow: &CharSet) -> bool {
    let starts = follow.first_bytes();
    if !starts.iter().any(|&b| b) {
        return true;
    }
    let Ok(mut re) = llguidance::derivre::Regex::new(rx) else { return false };
    // one representative byte per alphabet class
    let mut reps: Vec<u8> = Vec::new();
    let mut seen_class = vec![false; 256];
    for b in 0..=255u8 {
        let c = re.alpha().map(b);
        if !seen_class[c] {
            seen_class[c] = true;
            reps.push(b);
        }
    }
    let mut start_class = vec![false; 256];
    for b in 0..=255u8 {
        if starts[b as usize] {
            start_class[re.alpha().map(b)] = true;
        }
    }
    let init = re.initial_state();
    let mut seen = std::collections::HashSet::from([init]);
    let mut stack = vec![init];
    while let Some(s) = stack.pop() {
        let accepting = re.is_accepting(s);
        for &rep in &reps {
            let t = re.transition(s, rep);
            if t.is_dead() {
                continue;
            }
            if accepting && start_class[re.alpha().map(rep)] {
                return false;
            }
            if seen.insert(t) {
                if seen.len() > MAX_DFA_STATES {
                    return false;
                }
                stack.push(t);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_llama_cpp_syntax() {
        let g = r#"
# comment
root ::= "a\x41\u00e9" [^a-c\]] . item{2,3} ("x" | "y")* other? # trailing comment
item ::= [0-9]+ "-" | <[5]> | !<[6]>
unused ::= "z"
other ::=
"#;
        let lark = gbnf_to_lark(g).unwrap();
        let expected = r#"%llguidance {}

start: /aA\x{E9}[\x{0}-\x{5C}\x{5E}-`d-\x{10FFFF}][\x{0}-\x{10FFFF}]/ item{2,3} /(?:x|y)*/ OTHER?
item: /[0-9]+\x{2D}/ | <[5]> | <[^6]>
OTHER: ""
"#;
        assert_eq!(lark, expected);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = |g: &str| gbnf_to_lark(g).unwrap_err().to_string();
        assert!(e("root ::= foo\n").contains("undefined rule 'foo'"), "{}", e("root ::= foo\n"));
        assert!(e("rot ::= \"a\"\n").contains("no 'root' rule"));
        assert!(e("root ::= \"abc\n").contains("unterminated string"));
        assert!(e("root ::= [abc\n").contains("unterminated character class"));
        assert!(e("root ::= (\"a\" \n").contains("unclosed '('"));
        assert!(e("root ::= * \"a\"\n").contains("needs a preceding item"));
        assert!(e("root ::= \"a\"{3,1}\n").contains("below its minimum"));
        assert!(e("root ::= \"\\q\"\n").contains("unknown escape"));
        assert!(e("root : \"a\"\n").contains("expected '::='"));
        assert!(e(&format!("root ::= {}\"a\"{}\n", "(".repeat(100), ")".repeat(100))).contains("nested deeper"));
        assert!(e("root ::= \"a\"?????\n").contains("repetition operators"));
        let msg = e("root ::= \"a\"\nx ::= \"b\" )\n");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn greedy_unsafe_pieces_stay_rules() {
        // ws before "\n" must not be a lexeme that swallows the newline
        let lark = gbnf_to_lark("root ::= num \"\\n\"\nnum ::= [0-9]+ ws\nws ::= [ \\t\\n]*\n").unwrap();
        assert!(!lark.contains("WS:"), "{lark}");
        assert!(lark.contains("num: /[0-9]+/ ws\n") && lark.contains("ws: /[\\x{9}\\x{A} ]/*\n"), "{lark}");
        // safe ones become terminals
        let lark = gbnf_to_lark("root ::= num \";\"\nnum ::= [0-9]+ ws\nws ::= [ \\t\\n]*\n").unwrap();
        assert!(lark.contains("NUM: ") && lark.contains("WS: "), "{lark}");
        // a repetition of a terminal rule is one lexeme, not a loop over one-char lexemes
        let lark = gbnf_to_lark("root ::= ch+ (\" \" ch+)*\nch ::= l | d\nl ::= [a-z]\nd ::= [0-9]\n").unwrap();
        assert!(lark.starts_with("%llguidance {}\n\nstart: /(?:[a-z]|[0-9])+/ /(?: (?:[a-z]|[0-9])+)*/\n"), "{lark}");
    }

    #[test]
    fn safety_check_uses_the_dfa() {
        let f = CharSet::single(':' as u32);
        assert!(lexeme_is_safe("\"[^\"]*\" ?", &f));
        assert!(!lexeme_is_safe("[a-z:]+", &f));
        assert!(lexeme_is_safe("[a-z:]+", &CharSet::single('0' as u32)));
        assert!(!lexeme_is_safe("a|ab", &CharSet::single('x' as u32)) || lexeme_is_safe("a|ab", &CharSet::new()));
        assert!(!lexeme_is_safe("a|ab", &CharSet::single('b' as u32)));
    }
}
