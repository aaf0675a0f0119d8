//! One CUDA device: opening it behind the library probe, compiling and loading each type's
//! module on first use (through the PTX cache), and the host-buffer operations the kernel
//! runner checks: dequantize, q8_1 quantization and mat-vec.

use crate::cache;
use crate::error::{Error, Result};
use crate::nvrtc::Nvrtc;
use crate::probe;
use crate::registry::{self, Act, CudaKernels};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where a command runs, from `--device`: llama.cpp's `none` / `cpu`, or a CUDA ordinal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The CPU backend.
    Cpu,
    /// CUDA device `N`.
    Cuda(usize),
}

/// Parses `--device`: `cpu`, `none`, `cuda`, `cuda:N`, or llama.cpp's `CUDA<N>` spelling.
pub fn parse_device(s: &str) -> std::result::Result<DeviceSpec, String> {
    let l = s.trim().to_ascii_lowercase();
    let ordinal =
        |t: &str| t.parse::<usize>().map_err(|_| format!("invalid device {s:?}: expected cpu, none, cuda or cuda:N"));
    match l.as_str() {
        "cpu" | "none" => Ok(DeviceSpec::Cpu),
        "cuda" => Ok(DeviceSpec::Cuda(0)),
        _ => match l.strip_prefix("cuda:").or_else(|| l.strip_prefix("cuda")) {
            Some(n) if !n.is_empty() => ordinal(n).map(DeviceSpec::Cuda),
            _ => Err(format!("invalid device {s:?}: expected cpu, none, cuda or cuda:N")),
        },
    }
}

fn driver_err(during: &'static str) -> impl Fn(DriverError) -> Error {
    move |e| Error::Driver { during, detail: e.to_string() }
}

/// An opened CUDA device with its stream, NVRTC and the modules loaded so far.
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    cc: (i32, i32),
    driver: String,
    nvrtc: Nvrtc,
    cache: Option<std::path::PathBuf>,
    modules: Mutex<HashMap<u32, Arc<CudaModule>>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.ctx.ordinal())
            .field("name", &self.name)
            .field("cc", &self.cc)
            .finish()
    }
}

impl Device {
    /// Number of CUDA devices, after checking that the driver library exists (so `cudarc`
    /// cannot panic): [`Error::DriverNotFound`] without one, [`Error::NoDevice`] when the
    /// driver reports none or will not initialise.
    pub fn count() -> Result<usize> {
        let library = probe::driver_library()?;
        match CudaContext::device_count() {
            Ok(n) if n > 0 => Ok(n as usize),
            Ok(_) => Err(Error::NoDevice { library, detail: "the driver reports 0 devices".into() }),
            Err(e) => Err(Error::NoDevice { library, detail: e.to_string() }),
        }
    }

    /// Opens device `ordinal` and NVRTC. Every failure is an [`Error`] naming what is
    /// missing: the driver, a device, the ordinal, or NVRTC.
    pub fn open(ordinal: usize) -> Result<Device> {
        Device::count()?;
        Device::open_with(ordinal, Nvrtc::open()?)
    }

    /// [`Device::open`] with an NVRTC already opened (from a path of the caller's choice).
    pub fn open_with(ordinal: usize, nvrtc: Nvrtc) -> Result<Device> {
        let count = Device::count()?;
        if ordinal >= count {
            return Err(Error::BadOrdinal { ordinal, count });
        }
        let driver = probe::driver_library()?;
        let ctx = CudaContext::new(ordinal).map_err(driver_err("creating the context"))?;
        let name = ctx.name().map_err(driver_err("reading the device name"))?;
        let cc = ctx.compute_capability().map_err(driver_err("reading the compute capability"))?;
        let stream = ctx.default_stream();
        Ok(Device { ctx, stream, name, cc, driver, nvrtc, cache: cache::dir(), modules: Mutex::new(HashMap::new()) })
    }

    /// The device's name (`"NVIDIA H200"`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// Its ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// One line for logs: `CUDA0: NVIDIA H200 (sm_90, libcuda.so.1, NVRTC 12.9)`.
    pub fn describe(&self) -> String {
        let (a, b) = self.nvrtc.version();
        format!("CUDA{}: {} (sm_{}{}, {}, NVRTC {a}.{b})", self.ordinal(), self.name, self.cc.0, self.cc.1, self.driver)
    }

    /// The virtual architecture compiled for: `compute_<cc>`.
    pub fn arch(&self) -> String {
        format!("compute_{}{}", self.cc.0, self.cc.1)
    }

    /// The kernels registered for `type_id`.
    pub fn kernels(type_id: u32) -> Result<&'static CudaKernels> {
        registry::kernels(type_id).ok_or_else(|| unsupported("any", type_id))
    }

    /// The module of a type, compiled (or read from the cache) and loaded on first use.
    pub fn module(&self, k: &CudaKernels) -> Result<Arc<CudaModule>> {
        let mut m = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = m.get(&k.type_id) {
            return Ok(m.clone());
        }
        let tag = cache::device_tag(&self.name, self.cc);
        let ptx =
            cache::compile_cached(&self.nvrtc, self.cache.as_deref(), &tag, k.name, &k.full_source(), &self.arch())?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| Error::ModuleLoad { kernel: k.name.to_string(), detail: e.to_string() })?;
        for entry in k.entry_points() {
            module.load_function(entry).map_err(|e| Error::ModuleLoad {
                kernel: k.name.to_string(),
                detail: format!("entry point {entry}: {e}"),
            })?;
        }
        m.insert(k.type_id, module.clone());
        Ok(module)
    }

    fn function(&self, k: &CudaKernels, entry: &str) -> Result<CudaFunction> {
        self.module(k)?
            .load_function(entry)
            .map_err(|e| Error::ModuleLoad { kernel: k.name.to_string(), detail: format!("entry point {entry}: {e}") })
    }

    fn upload<T: cudarc::driver::DeviceRepr>(&self, v: &[T]) -> Result<CudaSlice<T>> {
        self.stream.clone_htod(v).map_err(driver_err("copying to the device"))
    }

    fn download<T: cudarc::driver::DeviceRepr>(&self, v: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream.clone_dtoh(v).map_err(driver_err("copying from the device"))
    }

    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.stream.alloc_zeros(n.max(1)).map_err(driver_err("allocating device memory"))
    }

    /// Element count of `src` as whole blocks of `type_id`.
    fn elements(type_id: u32, src: &[u8], op: &'static str) -> Result<usize> {
        let t = ggml_quants::by_id(type_id).ok_or_else(|| unsupported(op, type_id))?;
        if !src.len().is_multiple_of(t.type_size) {
            return Err(Error::Shape {
                op,
                detail: format!(
                    "{} bytes is not a whole number of {} blocks ({} bytes)",
                    src.len(),
                    t.name,
                    t.type_size
                ),
            });
        }
        Ok(src.len() / t.type_size * t.block_size)
    }

    /// `dequantize_<type>` on the device: `src` (whole blocks) to f32.
    pub fn dequantize(&self, type_id: u32, src: &[u8]) -> Result<Vec<f32>> {
        let k = Device::kernels(type_id)?;
        let entry = k.dequantize.ok_or_else(|| unsupported("dequantize", type_id))?;
        self.dequantize_with(k, entry, type_id, src)
    }

    /// `dequantize_<type>_f16` on the device: fp16 bits.
    pub fn dequantize_f16(&self, type_id: u32, src: &[u8]) -> Result<Vec<u16>> {
        let k = Device::kernels(type_id)?;
        let entry = k.dequantize_f16.ok_or_else(|| unsupported("dequantize to f16", type_id))?;
        self.dequantize_with(k, entry, type_id, src)
    }

    /// Runs the dequantize kernel `entry` of `k` (f32 or fp16 outputs, `T`) over `src`.
    fn dequantize_with<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        k: &CudaKernels,
        entry: &'static str,
        type_id: u32,
        src: &[u8],
    ) -> Result<Vec<T>> {
        let n = Device::elements(type_id, src, "dequantize")?;
        let f = self.function(k, entry)?;
        let s = self.upload(src)?;
        let mut d = self.zeros::<T>(n)?;
        let n64 = n as i64;
        let mut b = self.stream.launch_builder(&f);
        b.arg(&s).arg(&mut d).arg(&n64);
        // SAFETY: `dequantize_<type>[_f16](const uint8_t*, T*, int64_t n)` reads the blocks
        // of `n` elements (`s` holds exactly those) and writes `n` values of `T` (`d` holds
        // them): f32 for `dequantize_<type>`, uint16_t fp16 bits for `_f16`.
        unsafe { b.launch(elementwise(n)) }.map_err(driver_err("launching dequantize"))?;
        let mut out = self.download(&d)?;
        out.truncate(n);
        Ok(out)
    }

    fn quantize_q8_1_dev(&self, x: &CudaSlice<f32>, n: usize) -> Result<CudaSlice<u8>> {
        if !n.is_multiple_of(32) {
            return Err(Error::Shape { op: "quantize_q8_1", detail: format!("{n} elements is not a multiple of 32") });
        }
        let k = Device::kernels(9)?;
        let f = self.function(k, k.quantize.ok_or_else(|| unsupported("quantize", 9))?)?;
        let mut y = self.zeros::<u8>(n / 32 * 36)?;
        let n64 = n as i64;
        let blocks = n / 32;
        let cfg = LaunchConfig {
            grid_dim: (blocks.div_ceil(4).max(1) as u32, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&f);
        b.arg(x).arg(&mut y).arg(&n64);
        // SAFETY: `quantize_q8_1(const float*, uint8_t*, int64_t n)` reads `n` floats (`x`
        // holds at least `n`) and writes `n / 32` 36-byte blocks (`y` holds them); warps
        // past the last block return.
        unsafe { b.launch(cfg) }.map_err(driver_err("launching quantize_q8_1"))?;
        Ok(y)
    }

    /// `quantize_q8_1` on the device (`x.len()` a multiple of 32).
    pub fn quantize_q8_1(&self, x: &[f32]) -> Result<Vec<u8>> {
        let d = self.upload(x)?;
        let y = self.quantize_q8_1_dev(&d, x.len())?;
        let mut out = self.download(&y)?;
        out.truncate(x.len() / 32 * 36);
        Ok(out)
    }

    /// `y[t * nrows + r] = row r of w · row t of x` for a `nrows × ncols` weight matrix of
    /// `type_id` (rows back to back) and `x.len() / ncols` activation rows, through the
    /// type's mat-vec kernel (activations quantized to q8_1 on the device first when it
    /// takes q8_1).
    pub fn matvec(&self, type_id: u32, w: &[u8], nrows: usize, ncols: usize, x: &[f32]) -> Result<Vec<f32>> {
        let k = Device::kernels(type_id)?;
        let mv = k.matvec.ok_or_else(|| unsupported("mat-vec", type_id))?;
        let t = ggml_quants::by_id(type_id).ok_or_else(|| unsupported("mat-vec", type_id))?;
        let row_bytes = t.row_size(ncols).map_err(|e| Error::Shape { op: "mat-vec", detail: e.to_string() })?;
        let bad = |detail: String| Error::Shape { op: "mat-vec", detail };
        if ncols == 0 || nrows == 0 || w.len() != row_bytes * nrows {
            return Err(bad(format!(
                "{} weight bytes for {nrows} rows of {ncols} {} ({row_bytes} bytes a row)",
                w.len(),
                t.name
            )));
        }
        if x.is_empty() || !x.len().is_multiple_of(ncols) {
            return Err(bad(format!("{} activations is not a whole number of rows of {ncols}", x.len())));
        }
        if mv.act == Act::Q8_1 && !ncols.is_multiple_of(32) {
            return Err(bad(format!("{ncols} columns is not a multiple of 32 (q8_1 activations)")));
        }
        let ntok = x.len() / ncols;
        let f = self.function(k, mv.entry)?;
        let wd = self.upload(w)?;
        let xd = self.upload(x)?;
        let mut y = self.zeros::<f32>(nrows * ntok)?;
        let cfg = LaunchConfig {
            grid_dim: (nrows.div_ceil(4) as u32, ntok as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let (nc, nr, rb) = (ncols as i32, nrows as i32, row_bytes as i64);
        match mv.act {
            Act::Q8_1 => {
                let xq = self.quantize_q8_1_dev(&xd, x.len())?;
                let mut b = self.stream.launch_builder(&f);
                b.arg(&wd).arg(&xq).arg(&mut y).arg(&nc).arg(&nr).arg(&rb);
                // SAFETY: `mmvq_<type>(w, x, y, ncols, nrows, row_bytes)` reads `nrows`
                // rows of `row_bytes` (`wd`), `gridDim.y = ntok` q8_1 rows of `ncols / 32`
                // blocks (`xq`), and writes `ntok * nrows` floats (`y`).
                unsafe { b.launch(cfg) }.map_err(driver_err("launching the mat-vec"))?;
            }
            Act::F32 => {
                let mut b = self.stream.launch_builder(&f);
                b.arg(&wd).arg(&xd).arg(&mut y).arg(&nc).arg(&nr).arg(&rb);
                // SAFETY: as above with `ntok` f32 rows of `ncols` (`xd`).
                unsafe { b.launch(cfg) }.map_err(driver_err("launching the mat-vec"))?;
            }
        }
        let mut out = self.download(&y)?;
        out.truncate(nrows * ntok);
        Ok(out)
    }
}

fn unsupported(op: &'static str, type_id: u32) -> Error {
    let type_name = ggml_quants::by_id(type_id).map(|t| t.name.to_string()).unwrap_or_else(|| "?".into());
    Error::Unsupported { op, type_name, type_id }
}

/// One thread per element, 256 per block.
fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (n.div_ceil(256).max(1) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_flags_parse_like_llama_cpp() {
        assert_eq!(parse_device("cpu"), Ok(DeviceSpec::Cpu));
        assert_eq!(parse_device("none"), Ok(DeviceSpec::Cpu));
        assert_eq!(parse_device("cuda"), Ok(DeviceSpec::Cuda(0)));
        assert_eq!(parse_device("cuda:1"), Ok(DeviceSpec::Cuda(1)));
        assert_eq!(parse_device("CUDA0"), Ok(DeviceSpec::Cuda(0)));
        for bad in ["", "gpu", "cuda:", "cuda:x", "cuda:-1"] {
            assert!(parse_device(bad).is_err(), "{bad}");
        }
    }
}
