//! The `gguf` command line with this crate's pre-tokenizer linked in.
#![forbid(unsafe_code)]

use custom_pretok as _;

fn main() -> std::process::ExitCode {
    gguf_cli::main()
}
