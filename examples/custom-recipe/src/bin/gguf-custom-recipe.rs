//! The `gguf` command line with this crate's recipe linked in.
#![forbid(unsafe_code)]

use custom_recipe as _;

fn main() -> std::process::ExitCode {
    gguf_cli::main()
}
