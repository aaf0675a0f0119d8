//! One module per type, each submitting its [`crate::CudaKernels`] (embedded `.cu` source
//! and entry points).

mod bf16;
mod f16;
mod f32;
mod iq4_nl;
mod iq4_xs;
mod mxfp4;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8_0;
mod q8_1;
mod q8_k;
