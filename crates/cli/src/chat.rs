//! `gguf chat`: an interactive conversation rendered with the file's chat template.

use std::io::{BufRead, Write};
use std::sync::atomic::Ordering;

use anyhow::{bail, Result};
use clap::Args;
use models::{Logits, Sampler};

use crate::engine::{load, state, ModelArgs, SampleArgs, INTERRUPTED};

/// `gguf chat`.
#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// System prompt.
    #[arg(long = "system-prompt", visible_alias = "sys")]
    system: Option<String>,
    /// Longest reply in tokens (-1 = until end of generation).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
}

/// `gguf chat`: an interactive conversation rendered with the file's chat template.
pub fn chat(args: &ChatArgs) -> Result<()> {
    let l = load(&args.model)?;
    // Like llama.cpp: a model without a template is chatted with in ChatML.
    let template = match tokenizer::chat::ChatTemplate::from_gguf(l.file.metadata())? {
        Some(t) => t,
        None => {
            eprintln!("note: the model has no chat template; using ChatML");
            tokenizer::chat::ChatTemplate::builtin("chatml")?
        }
    };
    let mut st = state(&l, &args.model)?;
    let mut sampler = Sampler::new(args.sample.params());
    let mut messages: Vec<tokenizer::chat::Message> = Vec::new();
    if let Some(s) = &args.system {
        messages.push(tokenizer::chat::Message::new("system", s));
    }
    let mut cached: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    eprintln!("{} — type a message, Ctrl-D to quit.", l.model.describe());
    loop {
        eprint!("> ");
        std::io::stderr().flush()?;
        let Some(line) = lines.next() else { break };
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        INTERRUPTED.store(false, Ordering::Relaxed);
        messages.push(tokenizer::chat::Message::new("user", &line));
        let rendered = template.render(&messages, true, None)?;
        let ids = l.tok.encode(&rendered, true, true)?;
        if ids.is_empty() {
            bail!("the chat template rendered no tokens for this conversation (and the vocabulary adds no BOS)");
        }
        // Reuse the cached prefix; evaluate only what changed.
        let common = cached.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
        st.truncate(common);
        cached.truncate(common);
        if ids.len() > st.n_ctx() {
            bail!(
                "the conversation ({} tokens) no longer fits the context of {} (use a larger -c)",
                ids.len(),
                st.n_ctx()
            );
        }
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
            if st.n_past() + 1 > st.n_ctx() {
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
        messages.push(tokenizer::chat::Message::new("assistant", &String::from_utf8_lossy(&reply)));
    }
    Ok(())
}
