//! `--device` and `-ngl` (llama.cpp's names) on `run`, `chat`, `logits`, `perplexity` and
//! `serve`, and the check `bench` shares: where a command would run.
//!
//! The CPU is the default. `-ngl 0`, `--device cpu` and `--device none` keep it, as do
//! `-ngl -1` / `-ngl auto` (llama.cpp's "as many as fit": none here). `-ngl N` (N > 0),
//! `-ngl all` and `--device cuda[:N]` ask for CUDA: without a driver, a device or NVRTC the
//! command stops with gguf-cuda's error naming which (exit 1, no panic); with one, it stops
//! too, saying so, because the device forward pass does not exist yet (only the kernels do).

use anyhow::{bail, Result};
use clap::Args;
use gguf_cuda::DeviceSpec;

/// `-ngl`'s value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ngl {
    /// `-1` / `auto`.
    Auto,
    /// `all`.
    All,
    /// A layer count.
    N(u32),
}

fn ngl(s: &str) -> std::result::Result<Ngl, String> {
    match s.trim() {
        "auto" | "-1" => Ok(Ngl::Auto),
        "all" => Ok(Ngl::All),
        n => n.parse::<u32>().map(Ngl::N).map_err(|_| format!("{s:?}: expected a layer count, auto or all")),
    }
}

fn device(s: &str) -> std::result::Result<DeviceSpec, String> {
    if s.contains(',') {
        return Err(format!("{s:?}: one device at most (no split across devices)"));
    }
    gguf_cuda::parse_device(s)
}

/// The device flags of an engine command.
#[derive(Args, Debug, Clone, Default)]
pub struct DeviceArgs {
    /// Layers to offload to the GPU (llama.cpp's `-ngl`): 0, -1 or auto = CPU; N > 0 or all =
    /// CUDA (not implemented yet: stops with an error saying what is missing).
    #[arg(long = "n-gpu-layers", visible_alias = "gpu-layers", value_name = "N", allow_hyphen_values = true, value_parser = ngl)]
    pub n_gpu_layers: Option<Ngl>,
    /// Device (llama.cpp's `-dev`): cpu or none (the default), cuda or cuda:N (also CUDA0).
    #[arg(long = "device", value_name = "DEV", value_parser = device)]
    pub device: Option<DeviceSpec>,
}

impl DeviceArgs {
    /// The CUDA ordinal asked for, with the flag that asked, or `None` for the CPU.
    pub fn requested(&self) -> Option<(usize, String)> {
        let ngl = match self.n_gpu_layers {
            Some(Ngl::N(n)) => Some(n.to_string()),
            Some(Ngl::All) => Some("all".to_string()),
            Some(Ngl::Auto) | None => None,
        };
        match (self.device, self.n_gpu_layers) {
            (Some(DeviceSpec::Cpu), _) | (_, Some(Ngl::N(0))) => None,
            (Some(DeviceSpec::Cuda(i)), _) => Some((i, format!("--device cuda:{i}"))),
            (None, _) => ngl.map(|n| (0, format!("-ngl {n}"))),
        }
    }

    /// `Ok` where the command runs on the CPU; otherwise the reason it cannot run on CUDA.
    pub fn check(&self) -> Result<()> {
        match self.requested() {
            None => Ok(()),
            Some((ordinal, what)) => require_cuda(ordinal, &what),
        }
    }
}

/// CUDA device `ordinal` was asked for by `what`: the error to stop with.
pub fn require_cuda(ordinal: usize, what: &str) -> Result<()> {
    const CPU: &str = "use -ngl 0 or --device cpu to run on the CPU";
    match gguf_cuda::Device::open(ordinal) {
        Err(e) => bail!("CUDA requested ({what}) but {e}; {CPU}"),
        Ok(d) => bail!(
            "CUDA requested ({what}): {} is present, but the CUDA forward pass is not implemented yet (only its kernels, checked by `cargo test -p gguf-cuda`); {CPU}",
            d.describe()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(ngl_: Option<&str>, dev: Option<&str>) -> DeviceArgs {
        DeviceArgs { n_gpu_layers: ngl_.map(|s| ngl(s).unwrap()), device: dev.map(|s| device(s).unwrap()) }
    }

    #[test]
    fn llama_cpp_semantics() {
        assert_eq!(args(None, None).requested(), None);
        assert_eq!(args(Some("0"), None).requested(), None);
        assert_eq!(args(Some("-1"), None).requested(), None);
        assert_eq!(args(Some("auto"), None).requested(), None);
        assert_eq!(args(Some("99"), Some("cpu")).requested(), None);
        assert_eq!(args(Some("99"), Some("none")).requested(), None);
        assert_eq!(args(Some("0"), Some("cuda:1")).requested(), None);
        assert_eq!(args(Some("99"), None).requested(), Some((0, "-ngl 99".into())));
        assert_eq!(args(Some("all"), None).requested(), Some((0, "-ngl all".into())));
        assert_eq!(args(None, Some("cuda")).requested(), Some((0, "--device cuda:0".into())));
        assert_eq!(args(Some("12"), Some("CUDA1")).requested(), Some((1, "--device cuda:1".into())));
        assert!(
            ngl("x").is_err() && ngl("-2").is_err() && device("cuda:0,cuda:1").is_err() && device("vulkan").is_err()
        );
    }
}
