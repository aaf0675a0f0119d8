//! The 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and the 1- and 2-bit Q1_0 / Q2_0.

use super::builtin;
use crate::rules::ftype;

builtin!(0, "Q1_0", [], ftype::Q1_0, "q1_0", " 1.125 bpw quantization");
builtin!(1, "Q2_0", [], ftype::Q2_0, "q2_0", " 2.25 bpw quantization (group 64)");
builtin!(2, "Q4_0", [], ftype::Q4_0, "q4_0", " 4.34G, +0.4685 ppl @ Llama-3-8B");
builtin!(3, "Q4_1", [], ftype::Q4_1, "q4_1", " 4.78G, +0.4511 ppl @ Llama-3-8B");
builtin!(5, "Q5_0", [], ftype::Q5_0, "q5_0", " 5.21G, +0.1316 ppl @ Llama-3-8B");
builtin!(6, "Q5_1", [], ftype::Q5_1, "q5_1", " 5.65G, +0.1062 ppl @ Llama-3-8B");
builtin!(35, "Q8_0", [], ftype::Q8_0, "q8_0", " 7.96G, +0.0026 ppl @ Llama-3-8B");
