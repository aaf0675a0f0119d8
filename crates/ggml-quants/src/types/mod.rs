//! One module per ggml type. Each registers itself; nothing here lists them for dispatch.

pub mod bf16;
pub mod f16;
pub mod f32;
pub mod f64;
pub mod i16;
pub mod i32;
pub mod i64;
pub mod i8;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;
