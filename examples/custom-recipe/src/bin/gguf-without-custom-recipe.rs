//! The stock `gguf` (this file is `crates/cli/src/main.rs`): it names nothing of this
//! crate, so the plug-in is not linked in. The tests' baseline: what a user of the
//! ordinary binary sees when asking for the plug-in's recipe.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    gguf_cli::main()
}
