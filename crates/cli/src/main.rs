//! `gguf`: read, inspect, quantize, evaluate, serve and run GGUF model files. The whole
//! command line lives in the library ([`gguf_cli::main`]) so other crates can rebuild this
//! binary with their plug-ins linked in.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    gguf_cli::main()
}
