//! The `gguf` command line with this crate's plug-in type linked in: the whole binary is
//! one call, and every registry sees `q8_demo` next to the built-ins.
#![forbid(unsafe_code)]

use custom_quant as _;

fn main() -> std::process::ExitCode {
    gguf_cli::main()
}
