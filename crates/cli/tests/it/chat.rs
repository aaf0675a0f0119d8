//! `gguf chat` end to end: a full context drops the oldest turns instead of ending the
//! chat, slash commands never reach the model, `--chat-template` picks a template.

use std::io::Write;
use std::process::{Command, Stdio};

use gguf_models::synthetic::{write, Tiny};

fn chat(args: &[&str], input: &str) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gguf"))
        .arg("chat")
        .args(args)
        .env("GGUF_CACHE", "/nonexistent-cache")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_full_context_drops_old_turns_and_slash_commands_stay_local() {
    let d = tempfile::tempdir().unwrap();
    let m = d.path().join("tiny.gguf");
    write(&Tiny::new("llama").with_tokenizer(), &m, None, &[]).unwrap();
    let saved = d.path().join("conv.json");
    let turn = "a".repeat(40);
    let input = format!(
        "/help\n{turn}\n{turn}\n{turn}\n{turn}\n{turn}\n/regen\n{}\nline one \\\nline two\n/save {}\n/clear\n/bogus\n/exit\nnever read\n",
        "y".repeat(400),
        saved.display()
    );
    let (code, _out, err) =
        chat(&["-m", m.to_str().unwrap(), "-c", "256", "-n", "8", "--temp", "0", "-sys", "be brief"], &input);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("commands:"), "/help answered locally: {err}");
    assert!(err.contains("[context full: dropped the"), "old turns dropped: {err}");
    assert!(err.contains("does not fit the context of 256"), "{err}");
    assert!(err.contains("unknown command /bogus"), "{err}");
    assert!(err.contains("[conversation cleared]"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let msgs = v.as_array().unwrap();
    assert_eq!(msgs[0]["role"], "system", "the system message is kept: {v}");
    assert_eq!(msgs[msgs.len() - 2]["content"], "line one \nline two", "a trailing \\ continues the line");
    assert_eq!(msgs.last().unwrap()["role"], "assistant");
    assert!(msgs.iter().all(|m| !m["content"].as_str().unwrap().starts_with('/')), "no command reached the model");
    assert!(msgs.len() < 2 + 2 * 6, "the oldest turns were dropped: {} messages", msgs.len());
}

#[test]
fn chat_template_flags_pick_a_template_or_say_why_not() {
    let d = tempfile::tempdir().unwrap();
    let m = d.path().join("tiny.gguf");
    write(&Tiny::new("llama").with_tokenizer(), &m, None, &[]).unwrap();
    let p = m.to_str().unwrap();
    let (code, _, err) = chat(&["-m", p, "-n", "2", "--temp", "0"], "hi\n");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: the model has no chat template; using ChatML"), "{err}");
    let (code, _, err) = chat(&["-m", p, "-n", "2", "--chat-template", "llama3"], "hi\n");
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("no chat template"), "{err}");
    let (code, _, err) = chat(&["-m", p, "--chat-template", "nosuch"], "hi\n");
    assert_eq!(code, 1);
    assert!(err.contains("\"nosuch\" is neither a built-in name"), "{err}");
    let f = d.path().join("t.jinja");
    std::fs::write(&f, "{% for m in messages %}{{ m.content }}{% endfor %}").unwrap();
    let (code, _, err) = chat(&["-m", p, "-n", "2", "--chat-template-file", f.to_str().unwrap()], "hi\n");
    assert_eq!(code, 0, "{err}");
}

/// `-p` is the first user message and `-st` ends the chat after one reply, as llama-cli's
/// conversation mode does; without `-p`, `-st` answers the first input line only.
#[test]
fn prompt_and_single_turn() {
    let d = tempfile::tempdir().unwrap();
    let m = d.path().join("tiny.gguf");
    write(&Tiny::new("llama").with_tokenizer(), &m, None, &[]).unwrap();
    let ms = m.to_str().unwrap();
    let saved = d.path().join("conv.json");
    let save = format!("/save {}\n", saved.display());
    // -p answered first, then the chat goes on reading input
    let (code, _, err) = chat(&["-m", ms, "-n", "4", "--temp", "0", "-p", "hello"], &format!("again\n{save}"));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let roles: Vec<&str> = v.as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"], "{v}");
    assert_eq!(v[0]["content"], "hello");
    // -st: one reply, then exit without reading further (the /save is never reached)
    std::fs::remove_file(&saved).unwrap();
    let (code, out, err) = chat(&["-m", ms, "-n", "4", "--temp", "0", "-p", "hello", "-st"], &save);
    assert_eq!(code, 0, "{err}");
    assert!(!out.is_empty(), "a reply was printed");
    assert!(!saved.exists(), "input after the single turn is not read");
    let (code, _, err) = chat(&["-m", ms, "-n", "4", "--temp", "0", "--single-turn"], &format!("hi\n{save}"));
    assert_eq!(code, 0, "{err}");
    assert!(!saved.exists(), "only the first input line is answered");
    assert_eq!(err.matches("> ").count(), 1, "one prompt shown: {err}");
}
