//! Constrained decoding: a grammar (GBNF, Lark, a regex, a JSON schema or "any JSON
//! object") turned into a token mask at each decoding step, with
//! [llguidance](https://github.com/guidance-ai/llguidance) (the engine behind llama.cpp's
//! `common/llguidance.cpp`).
//!
//! - [`Vocab`]: the token trie of one model, built once and shared (`Arc`) by every
//!   request: [`Vocab::from_tokenizer`] / [`Vocab::from_shared_tokenizer`] from the
//!   workspace tokenizer, or [`Vocab::new`] from raw token bytes.
//! - [`Spec`]: what the output must match.
//! - [`Constraint`]: one request's parser state: [`Constraint::apply`] masks the logits,
//!   [`Constraint::accept`] advances by the sampled token, [`Constraint::is_finished`]
//!   says when nothing but end-of-generation can follow.
//!
//! GBNF is translated to llguidance's Lark dialect ([`gbnf_to_lark`], see the `gbnf`
//! module docs for how lexemes are chosen); Lark text starting with `%llguidance` is
//! accepted as GBNF input too, as llama.cpp does.
//!
//! Integration notes:
//! - [`Vocab`] is `Send + Sync`: build it once per model (0.2–1.2 s for 49k–262k tokens)
//!   and share it; [`Constraint`] is `Send`, one per request (compiling a JSON schema
//!   takes about a millisecond). [`Constraint::apply`] costs tens of microseconds.
//! - Prefer [`Vocab::from_shared_tokenizer`]: text the grammar forces (fixed JSON keys,
//!   GBNF literals) is then offered only in the tokenizer's canonical tokenization, as in
//!   llama.cpp. With [`Vocab::from_tokenizer`] any tokenization of it is allowed.
//! - End-of-generation tokens are all of `Tokenizer::eog_ids()`; the grammar allows them
//!   exactly where it can end. [`Constraint::is_finished`] turns true when nothing else
//!   can follow (e.g. after the closing `}` of a JSON object with no trailing whitespace
//!   allowed), so the caller can stop without sampling EOS.
//! - JSON schemas follow llguidance: flexible whitespace, unsupported keywords are
//!   errors; a schema may carry `"x-guidance": {"whitespace_flexible": false}` (compact
//!   JSON) or `{"lenient": true}` (ignore unsupported keywords).
//!
//! ```
//! # fn main() -> gguf_grammar::Result<()> {
//! use std::sync::Arc;
//! // A byte-level vocabulary (token i = byte i) plus an end-of-generation token 256; with
//! // a model: `Vocab::from_shared_tokenizer(Arc::new(tokenizer))`.
//! let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
//! bytes.push(b"</s>".to_vec());
//! let mut special = vec![false; 256];
//! special.push(true);
//! let vocab = Arc::new(gguf_grammar::Vocab::new(bytes, special, vec![256])?);
//! let mut c = gguf_grammar::Constraint::new(&vocab, &gguf_grammar::Spec::Gbnf(r#"root ::= "ok""#.into()))?;
//! let mut out = Vec::new();
//! for _ in 0..8 {
//!     let mut logits = vec![0f32; vocab.n_vocab()]; // a model's forward pass goes here
//!     c.apply(&mut logits)?;
//!     let token = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
//!     if vocab.is_eos(token) {
//!         break;
//!     }
//!     c.accept(token)?;
//!     out.push(token as u8);
//!     if c.is_finished() {
//!         break;
//!     }
//! }
//! assert_eq!(out, b"ok");
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod charset;
mod gbnf;

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

pub use gbnf::gbnf_to_lark;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The token list given to [`Vocab::new`] is unusable.
    #[error("invalid vocabulary: {0}")]
    Vocab(String),
    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] gguf_tokenizer::Error),
    /// A GBNF grammar does not parse (the message names the line, column and problem).
    #[error("invalid GBNF grammar: {0}")]
    Gbnf(String),
    /// A Lark grammar (or a GBNF grammar after translation, or a regex) is rejected by
    /// llguidance.
    #[error("invalid grammar: {0}")]
    Grammar(String),
    /// A JSON schema is rejected by llguidance.
    #[error("invalid JSON schema: {0}")]
    Schema(String),
    /// [`Constraint::accept`] got a token the grammar does not allow at this point.
    #[error("token {token} ({text:?}) is not allowed by the grammar here")]
    TokenNotAllowed {
        /// The token id.
        token: u32,
        /// Its text (lossy UTF-8; special tokens as `<...>` text).
        text: String,
    },
    /// A token id is not in the vocabulary.
    #[error("token id {token} out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// The logits slice is shorter than the vocabulary.
    #[error("{len} logits for a vocabulary of {n_vocab} tokens")]
    LogitsLen {
        /// The slice length.
        len: usize,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// The parser failed while computing a mask or consuming a token (for example, no
    /// token of the vocabulary can continue the output).
    #[error("constraint failed: {0}")]
    Matcher(String),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn anyhow_msg(e: impl std::fmt::Display) -> String {
    // llguidance's anyhow errors: `{:#}` would also print context chains, `{}` is enough.
    e.to_string()
}

/// Tokenizes forced text canonically: `None` when it cannot (the trie's greedy
/// tokenization is used then).
type EncodeFn = Box<dyn Fn(&[u8]) -> Option<Vec<u32>> + Send + Sync>;

/// Token bytes, special flags and end-of-generation ids: what [`Vocab::new`] takes.
type VocabParts = (Vec<Vec<u8>>, Vec<bool>, Vec<u32>);

/// Builds the error of a grammar that llguidance rejects.
type CompileError = fn(String) -> Error;

/// The tokenizer environment llguidance sees.
struct Env {
    trie: TokTrie,
    encode: Option<EncodeFn>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        if let Some(f) = &self.encode {
            // Only a tokenization that spells exactly `s` may be forced.
            if let Some(toks) = f(s).filter(|t| self.trie.decode_raw(t) == s) {
                return toks;
            }
        }
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.encode.is_some()
    }
}

/// One model's vocabulary as llguidance needs it: the token trie (special tokens marked
/// so text grammars never produce them), the end-of-generation tokens, and the parser
/// factory shared by all constraints. Build it once per model and share it in an `Arc`;
/// it is `Send + Sync`.
pub struct Vocab {
    factory: ParserFactory,
    n_vocab: usize,
    eos: Vec<u32>,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocab").field("n_vocab", &self.n_vocab).field("eos", &self.eos).finish()
    }
}

impl Vocab {
    /// A vocabulary from raw token bytes: `token_bytes[i]` is what the detokenizer outputs
    /// for token `i`, `special[i]` marks control/special tokens (grammars never allow
    /// them, except EOS and explicit `<token>` references), `eos` are the
    /// end-of-generation ids (allowed exactly when the grammar can end; treated as
    /// special whatever `special` says). Forced text is tokenized greedily over the trie.
    pub fn new(token_bytes: Vec<Vec<u8>>, special: Vec<bool>, eos: Vec<u32>) -> Result<Vocab> {
        Vocab::build(token_bytes, special, eos, None)
    }

    /// Like [`Vocab::new`], with `encode` giving the canonical tokenization of forced text
    /// (the tokenizer's encode without BOS or special-token parsing). Text the grammar
    /// forces (e.g. fixed JSON keys) is then always produced in that tokenization, as
    /// llama.cpp's llguidance integration does. A result that does not spell the text
    /// exactly is ignored.
    pub fn with_encoder(
        token_bytes: Vec<Vec<u8>>,
        special: Vec<bool>,
        eos: Vec<u32>,
        encode: impl Fn(&[u8]) -> Option<Vec<u32>> + Send + Sync + 'static,
    ) -> Result<Vocab> {
        Vocab::build(token_bytes, special, eos, Some(Box::new(encode)))
    }

    /// The vocabulary of `t`: each token's bytes as `token_to_piece(id, false)` gives them;
    /// tokens that render as nothing there (control, unknown) are special and keep their
    /// text for `<token>` references; the end-of-generation ids are `t.eog_ids()`. Like
    /// llama.cpp's `llama_sampler_llg_new_tokenizer`. Forced text is tokenized greedily
    /// over the trie; see [`Vocab::from_shared_tokenizer`] for canonical forcing.
    pub fn from_tokenizer(t: &gguf_tokenizer::Tokenizer) -> Result<Vocab> {
        let (bytes, special, eos) = Self::tokenizer_parts(t)?;
        Vocab::build(bytes, special, eos, None)
    }

    /// [`Vocab::from_tokenizer`], keeping `t` to tokenize forced text canonically
    /// (`encode_bytes` without BOS or special parsing).
    pub fn from_shared_tokenizer(t: Arc<gguf_tokenizer::Tokenizer>) -> Result<Vocab> {
        let (bytes, special, eos) = Self::tokenizer_parts(&t)?;
        let encode = move |s: &[u8]| t.encode_bytes(s, false, false).ok();
        Vocab::build(bytes, special, eos, Some(Box::new(encode)))
    }

    fn tokenizer_parts(t: &gguf_tokenizer::Tokenizer) -> Result<VocabParts> {
        let n = t.n_vocab();
        let mut bytes = Vec::with_capacity(n);
        let mut special = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let piece = t.token_to_piece(id, false)?;
            if piece.is_empty() {
                bytes.push(t.token_to_piece(id, true)?);
                special.push(true);
            } else {
                bytes.push(piece);
                special.push(false);
            }
        }
        let mut eos = t.eog_ids();
        if eos.is_empty() {
            eos.extend(t.eos());
        }
        Ok((bytes, special, eos))
    }

    fn build(
        mut token_bytes: Vec<Vec<u8>>,
        special: Vec<bool>,
        eos: Vec<u32>,
        encode: Option<EncodeFn>,
    ) -> Result<Vocab> {
        let n = token_bytes.len();
        if n == 0 {
            return Err(Error::Vocab("no tokens".into()));
        }
        if u32::try_from(n).is_err() {
            return Err(Error::Vocab(format!("{n} tokens is too many")));
        }
        if special.len() != n {
            return Err(Error::Vocab(format!("{} special flags for {n} tokens", special.len())));
        }
        if eos.is_empty() {
            return Err(Error::Vocab("no end-of-generation token".into()));
        }
        if let Some(&bad) = eos.iter().find(|&&e| e as usize >= n) {
            return Err(Error::Vocab(format!("end-of-generation token {bad} out of range ({n} tokens)")));
        }
        for (i, b) in token_bytes.iter_mut().enumerate() {
            if special[i] || eos.contains(&(i as u32)) {
                // llguidance's marker for special tokens: text grammars never match 0xFF.
                let mut marked = Vec::with_capacity(b.len() + 1);
                marked.push(TokTrie::SPECIAL_TOKEN_MARKER);
                marked.extend_from_slice(b);
                *b = marked;
            }
            // A normal token starting with 0xFF (byte-level BPE's raw byte 0xFF) is never
            // valid UTF-8, so no text grammar allows it; llguidance counts it as special.
        }
        let info = TokRxInfo::new(n as u32, eos[0]);
        let trie = TokTrie::from(&info, &token_bytes).with_eos_tokens(&eos);
        let env: TokEnv = Arc::new(Env { trie, encode });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| Error::Vocab(anyhow_msg(e)))?;
        factory.quiet();
        // errors name the problem without dumping parser state and grammar
        factory.limits_mut().verbose_errors = false;
        Ok(Vocab { factory, n_vocab: n, eos })
    }

    /// The number of tokens.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The end-of-generation ids.
    pub fn eos(&self) -> &[u32] {
        &self.eos
    }

    /// Whether `token` ends generation.
    pub fn is_eos(&self, token: u32) -> bool {
        self.eos.contains(&token)
    }

    /// The bytes of `token` as the trie holds them (special tokens start with 0xFF), or
    /// nothing for an id out of range.
    pub fn token_bytes(&self, token: u32) -> &[u8] {
        if (token as usize) < self.n_vocab {
            self.trie().token(token)
        } else {
            &[]
        }
    }

    /// The text of `tokens` with special tokens left out.
    pub fn decode(&self, tokens: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for &t in tokens {
            let b = self.token_bytes(t);
            if b.first() != Some(&TokTrie::SPECIAL_TOKEN_MARKER) {
                out.extend_from_slice(b);
            }
        }
        out
    }

    fn trie(&self) -> &TokTrie {
        self.factory.tok_env().tok_trie()
    }

    /// The id of the token whose text is exactly `text` (a special token's text, or else
    /// a normal token's), for GBNF `<text>` references.
    fn token_by_text(&self, text: &[u8]) -> Option<u32> {
        let trie = self.trie();
        let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
        marked.extend_from_slice(text);
        trie.token_id(&marked).or_else(|| trie.token_id(text))
    }
}

/// What the generated text must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    /// A llama.cpp GBNF grammar (start rule `root`). Text starting with `%llguidance` is
    /// taken as Lark, as llama.cpp does.
    Gbnf(String),
    /// A JSON schema (llguidance's support: `$ref`/`$defs`, `anyOf`/`oneOf`/`allOf`,
    /// `enum`/`const`, string lengths/patterns/formats, numeric bounds, array and object
    /// constraints; unsupported keywords are errors). Whitespace between JSON tokens is
    /// flexible unless the schema's `x-guidance` options say otherwise.
    JsonSchema(serde_json::Value),
    /// Any JSON object (`{"type": "object"}`): OpenAI's `json_object` response format.
    JsonObject,
    /// An llguidance Lark grammar (start rule `start`).
    Lark(String),
    /// A regular expression (Rust `regex` syntax) the whole output must match.
    Regex(String),
}

impl Spec {
    /// The llguidance grammar, and which error variant its compile errors belong to.
    fn to_grammar(&self, vocab: &Vocab) -> Result<(TopLevelGrammar, CompileError)> {
        Ok(match self {
            Spec::Gbnf(src) => {
                if src.trim_start().starts_with("%llguidance") {
                    (TopLevelGrammar::from_lark(src.clone()), Error::Grammar)
                } else {
                    let lookup = |t: &[u8]| vocab.token_by_text(t);
                    let lark = gbnf::to_lark(src, Some(&lookup))?;
                    (TopLevelGrammar::from_lark(lark), Error::Grammar)
                }
            }
            Spec::JsonSchema(v) => (TopLevelGrammar::from_json_schema(v.clone()), Error::Schema),
            Spec::JsonObject => {
                (TopLevelGrammar::from_json_schema(serde_json::json!({"type": "object"})), Error::Schema)
            }
            Spec::Lark(src) => (TopLevelGrammar::from_lark(src.clone()), Error::Grammar),
            Spec::Regex(rx) => (TopLevelGrammar::from_regex(rx), Error::Grammar),
        })
    }
}

/// One request's grammar state. `Send` (move it to the thread that samples), not `Sync`.
pub struct Constraint {
    vocab: Arc<Vocab>,
    matcher: Matcher,
    /// The mask for the current state, computed on demand and dropped by `accept`.
    mask: Option<SimpleVob>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("finished", &self.is_finished()).finish_non_exhaustive()
    }
}

impl Constraint {
    /// Compiles `spec` against `vocab`. Errors name what is wrong in the grammar or schema.
    pub fn new(vocab: &Arc<Vocab>, spec: &Spec) -> Result<Constraint> {
        let (grammar, err) = spec.to_grammar(vocab)?;
        let parser = vocab.factory.create_parser(grammar).map_err(|e| err(anyhow_msg(e)))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(err(e));
        }
        Ok(Constraint { vocab: vocab.clone(), matcher, mask: None })
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Arc<Vocab> {
        &self.vocab
    }

    fn mask(&mut self) -> Result<&SimpleVob> {
        if self.mask.is_none() {
            let m = self.matcher.compute_mask_or_eos().map_err(|e| Error::Matcher(anyhow_msg(e)))?;
            self.mask = Some(m);
        }
        Ok(self.mask.as_ref().expect("just set"))
    }

    /// Sets the logits of every token the grammar forbids now to `-inf` (EOS is allowed
    /// only where the grammar can end; once it is finished, only EOS). Entries past the
    /// vocabulary (padded output layers) are forbidden too.
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<()> {
        let n_vocab = self.vocab.n_vocab;
        if logits.len() < n_vocab {
            return Err(Error::LogitsLen { len: logits.len(), n_vocab });
        }
        let mask = self.mask()?;
        let (head, tail) = logits.split_at_mut(n_vocab);
        for (chunk, &word) in head.chunks_mut(32).zip(mask.as_slice()) {
            match word {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                _ => {
                    // branchless, so it vectorizes
                    for (i, l) in chunk.iter_mut().enumerate() {
                        let keep = (word >> i) & 1 != 0;
                        *l = if keep { *l } else { f32::NEG_INFINITY };
                    }
                }
            }
        }
        tail.fill(f32::NEG_INFINITY);
        Ok(())
    }

    /// Whether the grammar allows `token` now (computes the mask if needed).
    pub fn is_allowed(&mut self, token: u32) -> Result<bool> {
        if token as usize >= self.vocab.n_vocab {
            return Err(Error::TokenOutOfRange { token, n_vocab: self.vocab.n_vocab });
        }
        Ok(self.mask()?.is_allowed(token))
    }

    /// Whether the grammar can end here (EOS is allowed now).
    pub fn can_end(&mut self) -> Result<bool> {
        let eos = self.vocab.eos[0];
        self.is_allowed(eos)
    }

    /// Advances by the sampled `token`. A token the grammar forbids is an error and leaves
    /// the state unchanged. Accepting EOS finishes the constraint.
    pub fn accept(&mut self, token: u32) -> Result<()> {
        if self.matcher.is_stopped() && self.vocab.is_eos(token) && !self.matcher.is_error() {
            // finished without EOS (nothing else could follow): EOS just confirms it
            return Ok(());
        }
        if !self.is_allowed(token)? {
            let b = self.vocab.token_bytes(token);
            let b = b.strip_prefix(&[TokTrie::SPECIAL_TOKEN_MARKER]).unwrap_or(b);
            return Err(Error::TokenNotAllowed { token, text: String::from_utf8_lossy(b).into_owned() });
        }
        self.mask = None;
        self.matcher.consume_token(token).map_err(|e| Error::Matcher(anyhow_msg(e)))
    }

    /// True when the grammar is complete and nothing but EOS can follow (or EOS was
    /// accepted).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }

    /// Warnings llguidance gave while compiling the grammar.
    pub fn warnings(&mut self) -> Vec<String> {
        self.matcher.grammar_warnings()
    }
}

// lets the unit tests share `tests/common` with the integration tests
#[cfg(test)]
extern crate self as gguf_grammar;
#[cfg(test)]
mod tests;
