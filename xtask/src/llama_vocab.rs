//! The tokenizer oracle: llama.cpp's `libllama.so` loaded with `libloading`, the model
//! opened with `vocab_only`, and `llama_tokenize` / `llama_token_to_piece` /
//! `llama_detokenize` / `llama_chat_apply_template` wrapped in safe methods that size
//! their buffers from the functions' own "needed" answers.
//!
//! `struct llama_model_params` is passed by value: its mirror is [`crate::llama`]'s, checked
//! against `include/llama.h` of the same source tree on load.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};

use crate::llama::ModelParams;
use libloading::Library;

#[repr(C)]
struct ChatMessage {
    role: *const c_char,
    content: *const c_char,
}

type LogCb = unsafe extern "C" fn(level: c_int, text: *const c_char, user: *mut c_void);
unsafe extern "C" fn quiet(_l: c_int, _t: *const c_char, _u: *mut c_void) {}

#[allow(dead_code)] // the chat functions are used by the chat-template check
struct Fns {
    default_params: unsafe extern "C" fn() -> ModelParams,
    load: unsafe extern "C" fn(*const c_char, ModelParams) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
    get_vocab: unsafe extern "C" fn(*const c_void) -> *const c_void,
    n_tokens: unsafe extern "C" fn(*const c_void) -> i32,
    tokenize: unsafe extern "C" fn(*const c_void, *const c_char, i32, *mut i32, i32, bool, bool) -> i32,
    to_piece: unsafe extern "C" fn(*const c_void, i32, *mut c_char, i32, i32, bool) -> i32,
    detokenize: unsafe extern "C" fn(*const c_void, *const i32, i32, *mut c_char, i32, bool, bool) -> i32,
    is_eog: unsafe extern "C" fn(*const c_void, i32) -> bool,
    chat_apply: unsafe extern "C" fn(*const c_char, *const ChatMessage, usize, bool, *mut c_char, i32) -> i32,
    chat_template: unsafe extern "C" fn(*const c_void, *const c_char) -> *const c_char,
}

/// `libllama.so`.
pub struct LlamaLib {
    _lib: Library,
    f: Fns,
}

/// A model opened with `vocab_only`.
pub struct LlamaVocab<'a> {
    lib: &'a LlamaLib,
    model: *mut c_void,
    vocab: *const c_void,
    n_vocab: i32,
}

impl LlamaLib {
    /// Loads `libllama.so` from the llama.cpp build and checks the params layout.
    pub fn load(build_bin: &Path, src: &Path) -> Result<LlamaLib> {
        crate::llama::check_model_params_layout(src)?;
        let path = build_bin.join("libllama.so");
        // SAFETY: loading the library built by `cargo xtask llama-cpp`; its initializers
        // are llama.cpp's own.
        let lib = unsafe { Library::new(&path) }.with_context(|| format!("loading {}", path.display()))?;
        // SAFETY: the symbols have the C signatures declared in llama.h (checked above for
        // the one struct passed by value).
        unsafe {
            let init: libloading::Symbol<unsafe extern "C" fn()> = lib.get(b"llama_backend_init\0")?;
            init();
            let log_set: libloading::Symbol<unsafe extern "C" fn(Option<LogCb>, *mut c_void)> =
                lib.get(b"llama_log_set\0")?;
            log_set(Some(quiet), std::ptr::null_mut());
            let f = Fns {
                default_params: *lib.get(b"llama_model_default_params\0")?,
                load: *lib.get(b"llama_model_load_from_file\0")?,
                free: *lib.get(b"llama_model_free\0")?,
                get_vocab: *lib.get(b"llama_model_get_vocab\0")?,
                n_tokens: *lib.get(b"llama_vocab_n_tokens\0")?,
                tokenize: *lib.get(b"llama_tokenize\0")?,
                to_piece: *lib.get(b"llama_token_to_piece\0")?,
                detokenize: *lib.get(b"llama_detokenize\0")?,
                is_eog: *lib.get(b"llama_vocab_is_eog\0")?,
                chat_apply: *lib.get(b"llama_chat_apply_template\0")?,
                chat_template: *lib.get(b"llama_model_chat_template\0")?,
            };
            Ok(LlamaLib { _lib: lib, f })
        }
    }

    /// Opens a GGUF's vocabulary.
    pub fn open(&self, path: &Path) -> Result<LlamaVocab<'_>> {
        let c = CString::new(path.to_string_lossy().as_bytes())?;
        // SAFETY: default params from the library, vocab_only set; path is NUL-terminated.
        let model = unsafe {
            let mut p = (self.f.default_params)();
            p.vocab_only = true;
            (self.f.load)(c.as_ptr(), p)
        };
        if model.is_null() {
            bail!("libllama could not load {}", path.display());
        }
        // SAFETY: model is a live llama_model.
        let vocab = unsafe { (self.f.get_vocab)(model) };
        // SAFETY: vocab belongs to model.
        let n_vocab = unsafe { (self.f.n_tokens)(vocab) };
        Ok(LlamaVocab { lib: self, model, vocab, n_vocab })
    }

    /// `llama_chat_apply_template` with a named or Jinja-source template.
    pub fn chat_apply(&self, tmpl: &str, msgs: &[(String, String)], add_ass: bool) -> Result<Option<Vec<u8>>> {
        let t = CString::new(tmpl)?;
        let cs: Vec<(CString, CString)> = msgs
            .iter()
            .map(|(r, c)| Ok((CString::new(r.as_str())?, CString::new(c.as_str())?)))
            .collect::<Result<_>>()?;
        let raw: Vec<ChatMessage> =
            cs.iter().map(|(r, c)| ChatMessage { role: r.as_ptr(), content: c.as_ptr() }).collect();
        let mut buf = vec![0u8; 4096];
        loop {
            // SAFETY: all pointers valid for the call; buf has buf.len() bytes.
            let n = unsafe {
                (self.f.chat_apply)(
                    t.as_ptr(),
                    raw.as_ptr(),
                    raw.len(),
                    add_ass,
                    buf.as_mut_ptr().cast(),
                    buf.len() as i32,
                )
            };
            if n < 0 {
                return Ok(None);
            }
            if n as usize <= buf.len() {
                buf.truncate(n as usize);
                return Ok(Some(buf));
            }
            buf.resize(n as usize, 0);
        }
    }
}

impl LlamaVocab<'_> {
    /// Vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab as usize
    }

    /// `llama_tokenize`.
    pub fn tokenize(&self, text: &[u8], add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        ensure!(text.len() < i32::MAX as usize / 2, "text too long");
        let mut out = vec![0i32; text.len() + 8];
        loop {
            // SAFETY: text and out are valid for the lengths passed.
            let n = unsafe {
                (self.lib.f.tokenize)(
                    self.vocab,
                    text.as_ptr().cast(),
                    text.len() as i32,
                    out.as_mut_ptr(),
                    out.len() as i32,
                    add_special,
                    parse_special,
                )
            };
            if n >= 0 {
                out.truncate(n as usize);
                return Ok(out.into_iter().map(|x| x as u32).collect());
            }
            ensure!(n != i32::MIN, "llama_tokenize overflow");
            out.resize((-n) as usize, 0);
        }
    }

    /// `llama_token_to_piece` with lstrip 0.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<Vec<u8>> {
        ensure!((id as usize) < self.n_vocab(), "id {id} out of range");
        let mut buf = vec![0u8; 64];
        loop {
            // SAFETY: id is in range (libllama aborts otherwise); buf holds buf.len() bytes.
            let n = unsafe {
                (self.lib.f.to_piece)(self.vocab, id as i32, buf.as_mut_ptr().cast(), buf.len() as i32, 0, special)
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            buf.resize((-n) as usize, 0);
        }
    }

    /// `llama_detokenize`.
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Result<Vec<u8>> {
        ensure!(ids.iter().all(|&i| (i as usize) < self.n_vocab()), "id out of range");
        let ids: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        let mut buf = vec![0u8; ids.len() * 8 + 64];
        loop {
            // SAFETY: ids in range; buffers valid for the lengths passed.
            let n = unsafe {
                (self.lib.f.detokenize)(
                    self.vocab,
                    ids.as_ptr(),
                    ids.len() as i32,
                    buf.as_mut_ptr().cast(),
                    buf.len() as i32,
                    remove_special,
                    unparse_special,
                )
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            buf.resize((-n) as usize, 0);
        }
    }

    /// `llama_vocab_is_eog`.
    pub fn is_eog(&self, id: u32) -> bool {
        // SAFETY: the set lookup accepts any id.
        unsafe { (self.lib.f.is_eog)(self.vocab, id as i32) }
    }

    /// `llama_model_chat_template(model, NULL)`.
    #[allow(dead_code)]
    pub fn chat_template(&self) -> Option<String> {
        // SAFETY: returns a pointer into the model's metadata or NULL.
        let p = unsafe { (self.lib.f.chat_template)(self.model, std::ptr::null()) };
        if p.is_null() {
            return None;
        }
        // SAFETY: NUL-terminated string owned by the model.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

impl Drop for LlamaVocab<'_> {
    fn drop(&mut self) {
        // SAFETY: model came from llama_model_load_from_file and is freed once.
        unsafe { (self.lib.f.free)(self.model) }
    }
}
