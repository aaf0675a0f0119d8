//! Single-row helpers for code outside `matmul` that needs ggml-cpu's exact per-row
//! arithmetic: a quantized KV cache (ggml converts the query to the K type's
//! `vec_dot_type` and calls the K type's `vec_dot`), or writing a row in a quantized
//! format the way ggml-cpu's `cpy`/`set_rows` does (its `from_float`, e.g. the x86 Q8_0
//! quantizer, which rounds ties to even unlike the reference one).

use ggml_quants::TypeTraits;

use crate::registry::{act_quantizer_for, kernel_for, Kernel};
use crate::{ops, Error};

/// Converts one f32 row into type `type_id` as ggml-cpu's `from_float` does: the selected
/// activation quantizer when the type is an activation format (Q8_0, Q8_1, Q8_K, F16,
/// BF16, F32), else the type's reference quantizer. `out` must be exactly the row size.
pub fn quantize_row(type_id: u32, x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    let t = ggml_quants::lookup_id(type_id)?;
    let bytes = row_bytes(t, x.len())?;
    if out.len() != bytes {
        return Err(Error::SizeMismatch { what: "quantize_row output bytes", expected: bytes, found: out.len() });
    }
    match act_quantizer_for(type_id) {
        Some(q) => (q.quantize)(x, out),
        None => t.quantize_ref(x, out)?,
    }
    Ok(())
}

fn row_bytes(t: &TypeTraits, n: usize) -> Result<usize, Error> {
    t.row_size(n).map_err(|_| Error::NotWholeBlocks { type_name: t.name, cols: n, block_size: t.block_size })
}

/// An activation row prepared once for dot products with many weight rows of one type
/// (a query against every cached K row): quantized to the type's `vec_dot_type` like
/// [`crate::matmul`] does, or kept in f32 for the generic path.
#[derive(Debug)]
pub struct ActRow {
    n: usize,
    weight: &'static TypeTraits,
    kernel: Option<&'static Kernel>,
    q: Vec<u8>,
    f: Vec<f32>,
}

impl ActRow {
    /// Prepares `x` for dot products with rows of `weight_type` of `x.len()` elements.
    pub fn new(weight_type: u32, x: &[f32]) -> Result<Self, Error> {
        let weight = ggml_quants::lookup_id(weight_type)?;
        row_bytes(weight, x.len())?;
        let kernel = kernel_for(weight_type);
        let (q, f) = match kernel {
            Some(k) => {
                let act = ggml_quants::lookup_id(k.vec_dot_type)?;
                let mut q = vec![0u8; row_bytes(act, x.len())?];
                match act_quantizer_for(k.vec_dot_type) {
                    Some(a) => (a.quantize)(x, &mut q),
                    None => act.quantize_ref(x, &mut q).map_err(|_| Error::NoActivationQuantizer {
                        type_name: weight.name,
                        vec_dot_type: k.vec_dot_type,
                    })?,
                }
                (q, Vec::new())
            }
            None => (Vec::new(), x.to_vec()),
        };
        Ok(ActRow { n: x.len(), weight, kernel, q, f })
    }

    /// Elements in the row.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the row is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// `Σ w·x` for one weight row (exactly `row_size(type, len)` bytes), through the same
    /// kernel as [`crate::matmul`].
    pub fn dot(&self, w_row: &[u8]) -> Result<f32, Error> {
        let bytes = row_bytes(self.weight, self.n)?;
        if w_row.len() != bytes {
            return Err(Error::SizeMismatch { what: "weight row bytes", expected: bytes, found: w_row.len() });
        }
        if self.n == 0 {
            return Ok(0.0);
        }
        Ok(match self.kernel {
            Some(k) => (k.vec_dot)(self.n, w_row, &self.q),
            None => {
                let mut row = vec![0f32; self.n];
                (self.weight.dequantize_fn)(w_row, &mut row);
                ops::dot_f32(&row, &self.f)
            }
        })
    }
}
