//! `gguf tokenize`, `gguf detokenize`, `gguf chat-template`: the tokenizer and chat
//! template of a GGUF file, printed the way llama.cpp's `llama-tokenize` prints them. A
//! shard of a split model opens the whole set; its tokenizer is the first shard's metadata.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use gguf_format::SplitGguf;
use gguf_tokenizer::chat::{ChatTemplate, Message};
use gguf_tokenizer::Tokenizer;

/// `gguf tokenize`.
#[derive(clap::Args, Debug)]
pub struct TokenizeArgs {
    /// The GGUF file or a `gguf fetch --list` name (default: the default model).
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// Text to tokenize.
    #[arg(short = 'p', long = "prompt", conflicts_with = "file")]
    pub prompt: Option<String>,
    /// File whose bytes are tokenized.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Print only the ids, as one Python-style list.
    #[arg(long)]
    pub ids: bool,
    /// Do not add BOS even if the model wants it.
    #[arg(long = "no-bos")]
    pub no_bos: bool,
    /// Turn special-token text (e.g. `<|im_start|>`) into those tokens.
    #[arg(long = "parse-special")]
    pub parse_special: bool,
    /// Print the number of tokens at the end.
    #[arg(long = "show-count")]
    pub show_count: bool,
}

/// `gguf detokenize`.
#[derive(clap::Args, Debug)]
pub struct DetokenizeArgs {
    /// The GGUF file or a `gguf fetch --list` name (default: the default model).
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// Token ids (separated by spaces or commas; `[1, 2]` works too).
    #[arg(required = true, num_args = 1..)]
    pub ids: Vec<String>,
    /// Render control tokens' text too.
    #[arg(long)]
    pub special: bool,
}

/// `gguf chat-template`.
#[derive(clap::Args, Debug)]
pub struct ChatTemplateArgs {
    /// The GGUF file or a `gguf fetch --list` name (default: the default model).
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// The conversation: a JSON array of `{"role", "content", ...}` objects, or a path
    /// to a file holding one.
    #[arg(long)]
    pub messages: String,
    /// A JSON array of tool definitions (or a path to one).
    #[arg(long)]
    pub tools: Option<String>,
    /// End with the assistant's turn opener.
    #[arg(long = "add-generation-prompt")]
    pub add_generation_prompt: bool,
    /// Use this built-in template (chatml, llama3, gemma, ...) instead of the file's.
    #[arg(long)]
    pub template: Option<String>,
}

fn load(m: &Option<PathBuf>) -> Result<(SplitGguf, Tokenizer)> {
    let path = &crate::engine::model_path(m.as_deref())?;
    let f = SplitGguf::open(path).with_context(|| format!("opening {}", path.display()))?;
    let t = Tokenizer::from_gguf(f.metadata()).with_context(|| format!("tokenizer of {}", path.display()))?;
    Ok((f, t))
}

/// Runs `gguf tokenize`, writing to `out`.
pub fn tokenize(a: &TokenizeArgs, out: &mut dyn Write) -> Result<()> {
    let (_f, tok) = load(&a.model)?;
    let text: Vec<u8> = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone().into_bytes(),
        (None, Some(f)) => std::fs::read(f).with_context(|| format!("reading {}", f.display()))?,
        (None, None) => bail!("give the text with -p TEXT or -f FILE"),
    };
    let add_bos = tok.add_bos() && !a.no_bos;
    let ids = tok.encode_bytes(&text, add_bos, a.parse_special)?;
    if a.ids {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "[{}]", list.join(", "))?;
    } else {
        for &id in &ids {
            let piece = tok.token_to_piece(id, true)?;
            write!(out, "{id:6} -> '")?;
            out.write_all(&piece)?;
            writeln!(out, "'")?;
        }
    }
    if a.show_count {
        writeln!(out, "Total number of tokens: {}", ids.len())?;
    }
    Ok(())
}

/// Parses ids given as `1 2 3`, `1,2,3` or `[1, 2, 3]`.
pub fn parse_ids(args: &[String]) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for a in args {
        for t in a.split(|c: char| c == ',' || c == '[' || c == ']' || c.is_whitespace()) {
            if t.is_empty() {
                continue;
            }
            ids.push(t.parse::<u32>().with_context(|| format!("not a token id: {t:?}"))?);
        }
    }
    Ok(ids)
}

/// Runs `gguf detokenize`.
pub fn detokenize(a: &DetokenizeArgs, out: &mut dyn Write) -> Result<()> {
    let (_f, tok) = load(&a.model)?;
    let ids = parse_ids(&a.ids)?;
    let text = tok.decode(&ids, false, a.special)?;
    out.write_all(&text)?;
    writeln!(out)?;
    Ok(())
}

fn json_arg(s: &str) -> Result<serde_json::Value> {
    let t = s.trim_start();
    let text = if t.starts_with('[') || t.starts_with('{') {
        s.to_string()
    } else {
        std::fs::read_to_string(s).with_context(|| format!("reading {s}"))?
    };
    serde_json::from_str(&text).context("parsing JSON")
}

/// Runs `gguf chat-template`.
pub fn chat_template(a: &ChatTemplateArgs, out: &mut dyn Write) -> Result<()> {
    let path = crate::engine::model_path(a.model.as_deref())?;
    let f = SplitGguf::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let tmpl = match &a.template {
        Some(name) => ChatTemplate::builtin(name)?,
        None => ChatTemplate::from_gguf(f.metadata())?
            .context("this file has no tokenizer.chat_template; pick a built-in one with --template NAME")?,
    };
    let msgs = json_arg(&a.messages)?;
    let msgs = msgs.as_array().context("--messages must be a JSON array")?;
    let messages: Vec<Message> = msgs.iter().map(Message::from_json).collect::<Result<_, _>>()?;
    let tools = a.tools.as_deref().map(json_arg).transpose()?;
    let s = tmpl.render(&messages, a.add_generation_prompt, tools.as_ref())?;
    out.write_all(s.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_any_list_form() {
        let v = |s: &[&str]| parse_ids(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["1", "2", "3"]).unwrap(), vec![1, 2, 3]);
        assert_eq!(v(&["[1, 15043, 3186]"]).unwrap(), vec![1, 15043, 3186]);
        assert_eq!(v(&["1,2", "3"]).unwrap(), vec![1, 2, 3]);
        assert!(v(&["1", "x"]).unwrap_err().to_string().contains("x"));
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;
    use gguf_format::{Array, GgufWriter, Value};

    /// A small byte-level BPE vocabulary written to a temporary GGUF.
    fn vocab_file(dir: &std::path::Path) -> PathBuf {
        let mut toks: Vec<Vec<u8>> = (0u32..256)
            .map(|b| {
                let c = match b {
                    0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => b,
                    _ => 256 + (0..b).filter(|&x| !matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)).count() as u32,
                };
                char::from_u32(c).unwrap().to_string().into_bytes()
            })
            .collect();
        toks.push(b"he".to_vec());
        toks.push(b"hel".to_vec());
        toks.push(b"<|im_start|>".to_vec());
        toks.push(b"<s>".to_vec());
        let mut types = vec![1i32; toks.len()];
        types[258] = 3;
        types[259] = 3;
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "llama");
        w.add_kv("tokenizer.ggml.model", "gpt2");
        w.add_kv("tokenizer.ggml.pre", "gpt-2");
        w.add_kv("tokenizer.ggml.tokens", Value::Array(Array::String(toks.into())));
        w.add_kv("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        w.add_kv("tokenizer.ggml.merges", Value::Array(Array::String(vec![b"h e".to_vec(), b"he l".to_vec()].into())));
        w.add_kv("tokenizer.ggml.bos_token_id", 259u32);
        w.add_kv("tokenizer.ggml.add_bos_token", true);
        w.add_kv(
            "tokenizer.chat_template",
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        );
        let p = dir.join("v.gguf");
        w.write_to_path(&p).unwrap();
        p
    }

    #[test]
    fn tokenize_detokenize_chat_template_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let model = vocab_file(dir.path());
        let run = |a: &TokenizeArgs| {
            let mut out = Vec::new();
            tokenize(a, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let mut a = TokenizeArgs {
            model: Some(model.clone()),
            prompt: Some("hello".into()),
            file: None,
            ids: true,
            no_bos: false,
            parse_special: false,
            show_count: false,
        };
        assert_eq!(run(&a), "[259, 257, 108, 111]\n");
        a.no_bos = true;
        assert_eq!(run(&a), "[257, 108, 111]\n");
        a.ids = false;
        assert_eq!(run(&a), "   257 -> 'hel'\n   108 -> 'l'\n   111 -> 'o'\n");
        a.ids = true;
        a.prompt = Some("<|im_start|>".into());
        a.parse_special = true;
        assert_eq!(run(&a), "[258]\n");

        let mut out = Vec::new();
        detokenize(
            &DetokenizeArgs { model: Some(model.clone()), ids: vec!["[257, 108, 111]".into()], special: false },
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"hello\n");
        let e = detokenize(
            &DetokenizeArgs { model: Some(model.clone()), ids: vec!["99999".into()], special: false },
            &mut out,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("out of range"), "{e:#}");

        let mut out = Vec::new();
        let c = ChatTemplateArgs {
            model: Some(model),
            messages: r#"[{"role": "user", "content": "hi"}]"#.into(),
            tools: None,
            add_generation_prompt: true,
            template: None,
        };
        chat_template(&c, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "<|im_start|>user\nhi\n<|im_start|>assistant\n");
    }
}
