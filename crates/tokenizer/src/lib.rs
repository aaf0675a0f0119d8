//! Tokenizers rebuilt from GGUF metadata, identical to llama.cpp's (`llama-vocab.cpp`,
//! `unicode.cpp` at the pinned commit), and chat templates.
//!
//! - [`Tokenizer::from_gguf`] reads `tokenizer.ggml.*`: the model (`gpt2` byte-level
//!   BPE, `llama` SentencePiece, `bert` WordPiece, `t5` unigram, `gemma4` SPM-style BPE),
//!   the pre-tokenizer (`tokenizer.ggml.pre`, from the [`pretok`] registry), token kinds,
//!   special ids and flags.
//! - [`Tokenizer::encode`] is `llama_tokenize`; [`Tokenizer::token_to_piece`] is
//!   `llama_token_to_piece`; [`Tokenizer::decode`] is `llama_detokenize`;
//!   [`StreamDecoder`] emits only complete UTF-8.
//! - [`chat`] renders `tokenizer.chat_template` (Jinja, via minijinja) or a named
//!   built-in template.
#![deny(missing_docs)]

mod bpe;
pub mod chat;

mod hash;
pub mod pretok;
pub mod regex;
mod spm;
mod texts;
mod ugm;
pub mod unicode;
mod unicode_data;
mod wpm;

use std::collections::BTreeSet;

use gguf_format::{Array, Metadata, StringArray, Value};

use texts::{TextIndex, Texts};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required metadata key is absent.
    #[error("missing metadata key {0}")]
    MissingKey(String),
    /// A metadata key has the wrong type or an invalid value.
    #[error("bad metadata {key}: {message}")]
    BadMetadata {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// `tokenizer.ggml.model` names a model this crate does not implement.
    #[error("unknown tokenizer model '{name}' (known: {known})")]
    UnknownModel {
        /// The name found.
        name: String,
        /// The known names.
        known: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer llama.cpp does not accept.
    #[error("unknown pre-tokenizer type '{name}' (known: {known})")]
    UnknownPreTokenizer {
        /// The name found.
        name: String,
        /// The known names.
        known: String,
    },
    /// A pre-tokenizer regex failed to compile.
    #[error("bad regex '{pattern}': {message}")]
    Regex {
        /// The pattern.
        pattern: String,
        /// What is wrong.
        message: String,
    },
    /// A token id is not in the vocabulary.
    #[error("token id {id} out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// Byte fallback needs a token the vocabulary lacks.
    #[error("no token for byte 0x{0:02X} in the vocabulary")]
    NoByteToken(u8),
    /// The text decodes to a codepoint above U+10FFFF (llama.cpp throws here too).
    #[error("invalid codepoint U+{0:X} in input")]
    InvalidCodepoint(u32),
    /// A special token the operation needs is not defined.
    #[error("the vocabulary has no {0} token")]
    MissingSpecial(&'static str),
    /// A text is too long for an encoder's index types.
    #[error("input of {len} bytes is too long (at most {max} in one piece)")]
    InputTooLong {
        /// The length.
        len: usize,
        /// The most supported.
        max: usize,
    },
    /// A chat template failed to parse or render.
    #[error("chat template: {0}")]
    Template(String),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Token attribute bits (llama.cpp's `llama_token_attr`).
pub const ATTR_UNKNOWN: u32 = 1 << 0;
/// Unused token.
pub const ATTR_UNUSED: u32 = 1 << 1;
/// Normal token.
pub const ATTR_NORMAL: u32 = 1 << 2;
/// Control token.
pub const ATTR_CONTROL: u32 = 1 << 3;
/// User-defined token.
pub const ATTR_USER_DEFINED: u32 = 1 << 4;
/// Byte token (`<0xXX>`).
pub const ATTR_BYTE: u32 = 1 << 5;
/// Strip whitespace to the left when parsing special text.
pub const ATTR_LSTRIP: u32 = 1 << 7;
/// Strip whitespace to the right when parsing special text.
pub const ATTR_RSTRIP: u32 = 1 << 8;

/// One vocabulary entry.
#[derive(Debug, Clone, Copy)]
pub struct TokenData<'a> {
    /// The token's text as stored in the file.
    pub text: &'a [u8],
    /// Score (SPM/UGM) or 0.
    pub score: f32,
    /// Attribute bits (`ATTR_*`).
    pub attr: u32,
}

/// Special token ids.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpecialIds {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn.
    pub eot: Option<u32>,
    /// End of message.
    pub eom: Option<u32>,
    /// Unknown.
    pub unk: Option<u32>,
    /// Separator.
    pub sep: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Mask.
    pub mask: Option<u32>,
    /// Fill-in-the-middle prefix.
    pub fim_pre: Option<u32>,
    /// FIM suffix.
    pub fim_suf: Option<u32>,
    /// FIM middle.
    pub fim_mid: Option<u32>,
    /// FIM pad.
    pub fim_pad: Option<u32>,
    /// FIM repo.
    pub fim_rep: Option<u32>,
    /// FIM file separator.
    pub fim_sep: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelKind {
    Spm,
    Bpe,
    Wpm,
    Ugm,
}

/// The tokenizer models this crate implements, by `tokenizer.ggml.model` name.
pub const KNOWN_MODELS: &[&str] = &["gpt2", "llama", "bert", "t5", "gemma4"];

/// The vocabulary and its flags (llama.cpp's `llama_vocab::impl`).
#[derive(Debug)]
pub(crate) struct Vocab {
    /// Token texts as stored in the file, by id.
    pub(crate) texts: Texts,
    /// Score of each token (SPM/UGM) or 0.
    pub(crate) scores: Vec<f32>,
    /// Attribute bits (`ATTR_*`) of each token.
    pub(crate) attrs: Vec<u32>,
    token_to_id: TextIndex,
    pub(crate) special: SpecialIds,
    pub(crate) max_token_len: usize,
    kind: ModelKind,
    add_space_prefix: bool,
    add_bos: bool,
    add_eos: bool,
    add_sep: bool,
    pub(crate) ignore_merges: bool,
    clean_spaces: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
    treat_whitespace_as_suffix: bool,
    pub(crate) lowercase: bool,
    pub(crate) strip_accents: bool,
    /// Control/user-defined/unknown tokens, longest text first.
    cache_special: Vec<u32>,
    /// One automaton over the `cache_special` texts (pattern i = `cache_special[i]`), to
    /// find which of them occur in a text at all before the ordered partition.
    special_ac: Option<aho_corasick::AhoCorasick>,
    /// `<0xXX>` (or raw byte) token of each byte, for SPM/UGM byte fallback.
    byte_tokens: Vec<Option<u32>>,
    /// `token_to_piece(id, special = true)` for every token.
    pieces: Texts,
    eog: BTreeSet<u32>,
    /// SPM: the adjacent symbol pairs of all token texts, built on the first long text
    /// (see `spm::tokenize`).
    spm_pairs: std::sync::OnceLock<Option<Vec<u64>>>,
}

impl Vocab {
    #[inline]
    pub(crate) fn text_to_token(&self, t: &[u8]) -> Option<u32> {
        self.token_to_id.get(&self.texts, t)
    }

    /// Token `id`'s text as stored in the file.
    #[inline]
    pub(crate) fn text(&self, id: u32) -> &[u8] {
        self.texts.get(id as usize)
    }

    /// Number of tokens.
    #[inline]
    pub(crate) fn n_tokens(&self) -> usize {
        self.texts.len()
    }

    pub(crate) fn spm_pairs(&self) -> Option<&[u64]> {
        self.spm_pairs.get_or_init(|| spm::adjacent_pairs(self)).as_deref()
    }

    pub(crate) fn byte_to_token(&self, b: u8) -> Result<u32> {
        if let Some(t) = self.byte_tokens.get(b as usize) {
            return t.ok_or(Error::NoByteToken(b));
        }
        self.byte_to_token_slow(b)
    }

    fn byte_to_token_slow(&self, b: u8) -> Result<u32> {
        match self.kind {
            ModelKind::Spm | ModelKind::Ugm => self
                .text_to_token(format!("<0x{b:02X}>").as_bytes())
                .or_else(|| self.text_to_token(&[b]))
                .ok_or(Error::NoByteToken(b)),
            ModelKind::Bpe | ModelKind::Wpm => {
                let mut s = Vec::new();
                unicode::push_utf8(&mut s, unicode::byte_to_cpt_table()[b as usize]);
                self.text_to_token(&s).ok_or(Error::NoByteToken(b))
            }
        }
    }

    fn token_to_byte(&self, id: u32) -> u8 {
        let t = self.text(id);
        // strtol of text[3..5] in base 16
        let hex = t.get(3..5).unwrap_or(b"");
        let mut v: u32 = 0;
        for &c in hex {
            match (c as char).to_digit(16) {
                Some(d) => v = v * 16 + d,
                None => break,
            }
        }
        v as u8
    }

    /// The piece of a token as llama.cpp caches it (`special = true`).
    fn piece_uncached(&self, id: u32) -> Result<Vec<u8>> {
        let (text, attr) = (self.text(id), self.attrs[id as usize]);
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED) != 0 {
            return Ok(text.to_vec());
        }
        let unescape = |s: &[u8]| -> Vec<u8> {
            let mut out = Vec::with_capacity(s.len());
            let mut i = 0;
            while i < s.len() {
                if s[i..].starts_with("\u{2581}".as_bytes()) {
                    out.push(b' ');
                    i += 3;
                } else {
                    out.push(s[i]);
                    i += 1;
                }
            }
            out
        };
        match self.kind {
            ModelKind::Spm | ModelKind::Wpm | ModelKind::Ugm | ModelKind::Bpe => {
                if attr & ATTR_NORMAL != 0 {
                    if self.kind != ModelKind::Bpe || self.escape_whitespaces {
                        return Ok(unescape(text));
                    }
                    // each codepoint outside the byte table repeats the whole text: a
                    // long token of them would take quadratic memory
                    let len = decoded_gpt2_len(text);
                    if len > MAX_PIECE.max(4 * text.len()) {
                        return Err(Error::BadMetadata {
                            key: "tokenizer.ggml.tokens".into(),
                            message: format!(
                                "token {id} ({} bytes) would decode to a {len}-byte piece (each codepoint outside \
                                 the GPT-2 byte table repeats the whole text)",
                                text.len()
                            ),
                        });
                    }
                    let piece = decode_gpt2_text(text);
                    debug_assert_eq!(piece.len(), len);
                    return Ok(piece);
                }
                if attr & ATTR_BYTE != 0 {
                    return Ok(vec![self.token_to_byte(id)]);
                }
                Ok(Vec::new())
            }
        }
    }
}

/// Longest piece (beyond 4 bytes per text byte) a token may decode to.
const MAX_PIECE: usize = 1 << 20;

/// The length of [`decode_gpt2_text`]'s result, without building it.
fn decoded_gpt2_len(text: &[u8]) -> usize {
    let mut len = 0usize;
    let mut off = 0;
    while off < text.len() {
        let c = unicode::cpt_from_utf8(text, &mut off).unwrap_or_else(|| {
            off += 1;
            0xFFFD
        });
        len = len.saturating_add(match unicode::cpt_to_byte(c) {
            Some(_) => 1,
            None => {
                let n = match c {
                    0..=0x7F => 1,
                    0x80..=0x7FF => 2,
                    0x800..=0xFFFF => 3,
                    0x10000..=0x10FFFF => 4,
                    _ => 0,
                };
                "[UNK_BYTE_0x".len() + 2 * n + text.len() + 1
            }
        });
    }
    len
}

/// llama.cpp's `llama_decode_text`: GPT-2 byte-level text back to bytes; a codepoint
/// outside the byte table becomes `[UNK_BYTE_0x..<text>]`.
fn decode_gpt2_text(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in unicode::cpts_from_utf8(text) {
        match unicode::cpt_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut u = Vec::new();
                unicode::push_utf8(&mut u, c);
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in &u {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
    out
}

#[derive(Debug)]
enum Model {
    Spm,
    Bpe(Box<bpe::Bpe>),
    Wpm,
    Ugm(Box<ugm::Ugm>),
}

/// A tokenizer built from GGUF metadata.
#[derive(Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    model_name: String,
    pre_name: Option<String>,
}

fn get_bool(md: &Metadata, key: &str) -> Result<Option<bool>> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(Error::BadMetadata {
            key: key.into(),
            message: format!("expected bool, found {}", v.value_type().name()),
        }),
    }
}

fn get_id(md: &Metadata, key: &str) -> Result<Option<u64>> {
    match md.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| Error::BadMetadata {
            key: key.into(),
            message: format!("expected an unsigned integer, found {}", v.value_type().name()),
        }),
    }
}

/// Texts llama.cpp treats as end-of-generation (`special_eog_ids`).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

impl Tokenizer {
    /// Builds the tokenizer described by `md` (the `tokenizer.ggml.*` keys), as
    /// llama.cpp's `llama_vocab::load` does.
    pub fn from_gguf(md: &Metadata) -> Result<Tokenizer> {
        let model_name = md
            .get_str("tokenizer.ggml.model")
            .ok_or_else(|| Error::MissingKey("tokenizer.ggml.model".into()))?
            .to_string();
        let mut pre_name = md.get_str("tokenizer.ggml.pre").map(str::to_string);
        let unknown_model = || Error::UnknownModel { name: model_name.clone(), known: KNOWN_MODELS.join(", ") };
        let mut sp = SpecialIds::default();
        let (kind, mut add_space_prefix, add_bos, add_eos, add_sep, clean_spaces);
        let mut escape_whitespaces = true;
        let mut ignore_merges = false;
        let mut no_lowercase = false;
        let mut pre: Option<&'static pretok::PreTokenizer> = None;
        match model_name.as_str() {
            "llama" => {
                kind = ModelKind::Spm;
                (sp.bos, sp.eos, sp.unk) = (Some(1), Some(2), Some(0));
            }
            "bert" => {
                kind = ModelKind::Wpm;
                (sp.bos, sp.unk, sp.sep, sp.pad, sp.mask) = (Some(101), Some(100), Some(102), Some(0), Some(103));
            }
            "gpt2" | "gemma4" => {
                kind = ModelKind::Bpe;
                if model_name == "gemma4" {
                    pre_name = Some("gemma4".into());
                } else {
                    (sp.bos, sp.eos) = (Some(11), Some(11));
                }
            }
            "t5" => {
                kind = ModelKind::Ugm;
                (sp.eos, sp.unk, sp.pad) = (Some(1), Some(2), Some(0));
            }
            _ => return Err(unknown_model()),
        }
        match kind {
            ModelKind::Bpe => {
                let p = match pre_name.as_deref() {
                    None | Some("") => pretok::lookup("default")?,
                    Some(n) => pretok::lookup(n)?,
                };
                add_space_prefix = false;
                escape_whitespaces = p.flags.escape_whitespaces;
                clean_spaces = p.flags.clean_spaces;
                ignore_merges = p.flags.ignore_merges;
                add_bos = p.flags.add_bos;
                add_eos = false;
                add_sep = p.flags.add_sep;
                no_lowercase = p.flags.no_lowercase;
                if p.flags.no_bos {
                    sp.bos = None;
                }
                pre = Some(p);
            }
            ModelKind::Spm => {
                (add_space_prefix, clean_spaces, add_bos, add_eos, add_sep) = (true, false, true, false, false);
            }
            ModelKind::Wpm => {
                (add_space_prefix, clean_spaces, add_bos, add_eos, add_sep) = (false, true, true, false, true);
            }
            ModelKind::Ugm => {
                (add_space_prefix, clean_spaces, add_bos, add_eos, add_sep) = (false, false, false, true, false);
            }
        }
        if let Some(v) = get_bool(md, "tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = v;
        }
        let remove_extra_whitespaces = get_bool(md, "tokenizer.ggml.remove_extra_whitespaces")?.unwrap_or(false);

        // tokens, scores, types
        let list =
            md.get_array("tokenizer.ggml.tokens").ok_or_else(|| Error::MissingKey("tokenizer.ggml.tokens".into()))?;
        let Array::String(words) = list else {
            return Err(Error::BadMetadata {
                key: "tokenizer.ggml.tokens".into(),
                message: "expected an array of strings".into(),
            });
        };
        let n = words.len();
        if n == 0 || n > u32::MAX as usize / 2 {
            return Err(Error::BadMetadata { key: "tokenizer.ggml.tokens".into(), message: format!("{n} tokens") });
        }
        let scores: Option<Vec<f32>> = match md.get_array("tokenizer.ggml.scores") {
            None => None,
            Some(a) => {
                let v: Vec<f32> = match a {
                    Array::F32(v) => v.clone(),
                    Array::I32(v) => v.iter().map(|&x| x as f32).collect(),
                    _ => {
                        return Err(Error::BadMetadata {
                            key: "tokenizer.ggml.scores".into(),
                            message: "expected f32[] or i32[]".into(),
                        })
                    }
                };
                if v.len() != n {
                    return Err(Error::BadMetadata {
                        key: "tokenizer.ggml.scores".into(),
                        message: format!("{} scores for {n} tokens (tokenizer.ggml.tokens)", v.len()),
                    });
                }
                Some(v)
            }
        };
        let types: Option<&[i32]> = match md.get_array("tokenizer.ggml.token_type") {
            None => None,
            Some(Array::I32(v)) => {
                if v.len() != n {
                    return Err(Error::BadMetadata {
                        key: "tokenizer.ggml.token_type".into(),
                        message: format!("{} types for {n} tokens (tokenizer.ggml.tokens)", v.len()),
                    });
                }
                if let Some(i) = v.iter().position(|t| !(0..=6).contains(t)) {
                    return Err(Error::BadMetadata {
                        key: "tokenizer.ggml.token_type".into(),
                        message: format!("type {} of token {i} is not a llama_token_type (0..=6)", v[i]),
                    });
                }
                Some(v)
            }
            Some(_) => {
                return Err(Error::BadMetadata {
                    key: "tokenizer.ggml.token_type".into(),
                    message: "expected i32[]".into(),
                })
            }
        };
        let too_long = || Error::BadMetadata {
            key: "tokenizer.ggml.tokens".into(),
            message: "the token texts pass 4 GiB in all".into(),
        };
        let mut texts = Texts::with_capacity(n, words.iter().map(|w| w.len()).sum());
        let mut token_to_id = TextIndex::with_capacity(n);
        let mut attrs = Vec::with_capacity(n);
        let mut max_token_len = 0;
        for (i, w) in words.iter().enumerate() {
            let empty;
            let text: &[u8] = if w.is_empty() {
                empty = format!("[EMPTY_{i}]").into_bytes();
                &empty
            } else {
                w
            };
            texts.push(text).ok_or_else(too_long)?;
            if token_to_id.insert(&texts, i as u32).is_err() {
                return Err(Error::BadMetadata {
                    key: "tokenizer.ggml.tokens".into(),
                    message: format!("duplicate token text {:?} at id {i}", String::from_utf8_lossy(text)),
                });
            }
            max_token_len = max_token_len.max(text.len());
            let attr = match types.map(|t| t[i]) {
                None => ATTR_NORMAL,
                Some(2) => ATTR_UNKNOWN,
                Some(5) => ATTR_UNUSED,
                Some(1) => ATTR_NORMAL,
                Some(3) => ATTR_CONTROL,
                Some(4) => ATTR_USER_DEFINED,
                Some(6) => ATTR_BYTE,
                Some(_) => 0, // 0: undefined (others are rejected above)
            };
            attrs.push(attr);
        }
        texts.shrink_to_fit();
        let scores = scores.unwrap_or_else(|| vec![0.0; n]);

        let mut vocab = Vocab {
            texts,
            scores,
            attrs,
            token_to_id,
            special: sp,
            max_token_len,
            kind,
            add_space_prefix,
            add_bos,
            add_eos,
            add_sep,
            ignore_merges,
            clean_spaces,
            remove_extra_whitespaces,
            escape_whitespaces,
            treat_whitespace_as_suffix: false,
            lowercase: false,
            strip_accents: false,
            cache_special: Vec::new(),
            special_ac: None,
            byte_tokens: Vec::new(),
            pieces: Texts::default(),
            eog: BTreeSet::new(),
            spm_pairs: std::sync::OnceLock::new(),
        };

        // special ids: defaults out of range are disabled; file values out of range ignored
        {
            let s = &mut vocab.special;
            let keys: [(&str, &mut Option<u32>); 17] = [
                ("tokenizer.ggml.bos_token_id", &mut s.bos),
                ("tokenizer.ggml.eos_token_id", &mut s.eos),
                ("tokenizer.ggml.eot_token_id", &mut s.eot),
                ("tokenizer.ggml.eom_token_id", &mut s.eom),
                ("tokenizer.ggml.unknown_token_id", &mut s.unk),
                ("tokenizer.ggml.seperator_token_id", &mut s.sep),
                ("tokenizer.ggml.padding_token_id", &mut s.pad),
                ("tokenizer.ggml.mask_token_id", &mut s.mask),
                ("tokenizer.ggml.fim_pre_token_id", &mut s.fim_pre),
                ("tokenizer.ggml.fim_suf_token_id", &mut s.fim_suf),
                ("tokenizer.ggml.fim_mid_token_id", &mut s.fim_mid),
                ("tokenizer.ggml.fim_pad_token_id", &mut s.fim_pad),
                ("tokenizer.ggml.fim_rep_token_id", &mut s.fim_rep),
                ("tokenizer.ggml.fim_sep_token_id", &mut s.fim_sep),
                ("tokenizer.ggml.prefix_token_id", &mut None),
                ("tokenizer.ggml.suffix_token_id", &mut None),
                ("tokenizer.ggml.middle_token_id", &mut None),
            ];
            let mut deprecated = [None; 3];
            for (i, (key, slot)) in keys.into_iter().enumerate() {
                if slot.is_some_and(|id| id as usize >= n) {
                    *slot = None;
                }
                if let Some(v) = get_id(md, key)? {
                    if (v as usize) < n {
                        if i >= 14 {
                            deprecated[i - 14] = Some(v as u32);
                        } else {
                            *slot = Some(v as u32);
                        }
                    }
                }
            }
            if let Some(v) = deprecated[0] {
                s.fim_pre = Some(v);
            }
            if let Some(v) = deprecated[1] {
                s.fim_suf = Some(v);
            }
            if let Some(v) = deprecated[2] {
                s.fim_mid = Some(v);
            }
        }
        if let Some(v) = get_bool(md, "tokenizer.ggml.add_bos_token")? {
            vocab.add_bos = v;
        }
        if let Some(v) = get_bool(md, "tokenizer.ggml.add_eos_token")? {
            vocab.add_eos = v;
        }
        if let Some(v) = get_bool(md, "tokenizer.ggml.add_sep_token")? {
            vocab.add_sep = v;
        }
        if pre.is_some_and(|p| p.kind == "GEMMA4") && !vocab.add_bos {
            vocab.add_bos = true;
        }
        vocab.lowercase = get_bool(md, "tokenizer.ggml.normalizer.lowercase")?.unwrap_or(!no_lowercase);
        vocab.strip_accents = vocab.lowercase;
        if let Some(v) = get_bool(md, "tokenizer.ggml.normalizer.strip_accents")? {
            vocab.strip_accents = v;
        }

        vocab.detect_special_texts();

        // special tokens cache, longest first (stable among equal lengths)
        let mut cache: Vec<u32> = (0..n as u32)
            .filter(|&id| vocab.attrs[id as usize] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) != 0)
            .collect();
        cache.sort_by_key(|&id| std::cmp::Reverse(vocab.text(id).len()));
        vocab.special_ac = special_automaton(cache.iter().map(|&id| vocab.text(id)));
        vocab.cache_special = cache;
        vocab.byte_tokens = (0..=255u8).map(|b| vocab.byte_to_token_slow(b).ok()).collect();
        let mut pieces = Texts::with_capacity(n, vocab.texts.total_bytes());
        for id in 0..n as u32 {
            pieces.push(&vocab.piece_uncached(id)?).ok_or_else(too_long)?;
        }
        pieces.shrink_to_fit();
        vocab.pieces = pieces;

        // per-token attributes by model name
        {
            let name = md.get_str("general.name").unwrap_or("").to_lowercase();
            let pre_s = md.get_str("tokenizer.ggml.pre").unwrap_or("");
            let arch = md.get_str("general.architecture").unwrap_or("");
            let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
            if any(pre_s, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
                || any(arch, &["nomic-bert-moe", "jina-bert-v3"])
            {
                if let Some(id) = vocab.text_to_token(b"<mask>") {
                    vocab.attrs[id as usize] |= ATTR_LSTRIP;
                }
            } else if any(&name, &["phi-3", "phi3"]) {
                for i in 0..vocab.cache_special.len() {
                    let id = vocab.cache_special[i];
                    vocab.attrs[id as usize] |= ATTR_RSTRIP;
                }
                if let Some(id) = vocab.text_to_token(b"</s>") {
                    vocab.attrs[id as usize] |= ATTR_RSTRIP;
                }
                for t in ["<unk>", "<s>", "<|endoftext|>"] {
                    if let Some(id) = vocab.text_to_token(t.as_bytes()) {
                        vocab.attrs[id as usize] &= !ATTR_RSTRIP;
                    }
                }
            } else if any(&name, &["modern-bert"]) {
                if let Some(id) = vocab.text_to_token(b"[MASK]") {
                    vocab.attrs[id as usize] |= ATTR_LSTRIP;
                }
            }
        }

        let model = match kind {
            ModelKind::Spm => Model::Spm,
            ModelKind::Wpm => Model::Wpm,
            ModelKind::Ugm => {
                let cm: Option<Vec<u8>> = match md.get_array("tokenizer.ggml.precompiled_charsmap") {
                    None => None,
                    Some(Array::U8(v)) => Some(v.clone()),
                    Some(Array::I8(v)) => Some(v.iter().map(|&x| x as u8).collect()),
                    Some(_) => {
                        return Err(Error::BadMetadata {
                            key: "tokenizer.ggml.precompiled_charsmap".into(),
                            message: "expected u8[] or i8[]".into(),
                        })
                    }
                };
                if vocab.special.unk.is_none() {
                    return Err(Error::BadMetadata {
                        key: "tokenizer.ggml.unknown_token_id".into(),
                        message: "a t5 (unigram) vocabulary needs an unknown token in range".into(),
                    });
                }
                Model::Ugm(Box::new(ugm::Ugm::new(&vocab, cm.as_deref())?))
            }
            ModelKind::Bpe => {
                let p = pre.ok_or_else(unknown_model)?;
                let merges = match md.get_array("tokenizer.ggml.merges") {
                    None => return Err(Error::MissingKey("tokenizer.ggml.merges".into())),
                    Some(Array::String(v)) => v,
                    Some(_) => {
                        return Err(Error::BadMetadata {
                            key: "tokenizer.ggml.merges".into(),
                            message: "expected an array of strings".into(),
                        })
                    }
                };
                check_merges(&vocab, merges)?;
                let compiled = pretok::CompiledPre::new(p.regexes, p.byte_encode)?;
                Model::Bpe(Box::new(bpe::Bpe::new(&vocab, merges, compiled, p.kind == "GEMMA4")?))
            }
        };
        Ok(Tokenizer { vocab, model, model_name, pre_name })
    }

    /// `llama_tokenize`: text to ids. `add_special` adds BOS/EOS/SEP as the vocabulary
    /// says; `parse_special` lets control tokens' text in `text` become those tokens.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        self.encode_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// [`Tokenizer::encode`] for arbitrary bytes (invalid UTF-8 is handled as llama.cpp does).
    pub fn encode_bytes(&self, text: &[u8], add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let v = &self.vocab;
        let frags = if text.is_empty() { Vec::new() } else { self.partition(text, parse_special) };
        let mut out = Vec::new();
        let need = |id: Option<u32>, what| id.ok_or(Error::MissingSpecial(what));
        match &self.model {
            Model::Spm => {
                if add_special && v.add_bos {
                    out.push(need(v.special.bos, "BOS")?);
                }
                let mut prev_special = true;
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => {
                            let mut t = Vec::new();
                            if v.add_space_prefix && prev_special {
                                t.extend_from_slice("\u{2581}".as_bytes());
                            }
                            escape_whitespace_into(&text[s..e], &mut t);
                            spm::tokenize(v, &t, &mut out)?;
                            prev_special = false;
                        }
                        Frag::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
                if add_special && v.add_eos {
                    out.push(need(v.special.eos, "EOS")?);
                }
            }
            Model::Bpe(bpe) => {
                if add_special && v.add_bos {
                    out.push(need(v.special.bos, "BOS")?);
                }
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => {
                            if v.escape_whitespaces {
                                bpe.tokenize(v, &escape_whitespace(&text[s..e]), &mut out)?;
                            } else {
                                bpe.tokenize(v, &text[s..e], &mut out)?;
                            }
                        }
                        Frag::Token(id) => out.push(id),
                    }
                }
                if add_special && v.add_eos {
                    out.push(need(v.special.eos, "EOS")?);
                }
            }
            Model::Wpm => {
                if add_special {
                    out.push(need(v.special.bos, "BOS")?);
                }
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => wpm::tokenize(v, &text[s..e], &mut out),
                        Frag::Token(id) => out.push(id),
                    }
                }
                if add_special {
                    out.push(need(v.special.sep, "SEP")?);
                }
            }
            Model::Ugm(ugm) => {
                if add_special && v.add_bos {
                    out.push(need(v.special.bos, "BOS")?);
                }
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => ugm.tokenize(v, &text[s..e], &mut out)?,
                        Frag::Token(id) => out.push(id),
                    }
                }
                if add_special && v.add_eos {
                    out.push(need(v.special.eos, "EOS")?);
                }
            }
        }
        Ok(out)
    }

    /// llama.cpp's `tokenizer_st_partition`: split the text at special-token texts.
    fn partition(&self, text: &[u8], parse_special: bool) -> Vec<Frag> {
        let v = &self.vocab;
        let mut frags = vec![Frag::Text(0, text.len())];
        let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
        // which special texts occur anywhere (a token absent from the whole text cannot
        // match in a fragment of it); the ordered partition below then only visits those
        let present: Option<Vec<bool>> = v.special_ac.as_ref().map(|ac| {
            let mut p = vec![false; v.cache_special.len()];
            for m in ac.find_overlapping_iter(text) {
                p[m.pattern().as_usize()] = true;
            }
            p
        });
        for (k, &id) in v.cache_special.iter().enumerate() {
            if present.as_ref().is_some_and(|p| !p[k]) {
                continue;
            }
            let attr = v.attrs[id as usize];
            if !parse_special && attr & (ATTR_CONTROL | ATTR_UNKNOWN) != 0 {
                continue;
            }
            let needle = v.text(id);
            if !frags.iter().any(|f| matches!(*f, Frag::Text(s, e) if e - s >= needle.len())) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Frag::Text(mut off, end) = f else {
                    next.push(f);
                    continue;
                };
                loop {
                    let Some(m) = find(&text[off..end], needle).map(|p| p + off) else {
                        if end > off {
                            next.push(Frag::Text(off, end));
                        }
                        break;
                    };
                    if m > off {
                        let mut l_end = m;
                        if attr & ATTR_LSTRIP != 0 {
                            while l_end > off && is_space(text[l_end - 1]) {
                                l_end -= 1;
                            }
                        }
                        if l_end > off {
                            next.push(Frag::Text(off, l_end));
                        }
                    }
                    next.push(Frag::Token(id));
                    let mut r = m + needle.len();
                    if r < end {
                        if attr & ATTR_RSTRIP != 0 {
                            while r < end && is_space(text[r]) {
                                r += 1;
                            }
                        }
                        off = r;
                    } else {
                        break;
                    }
                }
            }
            frags = next;
        }
        frags
    }

    /// `llama_token_to_piece` with `lstrip = 0`: the bytes of one token. Control and
    /// unknown tokens give nothing unless `special`.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<Vec<u8>> {
        let t = self.token(id)?;
        if !special && t.attr & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 {
            return Ok(Vec::new());
        }
        Ok(self.vocab.pieces.get(id as usize).to_vec())
    }

    fn token(&self, id: u32) -> Result<TokenData<'_>> {
        let v = &self.vocab;
        if id as usize >= v.n_tokens() {
            return Err(Error::TokenOutOfRange { id, n_vocab: v.n_tokens() });
        }
        Ok(TokenData { text: v.text(id), score: v.scores[id as usize], attr: v.attrs[id as usize] })
    }

    /// `llama_detokenize`: ids to bytes. `remove_special` drops a leading BOS / trailing
    /// EOS the vocabulary adds; `unparse_special` renders control tokens' text.
    pub fn decode(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Result<Vec<u8>> {
        let v = &self.vocab;
        for &id in ids {
            self.token(id)?;
        }
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if remove_special && v.add_bos && !ids.is_empty() && Some(ids[0]) == v.special.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && v.add_eos && !ids.is_empty() && Some(ids[ids.len() - 1]) == v.special.eos {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        for &id in ids {
            if !unparse_special && v.attrs[id as usize] & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 {
                remove_space = false;
                continue;
            }
            let p = v.pieces.get(id as usize);
            if remove_space && p.first() == Some(&b' ') {
                text.extend_from_slice(&p[1..]);
            } else {
                text.extend_from_slice(p);
            }
            remove_space = false;
        }
        if v.clean_spaces {
            clean_spaces(&mut text);
        }
        Ok(text)
    }

    /// Vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.vocab.n_tokens()
    }
    /// BOS id.
    pub fn bos(&self) -> Option<u32> {
        self.vocab.special.bos
    }
    /// EOS id.
    pub fn eos(&self) -> Option<u32> {
        self.vocab.special.eos
    }
    /// All special ids.
    pub fn special_ids(&self) -> SpecialIds {
        self.vocab.special
    }
    /// Whether `id` ends generation (llama.cpp's `special_eog_ids`).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }
    /// The end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> Vec<u32> {
        self.vocab.eog.iter().copied().collect()
    }
    /// Whether encoding with `add_special` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }
    /// Whether encoding with `add_special` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }
    /// A token's entry.
    pub fn token_data(&self, id: u32) -> Result<TokenData<'_>> {
        self.token(id)
    }
    /// The id of a token text, if it is one.
    pub fn token_id(&self, text: &[u8]) -> Option<u32> {
        self.vocab.text_to_token(text)
    }
    /// `tokenizer.ggml.model`.
    pub fn model_name(&self) -> &str {
        &self.model_name
    }
    /// `tokenizer.ggml.pre` (as used: `gemma4` models force it).
    pub fn pre_name(&self) -> Option<&str> {
        self.pre_name.as_deref()
    }
    /// A streaming decoder over this tokenizer.
    pub fn stream_decoder(&self, special: bool) -> StreamDecoder<'_> {
        StreamDecoder { tok: self, special, pending: Vec::new() }
    }
}

impl Vocab {
    /// llama.cpp's text-based detection of EOT/EOM/FIM tokens, unused tokens and the EOG
    /// set. Where llama.cpp walks a hash map (unspecified order) we walk ids in order.
    #[allow(clippy::nonminimal_bool)]
    fn detect_special_texts(&mut self) {
        let n = self.n_tokens();
        let set_control = |attrs: &mut Vec<u32>, id: u32| attrs[id as usize] |= ATTR_CONTROL;
        let groups: [(&[&str], u8); 7] = [
            (
                &[
                    "<|eot_id|>",
                    "<|im_end|>",
                    "<|end|>",
                    "<end_of_turn>",
                    "<|endoftext|>",
                    "<|end_of_text|>",
                    "<EOT>",
                    "_<EOT>",
                    "[EOT]",
                    "<｜end▁of▁sentence｜>",
                    "<end_of_utterance>",
                ],
                0,
            ),
            (&["<|eom_id|>"], 1),
            (
                &[
                    "<|fim_prefix|>",
                    "<fim-prefix>",
                    "<fim_prefix>",
                    "<｜fim▁begin｜>",
                    "<PRE>",
                    "▁<PRE>",
                    "<|code_prefix|>",
                    "<|prefix|>",
                ],
                2,
            ),
            (
                &[
                    "<|fim_suffix|>",
                    "<fim-suffix>",
                    "<fim_suffix>",
                    "<｜fim▁hole｜>",
                    "<SUF>",
                    "▁<SUF>",
                    "<|code_suffix|>",
                    "<|suffix|>",
                ],
                3,
            ),
            (
                &[
                    "<|fim_middle|>",
                    "<fim-middle>",
                    "<fim_middle>",
                    "<｜fim▁end｜>",
                    "<MID>",
                    "▁<MID>",
                    "<|code_middle|>",
                    "<|middle|>",
                ],
                4,
            ),
            (&["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"], 5),
            (&["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"], 6),
        ];
        for id in 0..n as u32 {
            let text = self.texts.get(id as usize);
            for (texts, which) in groups.iter() {
                let slot = match which {
                    0 => &mut self.special.eot,
                    1 => &mut self.special.eom,
                    2 => &mut self.special.fim_pre,
                    3 => &mut self.special.fim_suf,
                    4 => &mut self.special.fim_mid,
                    5 => &mut self.special.fim_pad,
                    _ => &mut self.special.fim_rep,
                };
                if slot.is_none() && texts.iter().any(|t| t.as_bytes() == text) {
                    *slot = Some(id);
                    set_control(&mut self.attrs, id);
                }
            }
            if self.special.fim_sep.is_none() && text == b"<|file_sep|>" {
                self.special.fim_sep = Some(id);
                set_control(&mut self.attrs, id);
            }
        }
        // unused: control tokens whose text contains "unused"
        for (id, attr) in self.attrs.iter_mut().enumerate() {
            if *attr & ATTR_CONTROL != 0 && *attr & ATTR_UNUSED == 0 && find(self.texts.get(id), b"unused").is_some() {
                *attr |= ATTR_UNUSED;
            }
        }
        let mut eog = BTreeSet::new();
        for id in [self.special.fim_pad, self.special.fim_rep, self.special.fim_sep].into_iter().flatten() {
            eog.insert(id);
        }
        for id in 0..n as u32 {
            if EOG_TEXTS.iter().any(|t| t.as_bytes() == self.texts.get(id as usize)) {
                eog.insert(id);
                set_control(&mut self.attrs, id);
            }
        }
        for id in 0..n as u32 {
            if matches!(self.texts.get(id as usize), b"<|channel|>" | b"<|message|>" | b"<|start|>" | b"<|constrain|>")
            {
                self.attrs[id as usize] = ATTR_USER_DEFINED;
            }
        }
        for id in [self.special.eos, self.special.eot, self.special.eom].into_iter().flatten() {
            eog.insert(id);
        }
        let (mut has_return, mut has_call, mut has_end, mut has_flush, mut end_id) = (false, false, false, false, None);
        for &id in &eog {
            match self.texts.get(id as usize) {
                b"<|return|>" => has_return = true,
                b"<|call|>" | b"<|calls|>" => has_call = true,
                b"<|flush|>" => has_flush = true,
                b"<|end|>" => {
                    has_end = true;
                    end_id = Some(id);
                }
                _ => {}
            }
        }
        if (has_return && has_call && has_end) || (has_call && has_flush && has_end) {
            if let Some(e) = end_id {
                eog.remove(&e);
                self.attrs[e as usize] = ATTR_USER_DEFINED;
            }
        }
        let (mut marker, mut s_id) = (false, None);
        for &id in &eog {
            match self.texts.get(id as usize) {
                b"<|tool_response>" | b"<|plamo:eos|>" => marker = true,
                b"</s>" => s_id = Some(id),
                _ => {}
            }
        }
        if let (true, Some(s)) = (marker, s_id) {
            eog.remove(&s);
            self.attrs[s as usize] = ATTR_NORMAL;
        }
        self.eog = eog;
    }
}

/// The automaton over the special-token texts that tells which of them occur in a text
/// (overlapping, `MatchKind::Standard`). Its construction must stay linear in the
/// texts' bytes: a DFA costs states × byte classes × failure depth, quadratic in one
/// long repetitive token (a 20 KB `AAAA…` control token took seconds), so a DFA is
/// only built while that product is small; otherwise a contiguous NFA (linear), or the
/// noncontiguous one should that not fit. `None` (no special tokens, or no automaton
/// could be built) makes [`Tokenizer::partition`] try every special token — slower,
/// same result.
fn special_automaton<'a>(texts: impl Iterator<Item = &'a [u8]> + Clone) -> Option<aho_corasick::AhoCorasick> {
    use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
    let (mut count, mut total, mut longest) = (0usize, 0usize, 0usize);
    for t in texts.clone() {
        count += 1;
        total += t.len();
        longest = longest.max(t.len());
    }
    if count == 0 {
        return None;
    }
    /// Bound on total bytes × longest text for a DFA (its build is at most this × 256).
    const DFA_BUDGET: usize = 1 << 18;
    let build = |kind| AhoCorasick::builder().match_kind(MatchKind::Standard).kind(kind).build(texts.clone()).ok();
    let dfa_ok = count <= 100 && total.saturating_mul(longest) <= DFA_BUDGET;
    (if dfa_ok { build(Some(AhoCorasickKind::DFA)) } else { None })
        .or_else(|| build(Some(AhoCorasickKind::ContiguousNFA)))
        .or_else(|| build(Some(AhoCorasickKind::NoncontiguousNFA)))
}

#[derive(Debug, Clone, Copy)]
enum Frag {
    Text(usize, usize),
    Token(u32),
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

fn escape_whitespace(t: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    escape_whitespace_into(t, &mut out);
    out
}

/// Appends `t` with each space as `▁`, sized exactly.
fn escape_whitespace_into(t: &[u8], out: &mut Vec<u8>) {
    let spaces = memchr::memchr_iter(b' ', t).count();
    out.reserve_exact(t.len() + 2 * spaces);
    let mut last = 0;
    for i in memchr::memchr_iter(b' ', t) {
        out.extend_from_slice(&t[last..i]);
        out.extend_from_slice("\u{2581}".as_bytes());
        last = i + 1;
    }
    out.extend_from_slice(&t[last..]);
}

/// llama.cpp's `clean_up_tokenization_spaces` passes, in place and byte for byte.
#[allow(clippy::nonminimal_bool)]
fn clean_spaces(text: &mut Vec<u8>) {
    let total1 = text.len();
    if total1 == 0 {
        return;
    }
    // pass 1: " ?", " !", " .", " ,"
    let mut total = 1;
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    // pass 2: " ' " → "'"
    let total2 = total;
    total = if total2 > 0 { 1 } else { 0 };
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    // pass 3: " 's", " 'm", " 're", " 've" lose the space
    let total3 = total;
    total = if total3 > 0 { 1 } else { 0 };
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            if x1 == b't' || x1 == b'd' {
            } else if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < total3 {
                let x2 = text[i + 2];
                if (x1 == b'r' && x2 == b'e') || (x1 == b'v' && x2 == b'e') {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Detokenizes a stream of ids, emitting only complete UTF-8: bytes of a sequence
/// split across tokens are held until it completes (or proves invalid, in which case
/// they come out as U+FFFD).
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    special: bool,
    pending: Vec<u8>,
}

impl StreamDecoder<'_> {
    /// Adds one token; returns the text that is now complete (maybe empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.tok.token_to_piece(id, self.special)?;
        self.pending.extend_from_slice(&piece);
        Ok(self.drain(false))
    }

    /// Flushes what is left (an incomplete sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        self.drain(true)
    }

    fn drain(&mut self, all: bool) -> String {
        drain_utf8(&mut self.pending, all)
    }
}

/// Moves the complete UTF-8 prefix of `pending` out as a string (invalid bytes become
/// U+FFFD); an incomplete sequence at the end stays for the next bytes unless `flush`.
pub fn drain_utf8(pending: &mut Vec<u8>, flush: bool) -> String {
    let mut out = String::new();
    let mut i = 0;
    let p = &*pending;
    while i < p.len() {
        match std::str::from_utf8(&p[i..]) {
            Ok(s) => {
                out.push_str(s);
                i = p.len();
            }
            Err(e) => {
                let good = e.valid_up_to();
                out.push_str(std::str::from_utf8(&p[i..i + good]).unwrap_or_default());
                i += good;
                match e.error_len() {
                    Some(bad) => {
                        out.push('\u{FFFD}');
                        i += bad;
                    }
                    None => {
                        // incomplete at the end: wait for more, unless flushing
                        if flush {
                            out.push('\u{FFFD}');
                            i = p.len();
                        }
                        break;
                    }
                }
            }
        }
    }
    pending.drain(..i);
    out
}

/// Checks that every merge's parts and result are plausible for the vocabulary: a
/// merge whose result is not a token means the vocabulary and merges disagree.
fn check_merges(v: &Vocab, merges: &StringArray) -> Result<()> {
    let mut bad = 0usize;
    let mut first_bad = None;
    for (i, m) in merges.iter().enumerate() {
        let joined: Vec<u8> = match m.iter().skip(1).position(|&b| b == b' ') {
            Some(p) => m[..p + 1].iter().chain(&m[p + 2..]).copied().collect(),
            None => {
                bad += 1;
                first_bad.get_or_insert(i);
                continue;
            }
        };
        if v.text_to_token(&joined).is_none() {
            bad += 1;
            first_bad.get_or_insert(i);
        }
    }
    // real files carry a few stray merges; disagreement is a majority of them
    if !merges.is_empty() && bad * 2 > merges.len() {
        let i = first_bad.unwrap_or(0);
        return Err(Error::BadMetadata {
            key: "tokenizer.ggml.merges".into(),
            message: format!(
                "{bad} of {} merges do not produce a vocabulary token (first: #{i} {:?}); vocabulary and merges disagree",
                merges.len(),
                String::from_utf8_lossy(&merges[i])
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
