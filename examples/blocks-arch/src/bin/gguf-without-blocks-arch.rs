//! The stock `gguf` (this file is `crates/cli/src/main.rs`): it names nothing of this
//! crate, so the plug-in is not linked in — the tests' baseline.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    gguf_cli::main()
}
