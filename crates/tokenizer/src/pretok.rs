//! Pre-tokenizers: the registry of `tokenizer.ggml.pre` names llama.cpp accepts, each
//! with llama.cpp's regex sequence and vocabulary flags, and the splitter that applies
//! them (`unicode_regex_split`): hand-written splitters for the patterns llama.cpp
//! special-cases, the ECMAScript engine in [`crate::regex`] for the rest, on the same
//! "collapsed" text llama.cpp builds.
//!
//! A new pre-tokenizer is one `gguf_registry::submit!(PreTokenizer::new(..))` — nothing
//! in the core changes; a name registered twice is reported by [`registry_problems`].

use crate::regex::Regex;
use crate::unicode::{self, Flags};
use crate::Error;

/// Vocabulary flags a pre-tokenizer sets (llama.cpp sets them next to the name match).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreFlags {
    /// `clean_up_tokenization_spaces` on decode.
    pub clean_spaces: bool,
    /// A word that is a whole token skips the merges.
    pub ignore_merges: bool,
    /// Add BOS by default.
    pub add_bos: bool,
    /// Add SEP by default.
    pub add_sep: bool,
    /// Spaces become `▁` before BPE (SPM-style BPE).
    pub escape_whitespaces: bool,
    /// The default BOS id is cleared.
    pub no_bos: bool,
    /// The BERT normalizer does not lowercase.
    pub no_lowercase: bool,
    /// BOS is added even when `tokenizer.ggml.add_bos_token` says not to (gemma4).
    pub force_bos: bool,
    /// A word made only of newlines is looked up as one token before any merge (gemma4).
    pub newline_words_whole: bool,
}

impl PreFlags {
    /// BPE's defaults: clean spaces on, the rest off.
    pub const DEFAULT: PreFlags = PreFlags {
        clean_spaces: true,
        ignore_merges: false,
        add_bos: false,
        add_sep: false,
        escape_whitespaces: false,
        no_bos: false,
        no_lowercase: false,
        force_bos: false,
        newline_words_whole: false,
    };
    /// `clean_spaces` off.
    pub const fn no_clean(self) -> PreFlags {
        PreFlags { clean_spaces: false, ..self }
    }
    /// `ignore_merges` on.
    pub const fn ignore_merges(self) -> PreFlags {
        PreFlags { ignore_merges: true, ..self }
    }
    /// `add_bos` on.
    pub const fn add_bos(self) -> PreFlags {
        PreFlags { add_bos: true, ..self }
    }
}

/// One registered pre-tokenizer: the `tokenizer.ggml.pre` names it answers to,
/// llama.cpp's type name, its regex sequence and flags.
#[derive(Debug)]
pub struct PreTokenizer {
    /// Names accepted in `tokenizer.ggml.pre`.
    pub names: &'static [&'static str],
    /// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*` suffix.
    pub kind: &'static str,
    /// Regexes applied in sequence, each splitting the pieces of the previous one.
    pub regexes: &'static [&'static str],
    /// GPT-2 byte-to-unicode encoding of the words (false: raw UTF-8).
    pub byte_encode: bool,
    /// Vocabulary flags.
    pub flags: PreFlags,
    /// Higher wins when two entries claim one name (a plug-in replacing a built-in);
    /// built-ins have 0.
    pub priority: i32,
    /// The module that registered it (set by `gguf_registry::submit!`).
    pub origin: &'static str,
}

impl PreTokenizer {
    /// A pre-tokenizer answering to `names`, splitting with `regexes` in sequence, GPT-2
    /// byte encoding, BPE's default flags, priority 0.
    pub const fn new(kind: &'static str, names: &'static [&'static str], regexes: &'static [&'static str]) -> Self {
        PreTokenizer { names, kind, regexes, byte_encode: true, flags: PreFlags::DEFAULT, priority: 0, origin: "" }
    }
    /// With these vocabulary flags.
    pub const fn with_flags(self, flags: PreFlags) -> Self {
        PreTokenizer { flags, ..self }
    }
    /// Words stay raw UTF-8 (no GPT-2 byte-to-unicode encoding).
    pub const fn raw_utf8(self) -> Self {
        PreTokenizer { byte_encode: false, ..self }
    }
}

inventory::collect!(PreTokenizer);

gguf_registry::named_entry!(PreTokenizer, "pre-tokenizer", &'static str, |p: &PreTokenizer| p.names.to_vec());

fn index() -> &'static gguf_registry::Registry<PreTokenizer> {
    static INDEX: std::sync::OnceLock<gguf_registry::Registry<PreTokenizer>> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| gguf_registry::Registry::new(inventory::iter::<PreTokenizer>))
}

/// Every registered pre-tokenizer (hidden ones too), sorted by first name.
pub fn all() -> impl Iterator<Item = &'static PreTokenizer> {
    index().entries().iter().copied()
}

/// Every accepted `tokenizer.ggml.pre` name, sorted.
pub fn known_names() -> Vec<&'static str> {
    index().keys().copied().collect()
}

/// The pre-tokenizer used for `name`: the highest priority, then the registering module
/// ([`gguf_registry`]'s rule).
pub fn lookup(name: &str) -> Result<&'static PreTokenizer, Error> {
    index().resolve(name).map_err(|miss| match miss {
        gguf_registry::Miss::Clash(c) => Error::Registry(c.to_string()),
        gguf_registry::Miss::Unknown => {
            Error::UnknownPreTokenizer { name: name.to_string(), known: known_names().join(", ") }
        }
    })
}

/// Clashes (two pre-tokenizers of one name and priority) and overrides. No problems for
/// the built-ins; tested.
pub fn registry_problems() -> gguf_registry::Report {
    index().report()
}

// ---------------------------------------------------------------------------------------
// llama.cpp's regex sequences (llm_tokenizer_bpe in llama-vocab.cpp)

const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const JAIS2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
const DEEPSEEK3_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const SPARK_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+";
const YOUTU_CJK: &str = "[\u{AC00}-\u{D7A3}\u{3131}-\u{318E}]+|[\u{FF01}\u{2026}\u{201C}\u{201D}\u{2018}\u{2019}\u{2014}\u{FF1A}\u{FF1B}\u{FF0C}\u{3001}-\u{303F}\u{FE30}-\u{FE4F}]+|[\u{3105}-\u{312F}]+|[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+";
const YOUTU_MAIN: &str = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const DEEPSEEK_LLM_LATIN: &str = "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+";
const STARCODER: &[&str] = &["\\p{N}", GPT2];
const PORO: &str = " ?[^(\\s|.,!?\u{2026}\u{3002}\u{FF0C}\u{3001}\u{964}\u{6D4}\u{60C})]+";
const TEKKEN: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const GPT4O: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const GRANITE_EMB_MULTI: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const TINY_AYA_MAIN: &str = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const BAILINGMOE: &str = "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
const SEED_CODER: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const UFAKZEKA: &str =
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const AFMOE_CJK: &str = "[\u{4E00}-\u{9FFF}\u{3400}-\u{4DBF}\u{8C48}-\u{FAFF}\u{3040}-\u{309F}\u{30A0}-\u{30FF}\u{FF65}-\u{FF9F}\u{2F00}-\u{2FDF}\u{E40}-\u{E7F}\u{E80}-\u{EFF}\u{1780}-\u{17FF}\u{1000}-\u{109F}\u{AA60}-\u{AA7F}\u{A9E0}-\u{A9FF}\u{AC00}-\u{D7AF}\u{1100}-\u{11FF}]+";
const AFMOE_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const EXAONE_MOE: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
const CJK_KANA: &str = "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+";
const NEWLINES: &str = "[^\\n]+|[\\n]+";

macro_rules! pre {
    ($kind:literal, [$($name:literal),*], $regexes:expr, $flags:expr) => {
        pre!($kind, [$($name),*], $regexes, $flags, true);
    };
    ($kind:literal, [$($name:literal),*], $regexes:expr, $flags:expr, $byte_encode:expr) => {
        inventory::submit! {
            PreTokenizer {
                names: &[$($name),*],
                kind: $kind,
                regexes: $regexes,
                byte_encode: $byte_encode,
                flags: $flags,
                priority: 0,
                origin: module_path!(),
            }
        }
    };
}

const D: PreFlags = PreFlags::DEFAULT;
const DEFAULT_REGEXES: &[&str] = &["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"];

pre!("DEFAULT", ["default"], DEFAULT_REGEXES, D);
pre!("MINICPM5", ["minicpm5"], &["\\p{N}{1,3}", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"], D.ignore_merges());
pre!(
    "LLAMA3",
    ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"],
    &[LLAMA3],
    D.ignore_merges().add_bos()
);
pre!(
    "DEEPSEEK_LLM",
    ["deepseek-llm"],
    &[
        "[\r\n]",
        DEEPSEEK_LLM_LATIN,
        "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
        "\\s+$",
        "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
        "\\p{N}+"
    ],
    D.no_clean()
);
pre!(
    "DEEPSEEK_CODER",
    ["deepseek-coder"],
    &["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+", "\\p{N}"],
    D.no_clean()
);
pre!("DEEPSEEK3_LLM", ["deepseek-v3"], &["\\p{N}{1,3}", CJK_KANA, DEEPSEEK3_MAIN], D.no_clean());
pre!("SPARK2_5", ["spark2_5"], &["\\p{N}{1,3}", CJK_KANA, SPARK_MAIN, "\\p{N}"], D.no_clean());
pre!("YOUTU", ["youtu"], &[YOUTU_CJK, YOUTU_MAIN], D.no_clean().ignore_merges());
pre!("FALCON", ["falcon"], &["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"], D);
pre!("MPT", ["mpt"], &[GPT2], D);
pre!("STARCODER", ["starcoder"], STARCODER, D);
pre!(
    "GPT2",
    [
        "gpt-2",
        "phi-2",
        "jina-es",
        "jina-de",
        "gigachat",
        "jina-v2-es",
        "jina-v2-de",
        "a.x-4.0",
        "mellum",
        "modern-bert",
        "exaone4"
    ],
    &[GPT2],
    D
);
pre!("JAIS2", ["jais-2"], &[JAIS2], D);
pre!(
    "GEMMA4",
    ["gemma4", "granite-embed-multi-311m"],
    &[NEWLINES],
    PreFlags { escape_whitespaces: true, force_bos: true, newline_words_whole: true, ..D },
    false
);
pre!("SARVAM_MOE", ["sarvam-moe"], &[NEWLINES], PreFlags { escape_whitespaces: true, ..D.no_clean() }, false);
pre!("GPT2", ["jina-v1-en", "jina-v2-code", "roberta-bpe"], &[GPT2], PreFlags { add_sep: true, ..D });
pre!("WHITESPACE", ["whitespace"], &["\\S+"], PreFlags { no_lowercase: true, ..D }, false);
pre!("REFACT", ["refact"], STARCODER, D);
pre!("COMMAND_R", ["command-r"], STARCODER, D.no_clean());
pre!("QWEN2", ["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"], &[QWEN2], D.no_clean());
pre!("QWEN2", ["megrez"], &[QWEN2], D);
pre!("QWEN35", ["qwen35"], &[QWEN35], D.no_clean());
pre!("STABLELM2", ["stablelm2"], &[QWEN2], D);
pre!("OLMO", ["olmo"], &[GPT2], D);
pre!("DBRX", ["dbrx"], &[LLAMA3], D);
pre!("SMAUG", ["smaug-bpe"], &[LLAMA3], D);
pre!("PORO", ["poro-chat"], &[PORO], D.no_clean());
pre!("CHATGLM4", ["chatglm-bpe"], &[LLAMA3], PreFlags { no_bos: true, ..D });
pre!("CHATGLM4", ["glm4", "glm5"], &[LLAMA3], PreFlags { no_bos: true, ..D.ignore_merges() });
pre!("VIKING", ["viking"], &[PORO, "\\p{N}"], D.no_clean());
pre!("JAIS", ["jais"], &[GPT2], D);
pre!("TEKKEN", ["tekken"], &[TEKKEN], D.no_clean().ignore_merges().add_bos());
pre!("SMOLLM", ["smollm"], STARCODER, D.no_clean());
pre!("CODESHELL", ["codeshell"], STARCODER, D);
pre!("BLOOM", ["bloom"], &[PORO], D);
pre!("GPT3_FINNISH", ["gpt3-finnish"], &[PORO], D);
pre!("EXAONE", ["exaone"], STARCODER, D);
pre!("EXAONE_MOE", ["exaone-moe"], &[EXAONE_MOE], D);
pre!(
    "CHAMELEON",
    ["chameleon"],
    &[
        "<sentinel:[0-9]+>",
        "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        "([\\t\\n]|    |  )",
        "\\p{N}",
        "[\\p{P}!-/:-@\\[-`{-~]",
        GPT2
    ],
    D.no_clean().add_bos()
);
pre!("MINERVA", ["minerva-7b"], STARCODER, D);
pre!("GPT4O", ["gpt-4o", "llama4", "kanana2", "talkie"], &[GPT4O], D.no_clean());
pre!("GRANITE_EMB_MULTI", ["granite-embed-multi-97m"], &[GRANITE_EMB_MULTI], D.no_clean().ignore_merges());
pre!("TINY_AYA", ["tiny_aya", "cohere2moe"], &["\\d{1,3}(?=(?:\\d{3})*\\b)", TINY_AYA_MAIN], D.no_clean());
pre!("SUPERBPE", ["superbpe"], &["\\p{N}+", "(?=(\\d{3})+(?!\\d))"], D.no_clean());
pre!("TRILLION", ["trillion"], &[GPT2], D.no_clean());
pre!("GRANITE_DOCLING", ["granite-docling"], &[GPT2], D.no_clean());
pre!("BAILINGMOE", ["bailingmoe", "bailingmoe2", "llada-moe"], &[BAILINGMOE], D.no_clean());
pre!("SEED_CODER", ["seed-coder"], &[SEED_CODER], D.no_clean());
pre!("HUNYUAN", ["hunyuan"], &[QWEN2], D.no_clean());
pre!("HUNYUAN_DENSE", ["hunyuan-dense"], &["\\p{N}{1,3}", CJK_KANA, DEEPSEEK3_MAIN], D.no_clean());
pre!("HY_V4", ["hy_v4"], &["\\p{N}{1,3}", CJK_KANA, DEEPSEEK3_MAIN], D.no_clean());
pre!("JOYAI_LLM", ["joyai-llm"], &["\\p{N}{1,3}", CJK_KANA, DEEPSEEK3_MAIN], D.no_clean());
pre!("KIMI_K2", ["kimi-k2"], &["\\p{Han}+"], D.no_clean());
pre!("UFAKZEKA", ["ufakzeka"], &[UFAKZEKA], D.no_clean());
pre!("GROK_2", ["grok-2"], &[QWEN2], D.no_clean());
pre!("AFMOE", ["afmoe"], &["\\p{AFMoE_digits}", AFMOE_CJK, AFMOE_MAIN], D.no_clean());
pre!("LAGUNA", ["laguna"], &[NEWLINES, QWEN2], D.no_clean());
pre!("MINIMAX_M2", ["minimax-m2"], &[GPT4O], D.no_clean());
pre!("SOLAR_OPEN", ["solar-open"], &[QWEN2], D.no_clean());
pre!("MELLUM2", ["mellum2"], STARCODER, D);

// ---------------------------------------------------------------------------------------
// splitting

/// A hand-written splitter: `split` cuts each piece of `lens` (consecutive lengths in
/// codepoints, the first starting at `cpts[base]`) into words and pushes their lengths,
/// in order, covering every codepoint.
pub type SplitFn = fn(cpts: &[u32], base: usize, lens: &[usize], out: &mut Words<'_>);

/// Code that replaces the regex engine for one exact pattern, as llama.cpp special-cases
/// some patterns (`unicode_regex_split_custom`). A pre-tokenizer whose regex sequence
/// contains `regex`, character for character, splits with `split` at that step.
///
/// Register one with `gguf_registry::submit!(FastSplitter::new(PATTERN, "name", f))`;
/// the built-ins (gpt2, llama3, qwen2, qwen3.5, kimi-k2, afmoe digits, newlines) are
/// entries of the same registry, so a plug-in can replace one with a higher priority.
#[derive(Debug)]
pub struct FastSplitter {
    /// The pattern text it implements.
    pub regex: &'static str,
    /// A name for reports.
    pub name: &'static str,
    /// The code.
    pub split: SplitFn,
    /// Higher wins when two entries claim one pattern; built-ins have 0.
    pub priority: i32,
    /// The module that registered it (set by `gguf_registry::submit!`).
    pub origin: &'static str,
}

impl FastSplitter {
    /// An entry at priority 0.
    pub const fn new(regex: &'static str, name: &'static str, split: SplitFn) -> Self {
        FastSplitter { regex, name, split, priority: 0, origin: "" }
    }
}

inventory::collect!(FastSplitter);

gguf_registry::named_entry!(FastSplitter, "fast splitter for regex", &'static str, |f: &FastSplitter| vec![f.regex]);

fn fast_splitters() -> &'static gguf_registry::Registry<FastSplitter> {
    static INDEX: std::sync::OnceLock<gguf_registry::Registry<FastSplitter>> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| gguf_registry::Registry::new(inventory::iter::<FastSplitter>))
}

/// The hand-written splitter registered for exactly `regex`, if any.
pub fn fast_splitter(regex: &str) -> Option<&'static FastSplitter> {
    fast_splitters().get(regex)
}

/// Clashes and overrides among the fast splitters. No problems for the built-ins; tested.
pub fn splitter_problems() -> gguf_registry::Report {
    fast_splitters().report()
}

macro_rules! fast {
    ($re:expr, $name:literal, $f:expr) => {
        gguf_registry::submit!(FastSplitter::new($re, $name, $f));
    };
}

fast!(GPT2, "gpt2", split_gpt2);
fast!(LLAMA3, "llama3", |c, b, l, o| split_llama3(c, b, l, o, Digits::UpTo3, false));
fast!(
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "llama3-case-insensitive",
    |c, b, l, o| split_llama3(c, b, l, o, Digits::UpTo3, false)
);
fast!(QWEN2, "qwen2", |c, b, l, o| split_llama3(c, b, l, o, Digits::One, false));
fast!(QWEN35, "qwen3.5", |c, b, l, o| split_llama3(c, b, l, o, Digits::One, true));
fast!("\\p{Han}+", "kimi-k2", split_kimi_k2);
fast!("\\p{AFMoE_digits}", "afmoe-digits", split_afmoe);
fast!("\\d{1,3}(?=(?:\\d{3})*\\b)", "afmoe-digits-lookahead", split_afmoe);
fast!(NEWLINES, "newlines", split_newlines);

#[derive(Debug, Clone)]
enum Splitter {
    Hand(&'static FastSplitter),
    Engine { regex: Box<Regex>, collapsed: bool },
}

/// A compiled regex sequence.
#[derive(Debug, Clone)]
pub struct CompiledPre {
    splitters: Vec<Splitter>,
    need_collapse: bool,
    /// GPT-2 byte encoding of the words.
    pub byte_encode: bool,
}

const UCAT: &[(&str, u16)] = &[
    ("\\p{N}", Flags::NUMBER),
    ("\\p{L}", Flags::LETTER),
    ("\\p{P}", Flags::PUNCTUATION),
    ("\\p{M}", Flags::ACCENT_MARK),
    ("\\p{S}", Flags::SYMBOL),
    ("\\p{Lu}", Flags::LETTER),
    ("\\p{Ll}", Flags::LETTER),
    ("\\p{Lt}", Flags::LETTER),
    ("\\p{Lm}", Flags::LETTER),
    ("\\p{Lo}", Flags::LETTER),
];

fn ucat_cpt(flag: u16) -> Option<u32> {
    Some(match flag {
        Flags::NUMBER => 0xD1,
        Flags::LETTER => 0xD2,
        Flags::PUNCTUATION => 0xD3,
        Flags::ACCENT_MARK => 0xD4,
        Flags::SYMBOL => 0xD5,
        _ => return None,
    })
}

fn ucat_ascii(flag: u16) -> &'static str {
    match flag {
        Flags::NUMBER => "0-9",
        Flags::LETTER => "A-Za-z",
        Flags::PUNCTUATION => "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}",
        Flags::SYMBOL => "\\$\\+<-=>\\^`\\|\\~",
        _ => "",
    }
}

/// llama.cpp's rewrite of a pattern with `\p{..}` into one over the collapsed text.
fn collapse_regex(re: &str) -> Result<Vec<u32>, Error> {
    let b = re.as_bytes();
    if !re.is_ascii() {
        return Err(Error::Regex {
            pattern: re.to_string(),
            message: "regex includes both unicode categories and non-ASCII characters - not supported".into(),
        });
    }
    let mut out: Vec<u32> = Vec::with_capacity(b.len() * 2);
    let mut inside = false;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' && (i == 0 || b[i - 1] != b'\\') {
            out.push('[' as u32);
            inside = true;
            i += 1;
            continue;
        }
        if inside && b[i] == b']' && b[i - 1] != b'\\' {
            out.push(']' as u32);
            inside = false;
            i += 1;
            continue;
        }
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1] == b'p' && b[i + 2] == b'{' {
            if let Some(close) = re[i + 3..].find('}').map(|p| p + i + 3) {
                if close <= i + 10 {
                    let pat = &re[i..=close];
                    if let Some(&(_, flag)) = UCAT.iter().find(|(n, _)| *n == pat) {
                        if !inside {
                            out.push('[' as u32);
                        }
                        out.push(ucat_cpt(flag).unwrap_or(0xD0));
                        out.extend(ucat_ascii(flag).chars().map(|c| c as u32));
                        if !inside {
                            out.push(']' as u32);
                        }
                        i = close + 1;
                        continue;
                    }
                }
            }
        }
        out.push(b[i] as u32);
        i += 1;
    }
    Ok(out)
}

impl CompiledPre {
    /// Compiles a regex sequence the way llama.cpp dispatches it.
    pub fn new(regexes: &[&str], byte_encode: bool) -> Result<CompiledPre, Error> {
        let mut splitters = Vec::new();
        let mut need_collapse = false;
        for &re in regexes {
            let uses_cat = UCAT.iter().any(|(n, _)| re.contains(n));
            need_collapse |= uses_cat;
            let s = if let Some(f) = fast_splitter(re) {
                Splitter::Hand(f)
            } else if uses_cat {
                Splitter::Engine { regex: Box::new(Regex::new(&collapse_regex(re)?)?), collapsed: true }
            } else {
                Splitter::Engine { regex: Box::new(Regex::from_text(re)?), collapsed: false }
            };
            splitters.push(s);
        }
        Ok(CompiledPre { splitters, need_collapse, byte_encode })
    }

    /// Splits text into words (llama.cpp's `unicode_regex_split`); words are GPT-2
    /// byte-encoded when `byte_encode`.
    pub fn split(&self, text: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        let mut words = Vec::new();
        self.split_each(text, &mut |w| {
            words.push(w.to_vec());
            Ok(())
        })?;
        Ok(words)
    }

    /// [`CompiledPre::split`] without collecting: `f` gets each word in order, in a
    /// buffer it may not keep. Each splitter hands its words to the next in batches
    /// (every splitter works within the pieces of the previous one), so beyond the
    /// codepoints of the text (and, for patterns on the engine, their collapsed copy)
    /// memory stays bounded however long the text. An error stops the words; it is the
    /// one `split` would return.
    pub fn split_each(&self, text: &[u8], f: &mut dyn FnMut(&[u8]) -> Result<(), Error>) -> Result<(), Error> {
        let cpts = unicode::cpts_from_utf8(text);
        let engine =
            |c: bool| self.splitters.iter().any(|s| matches!(s, Splitter::Engine { collapsed, .. } if *collapsed == c));
        let collapsed: Vec<u32> = if self.need_collapse && engine(true) {
            cpts.iter()
                .map(|&c| {
                    if c < 128 {
                        return c;
                    }
                    let f = unicode::flags(c);
                    if f.is_whitespace() {
                        0x0B
                    } else {
                        ucat_cpt(f.category()).unwrap_or(0xD0)
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let wide: Vec<u32> = if engine(false) {
            cpts.iter().map(|&c| if c > 0x7F && unicode::flags(c).is_whitespace() { 0x0B } else { c }).collect()
        } else {
            Vec::new()
        };
        let ctx = Ctx { cpts: &cpts, collapsed: &collapsed, wide: &wide };
        // a codepoint past U+10FFFF fails the words' UTF-8 encoding, after all splitting
        let invalid = cpts.iter().copied().find(|&c| c > 0x10FFFF);
        let table = unicode::byte_to_cpt_table();
        let (mut w, mut e) = (Vec::new(), Vec::new());
        let mut err: Option<Error> = None;
        let mut emit = |start: usize, lens: &[usize], err: &mut Option<Error>| {
            if invalid.is_some() {
                return;
            }
            let mut pos = start;
            for &len in lens {
                w.clear();
                for &c in &cpts[pos..pos + len] {
                    unicode::push_utf8(&mut w, c);
                }
                pos += len;
                let word = if self.byte_encode {
                    e.clear();
                    for &b in &w {
                        unicode::push_utf8(&mut e, table[b as usize]);
                    }
                    &e
                } else {
                    &w
                };
                if let Err(x) = f(word) {
                    *err = Some(x);
                    return;
                }
            }
        };
        self.level(0, &ctx, 0, &[cpts.len()], &mut emit, &mut err);
        if let Some(x) = err {
            return Err(x);
        }
        match invalid {
            Some(c) => Err(Error::InvalidCodepoint(c)),
            None => Ok(()),
        }
    }

    /// Runs splitter `i` over the pieces `lens` (starting at codepoint `base`), handing
    /// its words on to splitter `i + 1` — or to `emit` past the last one.
    fn level(&self, i: usize, ctx: &Ctx, base: usize, lens: &[usize], emit: &mut Emit, err: &mut Option<Error>) {
        if err.is_some() {
            return;
        }
        let Some(s) = self.splitters.get(i) else {
            emit(base, lens, err);
            return;
        };
        let mut cursor = base;
        let mut inner_err = None;
        let mut next = |b: &[usize]| {
            self.level(i + 1, ctx, cursor, b, emit, &mut inner_err);
            cursor += b.iter().sum::<usize>();
        };
        let mut out = Words { buf: Vec::new(), next: &mut next };
        let r = match s {
            Splitter::Engine { regex, collapsed } => {
                split_engine(regex, if *collapsed { ctx.collapsed } else { ctx.wide }, base, lens, &mut out)
            }
            Splitter::Hand(f) => {
                (f.split)(ctx.cpts, base, lens, &mut out);
                Ok(())
            }
        };
        // on a regex error the words so far still go on (`split` drops them anyway)
        out.flush();
        drop(out);
        if let Err(x) = r {
            inner_err.get_or_insert(x);
        }
        if let Some(x) = inner_err {
            err.get_or_insert(x);
        }
    }
}

/// Receives the words past the last splitter: their start, lengths, and the error slot.
type Emit<'e> = dyn FnMut(usize, &[usize], &mut Option<Error>) + 'e;

/// The texts a split works on: the codepoints, and the copies the engine matches on.
struct Ctx<'a> {
    cpts: &'a [u32],
    collapsed: &'a [u32],
    wide: &'a [u32],
}

/// Words (lengths in codepoints) handed from one splitter to the next per batch.
const BATCH: usize = 4096;

/// Where a splitter puts its words: their lengths in codepoints, in order (handed on to
/// the next splitter of the sequence in batches).
pub struct Words<'a> {
    buf: Vec<usize>,
    next: &'a mut dyn FnMut(&[usize]),
}

impl Words<'_> {
    /// One word of `len` codepoints, following the previous one.
    #[inline]
    pub fn push(&mut self, len: usize) {
        self.buf.push(len);
        if self.buf.len() >= BATCH {
            self.flush();
        }
    }
    fn flush(&mut self) {
        if !self.buf.is_empty() {
            (self.next)(&self.buf);
            self.buf.clear();
        }
    }
}

fn split_engine(regex: &Regex, text: &[u32], base: usize, offsets: &[usize], out: &mut Words<'_>) -> Result<(), Error> {
    let mut start = base;
    for &len in offsets {
        let sub = &text[start..start + len];
        let mut idx = 0;
        regex.for_each_match(sub, &mut |s, e| {
            if s > idx {
                out.push(s - idx);
            }
            out.push(e - s);
            idx = e;
        })?;
        if idx < len {
            out.push(len - idx);
        }
        start += len;
    }
    Ok(())
}

const OUT_OF_RANGE: u32 = 0xFFFF_FFFF;

/// One chunk of text being split by a hand-written splitter.
struct Chunk<'a, 'b> {
    cpts: &'a [u32],
    ini: usize,
    end: usize,
    prev_end: usize,
    out: &'a mut Words<'b>,
}

impl Chunk<'_, '_> {
    #[inline]
    fn cpt(&self, pos: usize) -> u32 {
        if self.ini <= pos && pos < self.end {
            self.cpts[pos]
        } else {
            OUT_OF_RANGE
        }
    }
    #[inline]
    fn flags(&self, pos: usize) -> Flags {
        if self.ini <= pos && pos < self.end {
            unicode::flags(self.cpts[pos])
        } else {
            Flags(0)
        }
    }
    #[inline]
    fn add(&mut self, end: usize) -> usize {
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: the match length.
    #[allow(clippy::nonminimal_bool)]
    fn contraction(&self, pos: usize, fold: bool) -> usize {
        let low = |c: u32| if fold { unicode::to_lower(c) } else { c };
        if self.cpt(pos) == '\'' as u32 && pos + 1 < self.end {
            let n = low(self.cpt(pos + 1));
            if [b's', b't', b'm', b'd'].iter().any(|&c| n == c as u32) {
                return 2;
            }
            if pos + 2 < self.end {
                let nn = low(self.cpt(pos + 2));
                if (n == 'r' as u32 && nn == 'e' as u32)
                    || (n == 'v' as u32 && nn == 'e' as u32)
                    || (n == 'l' as u32 && nn == 'l' as u32)
                {
                    return 3;
                }
            }
        }
        0
    }
    /// The trailing whitespace rules shared by the splitters: `\s*[\r\n]+` (when
    /// `newlines`), `\s+(?!\S)`, `\s+`, else one codepoint.
    fn whitespace(&mut self, pos: &mut usize, newlines: bool) {
        let mut n = 0;
        let mut last_rn = 0;
        while self.flags(*pos + n).is_whitespace() {
            let c = self.cpt(*pos + n);
            if c == '\r' as u32 || c == '\n' as u32 {
                last_rn = *pos + n + 1;
            }
            n += 1;
        }
        if newlines && last_rn > 0 {
            *pos = last_rn;
            self.add(*pos);
            return;
        }
        if n > 1 && self.cpt(*pos + n) != OUT_OF_RANGE {
            *pos += n - 1;
            self.add(*pos);
            return;
        }
        if n > 0 {
            *pos += n;
            self.add(*pos);
            return;
        }
        *pos += 1;
        self.add(*pos);
    }
}

fn for_chunks(cpts: &[u32], base: usize, offsets: &[usize], out: &mut Words<'_>, mut f: impl FnMut(&mut Chunk)) {
    let mut start = base;
    for &len in offsets {
        let mut c = Chunk { cpts, ini: start, end: start + len, prev_end: start, out: &mut *out };
        f(&mut c);
        start += len;
    }
}

fn split_gpt2(cpts: &[u32], base: usize, offsets: &[usize], out: &mut Words<'_>) {
    for_chunks(cpts, base, offsets, out, |c| {
        let mut pos = c.ini;
        while pos < c.end {
            let cpt = c.cpt(pos);
            let flags = c.flags(pos);
            let k = c.contraction(pos, false);
            if k > 0 {
                pos += c.add(pos + k);
                continue;
            }
            let mut f2 = if cpt == ' ' as u32 { c.flags(pos + 1) } else { flags };
            let sp = (cpt == ' ' as u32) as usize;
            if f2.is_letter() {
                pos += sp;
                while f2.is_letter() {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                c.add(pos);
                continue;
            }
            if f2.is_number() {
                pos += sp;
                while f2.is_number() {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                c.add(pos);
                continue;
            }
            let other = |f: Flags| !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.0 != 0;
            if other(f2) {
                pos += sp;
                while other(f2) {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                c.add(pos);
                continue;
            }
            c.whitespace(&mut pos, false);
        }
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Digits {
    UpTo3,
    One,
}

/// llama3 (`\p{N}{1,3}`), qwen2 (`\p{N}`) and qwen35 (`\p{N}`, letters take `\p{M}`).
fn split_llama3(cpts: &[u32], base: usize, offsets: &[usize], out: &mut Words<'_>, digits: Digits, marks: bool) {
    for_chunks(cpts, base, offsets, out, |c| {
        let mut pos = c.ini;
        let letter = |f: Flags| f.is_letter() || (marks && f.is_accent_mark());
        while pos < c.end {
            let cpt = c.cpt(pos);
            let flags = c.flags(pos);
            let k = c.contraction(pos, true);
            if k > 0 {
                pos += c.add(pos + k);
                continue;
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(cpt == '\r' as u32 || cpt == '\n' as u32 || flags.is_number())
                && (letter(flags) || letter(c.flags(pos + 1)))
            {
                pos += 1;
                while letter(c.flags(pos)) {
                    pos += 1;
                }
                c.add(pos);
                continue;
            }
            if flags.is_number() {
                match digits {
                    Digits::One => {
                        pos += 1;
                        c.add(pos);
                    }
                    Digits::UpTo3 => {
                        let mut ini = pos;
                        while c.flags(pos).is_number() {
                            pos += 1;
                            if pos - ini >= 3 {
                                c.add(pos);
                                ini = pos;
                            }
                        }
                        c.add(pos);
                    }
                }
                continue;
            }
            // <space>?[^\s\p{L}\p{N}]+[\r\n]*
            let mut f2 = if cpt == ' ' as u32 { c.flags(pos + 1) } else { flags };
            let other = |f: Flags| !(f.is_whitespace() || letter(f) || f.is_number());
            if other(f2) && flags.0 != 0 {
                pos += (cpt == ' ' as u32) as usize;
                while other(f2) && f2.0 != 0 {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                let mut c2 = c.cpt(pos);
                while c2 == '\r' as u32 || c2 == '\n' as u32 {
                    pos += 1;
                    c2 = c.cpt(pos);
                }
                c.add(pos);
                continue;
            }
            c.whitespace(&mut pos, true);
        }
    })
}

fn split_kimi_k2(cpts: &[u32], base: usize, offsets: &[usize], out: &mut Words<'_>) {
    for_chunks(cpts, base, offsets, out, |c| {
        let mut pos = c.ini;
        let nonhan_letter = |c: &Chunk, p: usize| c.flags(p).is_letter() && !unicode::is_han(c.cpt(p));
        while pos < c.end {
            let cpt = c.cpt(pos);
            let flags = c.flags(pos);
            if unicode::is_han(cpt) {
                while unicode::is_han(c.cpt(pos)) {
                    pos += 1;
                }
                c.add(pos);
                continue;
            }
            let lead_ok = !(cpt == '\r' as u32 || cpt == '\n' as u32 || flags.is_letter() || flags.is_number());
            let is_letter_pattern =
                (flags.is_letter() && !unicode::is_han(cpt)) || (lead_ok && nonhan_letter(c, pos + 1));
            if is_letter_pattern {
                let mut has_leading = false;
                if lead_ok {
                    has_leading = true;
                    pos += 1;
                }
                let mut has_letters = false;
                while nonhan_letter(c, pos) {
                    has_letters = true;
                    pos += 1;
                }
                if has_letters || (!has_leading && nonhan_letter(c, pos)) {
                    if !has_letters {
                        pos += 1;
                    }
                    while nonhan_letter(c, pos) {
                        pos += 1;
                    }
                    pos += c.contraction(pos, true);
                    c.add(pos);
                    continue;
                } else if has_leading {
                    pos -= 1;
                }
            }
            if flags.is_number() {
                let mut ini = pos;
                while c.flags(pos).is_number() {
                    pos += 1;
                    if pos - ini >= 3 {
                        c.add(pos);
                        ini = pos;
                    }
                }
                c.add(pos);
                continue;
            }
            let mut f2 = if cpt == ' ' as u32 { c.flags(pos + 1) } else { flags };
            let other = |f: Flags| !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.0 != 0;
            if other(f2) {
                pos += (cpt == ' ' as u32) as usize;
                while other(f2) {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                let mut c2 = c.cpt(pos);
                while c2 == '\r' as u32 || c2 == '\n' as u32 {
                    pos += 1;
                    c2 = c.cpt(pos);
                }
                c.add(pos);
                continue;
            }
            c.whitespace(&mut pos, true);
        }
    })
}

fn split_afmoe(cpts: &[u32], base: usize, offsets: &[usize], out: &mut Words<'_>) {
    for_chunks(cpts, base, offsets, out, |c| {
        let mut pos = c.ini;
        while pos < c.end {
            if c.flags(pos).is_number() {
                let start = pos;
                let mut count = 0;
                while c.flags(pos).is_number() && pos < c.end {
                    count += 1;
                    pos += 1;
                }
                let rem = count % 3;
                let mut cur = start;
                if rem > 0 {
                    c.add(cur + rem);
                    cur += rem;
                }
                while cur < start + count {
                    c.add(cur + 3);
                    cur += 3;
                }
                continue;
            }
            pos += 1;
        }
        if c.prev_end < c.end {
            let e = c.end;
            c.add(e);
        }
    })
}

fn split_newlines(cpts: &[u32], base: usize, offsets: &[usize], out: &mut Words<'_>) {
    let mut start = base;
    for &len in offsets {
        let end = start + len;
        let mut pos = start;
        while pos < end {
            let nl = cpts[pos] == '\n' as u32;
            let run = pos;
            while pos < end && (cpts[pos] == '\n' as u32) == nl {
                pos += 1;
            }
            out.push(pos - run);
        }
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        let p = lookup(pre).unwrap();
        let c = CompiledPre::new(p.regexes, false).unwrap();
        c.split(text.as_bytes()).unwrap().into_iter().map(|w| String::from_utf8(w).unwrap()).collect()
    }

    #[test]
    fn every_regex_compiles() {
        for p in all() {
            CompiledPre::new(p.regexes, p.byte_encode).unwrap_or_else(|e| panic!("{}: {e}", p.kind));
        }
    }

    #[test]
    fn gpt2_splits() {
        assert_eq!(words("gpt-2", "Hello world's  end\n"), vec!["Hello", " world", "'s", " ", " end", "\n"]);
        assert_eq!(words("gpt-2", "a 123!!"), vec!["a", " 123", "!!"]);
    }

    #[test]
    fn llama3_and_qwen2_digits() {
        assert_eq!(words("llama-bpe", "12345 x"), vec!["123", "45", " x"]);
        assert_eq!(words("qwen2", "123"), vec!["1", "2", "3"]);
        assert_eq!(words("qwen2", "a\r\n\r\n b"), vec!["a", "\r\n\r\n", " b"]);
    }

    #[test]
    fn engine_and_custom_agree_on_gpt2_pattern() {
        // the hand-written gpt2 splitter vs the generic engine on the collapsed pattern
        let custom = CompiledPre::new(&[GPT2], false).unwrap();
        let re = Regex::new(&collapse_regex(GPT2).unwrap()).unwrap();
        let engine = CompiledPre {
            splitters: vec![Splitter::Engine { regex: Box::new(re), collapsed: true }],
            need_collapse: true,
            byte_encode: false,
        };
        for t in ["Hello, world!  It's 2024...\n\n  ok", "  a\tb  \n", "ÀÉ ünïcödé 漢字 123 ½", "x   "] {
            assert_eq!(custom.split(t.as_bytes()).unwrap(), engine.split(t.as_bytes()).unwrap(), "{t:?}");
        }
    }

    #[test]
    fn starcoder_splits_digits() {
        assert_eq!(words("starcoder", "ab 123"), vec!["ab", " ", "1", "2", "3"]);
    }

    #[test]
    fn unknown_name_lists_known() {
        let e = lookup("nope").unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains("qwen2") && e.contains("smollm"), "{e}");
    }
}
