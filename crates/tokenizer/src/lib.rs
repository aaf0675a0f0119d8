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
//!
//! Layout: the types live here; `load` builds them from metadata, `vocab` holds the
//! vocabulary's lookups and pieces (texts in one buffer each, `texts`), `encode` and
//! `decode` the two directions, `bpe` / `spm` / `wpm` / `ugm` the per-model algorithms,
//! `pretok` the pre-tokenizer registry. `inventory` is re-exported for plug-in
//! pre-tokenizers.
//!
//! # Extending: a pre-tokenizer from another crate
//!
//! A vocabulary names its pre-tokenizer in `tokenizer.ggml.pre`; registering a
//! [`pretok::PreTokenizer`] under a new name makes such files load. A pattern that needs
//! speed can get hand-written code too ([`pretok::FastSplitter`]).
//!
//! ```
//! use gguf_tokenizer::pretok::{self, PreTokenizer};
//!
//! // Digits one by one, then GPT-2's rules.
//! const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
//! gguf_tokenizer::gguf_registry::submit!(PreTokenizer::new("MINE", &["mine"], &["\\p{N}", GPT2]));
//!
//! assert_eq!(pretok::lookup("mine").unwrap().kind, "MINE");
//! let split = pretok::CompiledPre::new(pretok::lookup("mine").unwrap().regexes, false).unwrap();
//! assert_eq!(split.split(b"ab 12").unwrap(), [&b"ab"[..], b" ", b"1", b"2"]);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod bpe;
pub mod chat;
mod decode;
mod encode;

mod hash;
mod load;
pub mod pretok;
pub mod regex;
mod spm;
mod texts;
mod ugm;
pub mod unicode;
mod unicode_data;
mod vocab;
mod wpm;

use std::collections::BTreeSet;

pub use decode::{drain_utf8, StreamDecoder};
/// The registry crate, for `gguf_tokenizer::gguf_registry::submit!` in plug-in crates.
pub use gguf_registry;
pub use inventory;
use texts::Texts;

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
    /// Two registered pre-tokenizers claim one name at one priority from one module.
    #[error("{0}")]
    Registry(String),
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
    token_to_id: texts::TextIndex,
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

impl Tokenizer {
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
    /// Whether the vocabulary puts SEP between a pair's texts (`add_sep`: BERT-style
    /// vocabularies; llama-server's rerank pairs).
    pub fn add_sep(&self) -> bool {
        self.vocab.add_sep
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
}

#[cfg(test)]
mod tests;
