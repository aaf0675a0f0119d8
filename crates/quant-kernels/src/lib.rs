//! CPU (SIMD) and CUDA compute kernels over ggml block formats: mat-vec and mat-mat per
//! (type, backend), registered like the types themselves. Filled by the engine issue.
#![deny(missing_docs)]
