//! A pre-tokenizer registered from outside the core crates: vocabularies whose
//! `tokenizer.ggml.pre` is `demo-trailing-space` split their text with it, and nothing in
//! `tokenizer`, `models` or the CLI changes.
//!
//! A pre-tokenizer cuts text into words before BPE merges run inside each word; it is a
//! sequence of regexes (each splitting the pieces of the previous one, llama.cpp's
//! `unicode_regex_split`) plus vocabulary flags. This one keeps a word's *trailing* space
//! (`"hello world"` → `"hello "`, `"world"`, where GPT-2's keeps the leading one:
//! `"hello"`, `" world"`) and cuts numbers into single digits:
//!
//! 1. **The entry** (this file): `PreTokenizer::new(kind, names, regexes)` — `kind` is
//!    the family shown in messages, `names` the `tokenizer.ggml.pre` values it answers to,
//!    `regexes` ECMAScript-style patterns (`\p{L}`, `\p{N}` as in llama.cpp); `.with_flags`
//!    sets the vocabulary quirks (BOS, cleaning spaces, ...: [`gguf_tokenizer::pretok::PreFlags`]),
//!    `.raw_utf8()` turns off GPT-2's byte-to-unicode encoding of the words.
//! 2. **Register it** with `gguf_registry::submit!(..)`, which records this module as its
//!    origin. A name already taken is a clash reported by
//!    `gguf_tokenizer::pretok::registry_problems()` and `gguf types --check`; to replace a
//!    built-in, give the entry `.priority(1)` (listed as an override).
//! 3. **A binary** (`src/bin/gguf-custom-pretok.rs`): `use custom_pretok as _;` and
//!    `fn main() -> ExitCode { gguf_cli::main() }`. Its `tokenize`, `run`, `chat`, `serve`
//!    ... load vocabularies naming `demo-trailing-space`; the stock `gguf` refuses them
//!    with "unknown pre-tokenizer type 'demo-trailing-space'".
//!
//! `tests/it.rs` writes a tiny model whose BPE vocabulary names it and checks the split
//! through the rebuilt binary (`tokenize`, and the prompt tokens of `run`) against
//! GPT-2's on the same vocabulary, and the stock binary's refusal.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use gguf_tokenizer::pretok::{PreFlags, PreTokenizer};

/// The `tokenizer.ggml.pre` name this crate registers.
pub const NAME: &str = "demo-trailing-space";

/// Letters with the space after them, single digits, punctuation runs with the space
/// after them, whitespace runs.
pub const REGEX: &str = "\\p{L}+ ?|\\p{N}|[^\\s\\p{L}\\p{N}]+ ?|\\s+";

gguf_registry::submit!(PreTokenizer::new("DEMO_TRAILING_SPACE", &[NAME], &[REGEX]).with_flags(PreFlags::DEFAULT));

#[cfg(test)]
mod tests {
    #[test]
    fn registered_once_next_to_the_builtins() {
        let p = gguf_tokenizer::pretok::lookup(super::NAME).unwrap();
        assert_eq!(p.kind, "DEMO_TRAILING_SPACE");
        assert_eq!(p.origin, "custom_pretok");
        assert!(gguf_tokenizer::pretok::lookup("gpt-2").is_ok());
        let r = gguf_tokenizer::pretok::registry_problems();
        assert!(r.problems.is_empty() && r.overrides.is_empty(), "{r:?}");
    }

    #[test]
    fn splits_after_words_and_between_digits() {
        let p = gguf_tokenizer::pretok::lookup(super::NAME).unwrap();
        let c = gguf_tokenizer::pretok::CompiledPre::new(p.regexes, false).unwrap();
        let words = c.split(b"hello world 123, ok").unwrap();
        let words: Vec<&str> = words.iter().map(|w| std::str::from_utf8(w).unwrap()).collect();
        assert_eq!(words, ["hello ", "world ", "1", "2", "3", ", ", "ok"]);
    }
}
