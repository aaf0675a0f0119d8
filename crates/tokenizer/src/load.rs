//! [`Tokenizer::from_gguf`]: the vocabulary, its flags and special tokens from GGUF
//! metadata, as llama.cpp's `llama_vocab::load`.

use std::collections::BTreeSet;

use gguf_format::{Array, Metadata, Value};

use crate::encode::find;
use crate::texts::{TextIndex, Texts};
use crate::*;

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
        if pre.is_some_and(|p| p.flags.force_bos) && !vocab.add_bos {
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
                let compiled = pretok::CompiledPre::new(p.regexes, p.byte_encode)?;
                Model::Bpe(Box::new(bpe::Bpe::new(&vocab, merges, compiled, p.flags.newline_words_whole)?))
            }
        };
        Ok(Tokenizer { vocab, model, model_name, pre_name })
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
