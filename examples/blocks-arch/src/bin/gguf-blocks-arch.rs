//! The `gguf` command line with this crate's architecture linked in.
#![forbid(unsafe_code)]

use blocks_arch as _;

fn main() -> std::process::ExitCode {
    gguf_cli::main()
}
