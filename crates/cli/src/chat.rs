//! `gguf chat`: an interactive conversation rendered with the file's chat template.
//!
//! llama-cli's habits: `--chat-template NAME|JINJA` / `--chat-template-file`, `-sys`,
//! `-r` reverse prompts, a line ending in `\` continues on the next one, and slash
//! commands (`/help`). A conversation that outgrows the context never ends the chat: the
//! oldest turns (after the system message) are dropped until the next one fits — unlike
//! llama-cli's token-level shift (`--keep` + discard half), whole messages go, so the
//! template always renders a well-formed conversation.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::{bail, Context, Result};
use clap::Args;
use gguf_models::{Logits, Sampler};
use gguf_tokenizer::chat::{ChatTemplate, Message};

use crate::engine::{load, state, Loaded, ModelArgs, INTERRUPTED};
use crate::sampling::SampleArgs;

/// `gguf chat`.
#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: crate::device::DeviceArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// System prompt.
    #[arg(long = "system-prompt", visible_alias = "sys")]
    system: Option<String>,
    /// Longest reply in tokens (-1 = until end of generation).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// The chat template: a built-in name (chatml, llama3, gemma, ...) or Jinja source;
    /// default: the file's own.
    #[arg(long = "chat-template", conflicts_with = "chat_template_file")]
    chat_template: Option<String>,
    /// Read the chat template (Jinja) from a file.
    #[arg(long = "chat-template-file")]
    chat_template_file: Option<PathBuf>,
    /// End a reply when it contains this text (repeatable).
    #[arg(short = 'r', long = "reverse-prompt")]
    reverse_prompt: Vec<String>,
    /// The first user message (answered before reading any input), as llama-cli's `-p`
    /// in conversation mode.
    #[arg(short = 'p', long = "prompt")]
    prompt: Option<String>,
    /// Answer one message (`-p`, else the first input) and exit, as llama-cli's `-st`.
    #[arg(long = "single-turn")]
    single_turn: bool,
}

const HELP: &str = "\
commands:
  /help         this text
  /clear        forget the conversation (the system prompt stays)
  /regen        answer the last message again
  /save FILE    write the conversation as JSON messages
  /exit, /quit  leave (so does Ctrl-D)
  a line ending in \\ continues on the next line";

fn template(l: &Loaded, args: &ChatArgs) -> Result<ChatTemplate> {
    let bos_eos = || {
        let piece = |id: Option<u32>| {
            id.and_then(|i| l.tok.token_to_piece(i, true).ok())
                .map(|p| String::from_utf8_lossy(&p).into_owned())
                .unwrap_or_default()
        };
        (piece(l.tok.bos()), piece(l.tok.eos()))
    };
    let custom = |src: &str| -> Result<ChatTemplate> {
        let (bos, eos) = bos_eos();
        Ok(ChatTemplate::new(src, &bos, &eos)?)
    };
    if let Some(f) = &args.chat_template_file {
        let src = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        return custom(&src);
    }
    if let Some(t) = &args.chat_template {
        if gguf_tokenizer::chat::builtin_names().contains(&t.as_str()) {
            return Ok(ChatTemplate::builtin(t)?);
        }
        if !t.contains("{{") && !t.contains("{%") {
            bail!(
                "--chat-template {t:?} is neither a built-in name ({}) nor a Jinja template",
                gguf_tokenizer::chat::builtin_names().join(", ")
            );
        }
        return custom(t);
    }
    Ok(match ChatTemplate::from_gguf_with(l.file.metadata(), &l.tok)? {
        Some(t) => t,
        None => {
            // llama-cli does the same; say so, since a base model will not follow it
            eprintln!(
                "warning: the model has no chat template; using ChatML (a base model may not follow it: \
                 try --chat-template NAME or `gguf run`)"
            );
            ChatTemplate::builtin("chatml")?
        }
    })
}

/// One line of input, or several joined when a line ends in `\`; `None` at end of input.
fn read_input(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Result<Option<String>> {
    let mut text = String::new();
    loop {
        let Some(line) = lines.next() else {
            return Ok((!text.is_empty()).then_some(text));
        };
        let line = line?;
        match line.strip_suffix('\\') {
            Some(head) => {
                text.push_str(head);
                text.push('\n');
                eprint!(". ");
                std::io::stderr().flush()?;
            }
            None => {
                text.push_str(&line);
                return Ok(Some(text));
            }
        }
    }
}

fn save(messages: &[Message], path: &str) -> Result<()> {
    let v: Vec<serde_json::Value> =
        messages.iter().map(|m| serde_json::json!({"role": m.role, "content": m.content})).collect();
    let mut s = serde_json::to_string_pretty(&v)?;
    s.push('\n');
    crate::write_atomic(std::path::Path::new(path), s.as_bytes())
}

/// The tokens of the conversation, dropping the oldest turns (after a leading system
/// message) until there is room for at least one reply token. `None` if even the last
/// message alone does not fit.
fn fit(l: &Loaded, t: &ChatTemplate, messages: &mut Vec<Message>, n_ctx: usize) -> Result<Option<Vec<u32>>> {
    let first = usize::from(messages.first().is_some_and(|m| m.role == "system"));
    let mut dropped = 0;
    loop {
        let ids = l.tok.encode(&t.render(messages, true, None)?, true, true)?;
        if ids.len() < n_ctx {
            if dropped > 0 {
                eprintln!("[context full: dropped the {dropped} oldest message(s)]");
            }
            return Ok(Some(ids));
        }
        if messages.len() <= first + 1 {
            return Ok(None);
        }
        messages.remove(first);
        dropped += 1;
    }
}

/// `gguf chat`: an interactive conversation rendered with the file's chat template.
pub fn chat(args: &ChatArgs) -> Result<()> {
    args.device.check()?;
    let l = load(&args.model)?;
    let template = template(&l, args)?;
    let mut st = state(&l, &args.model)?;
    let (mut sampler, drawn_seed) = crate::sampling::sampler(&args.sample, &l.tok);
    let mut messages: Vec<Message> = Vec::new();
    if let Some(s) = &args.system {
        messages.push(Message::new("system", s));
    }
    let mut cached: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    eprintln!("{} — type a message, /help for commands, Ctrl-D to quit.", l.model.describe());
    if let Some(seed) = drawn_seed {
        eprintln!("sampler seed: {seed}");
    }
    let mut first = args.prompt.clone();
    let mut answered = false;
    loop {
        if answered && args.single_turn {
            break;
        }
        let input = match first.take() {
            Some(p) => p,
            None => {
                eprint!("> ");
                std::io::stderr().flush()?;
                let Some(input) = read_input(&mut lines)? else { break };
                input
            }
        };
        let line = input.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(cmd) = line.strip_prefix('/') {
            let (name, arg) = cmd.split_once(' ').map_or((cmd, ""), |(a, b)| (a, b.trim()));
            match name {
                "help" | "?" => eprintln!("{HELP}"),
                "exit" | "quit" => break,
                "clear" => {
                    messages.retain(|m| m.role == "system");
                    eprintln!("[conversation cleared]");
                }
                "save" if !arg.is_empty() => match save(&messages, arg) {
                    Ok(()) => eprintln!("[saved {} messages to {arg}]", messages.len()),
                    Err(e) => eprintln!("error: {e:#}"),
                },
                "save" => eprintln!("usage: /save FILE"),
                "regen" => {
                    if messages.last().is_some_and(|m| m.role == "assistant") {
                        messages.pop();
                    }
                    if messages.last().is_none_or(|m| m.role != "user") {
                        eprintln!("[nothing to answer again]");
                        continue;
                    }
                    reply(&l, args, &template, &mut st, &mut sampler, &mut messages, &mut cached)?;
                }
                _ => eprintln!("unknown command /{name} (/help lists them)"),
            }
            continue;
        }
        INTERRUPTED.store(false, Ordering::Relaxed);
        messages.push(Message::new("user", &input));
        reply(&l, args, &template, &mut st, &mut sampler, &mut messages, &mut cached)?;
        answered = true;
    }
    Ok(())
}

/// Answers the conversation's last (user) message and appends the reply.
fn reply(
    l: &Loaded,
    args: &ChatArgs,
    template: &ChatTemplate,
    st: &mut Box<dyn gguf_models::State>,
    sampler: &mut Sampler,
    messages: &mut Vec<Message>,
    cached: &mut Vec<u32>,
) -> Result<()> {
    INTERRUPTED.store(false, Ordering::Relaxed);
    let Some(ids) = fit(l, template, messages, st.n_ctx())? else {
        messages.pop();
        eprintln!("error: this message alone does not fit the context of {} (use a larger -c)", st.n_ctx());
        return Ok(());
    };
    if ids.is_empty() {
        bail!("the chat template rendered no tokens for this conversation (and the vocabulary adds no BOS)");
    }
    // Reuse the cached prefix; evaluate only what changed.
    let common = cached.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
    st.truncate(common);
    cached.truncate(common);
    let mut logits = l.model.forward(st.as_mut(), &ids[common..], Logits::Last)?;
    cached.extend_from_slice(&ids[common..]);
    let mut reply = Vec::<u8>::new();
    let mut stream = l.tok.stream_decoder(false);
    let mut out = std::io::stdout().lock();
    let limit = if args.n_predict < 0 { usize::MAX } else { args.n_predict as usize };
    let mut n = 0;
    while n < limit && !INTERRUPTED.load(Ordering::Relaxed) {
        let id = sampler.sample(&logits);
        if l.tok.is_eog(id) {
            break;
        }
        sampler.accept(id);
        let piece = stream.push(id)?;
        reply.extend_from_slice(piece.as_bytes());
        out.write_all(piece.as_bytes())?;
        out.flush()?;
        n += 1;
        let text = String::from_utf8_lossy(&reply);
        if args.reverse_prompt.iter().any(|r| !r.is_empty() && text.contains(r.as_str())) {
            break;
        }
        if st.n_past() + 1 > st.n_ctx() {
            // the next turn drops the oldest messages to make room
            eprintln!("\n[context full]");
            break;
        }
        logits = l.model.forward(st.as_mut(), &[id], Logits::Last)?;
        cached.push(id);
    }
    let tail = stream.finish();
    reply.extend_from_slice(tail.as_bytes());
    writeln!(out, "{tail}")?;
    if INTERRUPTED.load(Ordering::Relaxed) {
        eprintln!("[interrupted]");
    }
    messages.push(Message::new("assistant", &String::from_utf8_lossy(&reply)));
    Ok(())
}
