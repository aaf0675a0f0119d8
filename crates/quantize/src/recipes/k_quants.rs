//! The K-quant mixtures: Q2_K … Q6_K, with their _S / _M / _L variants.

use super::builtin;
use crate::rules::ftype;

builtin!(15, "Q2_K", [], ftype::Q2_K, "q2_K", " 2.96G, +3.5199 ppl @ Llama-3-8B");
builtin!(16, "Q2_K_S", [], ftype::Q2_K_S, "q2_K", " 2.96G, +3.1836 ppl @ Llama-3-8B");
builtin!(22, "Q3_K_S", [], ftype::Q3_K_S, "q3_K", " 3.41G, +1.6321 ppl @ Llama-3-8B");
builtin!(23, "Q3_K_M", ["Q3_K"], ftype::Q3_K_M, "q3_K", " 3.74G, +0.6569 ppl @ Llama-3-8B");
builtin!(24, "Q3_K_L", [], ftype::Q3_K_L, "q3_K", " 4.03G, +0.5562 ppl @ Llama-3-8B");
builtin!(28, "Q4_K_S", [], ftype::Q4_K_S, "q4_K", " 4.37G, +0.2689 ppl @ Llama-3-8B");
builtin!(29, "Q4_K_M", ["Q4_K"], ftype::Q4_K_M, "q4_K", " 4.58G, +0.1754 ppl @ Llama-3-8B");
builtin!(31, "Q5_K_S", [], ftype::Q5_K_S, "q5_K", " 5.21G, +0.1049 ppl @ Llama-3-8B");
builtin!(32, "Q5_K_M", ["Q5_K"], ftype::Q5_K_M, "q5_K", " 5.33G, +0.0569 ppl @ Llama-3-8B");
builtin!(34, "Q6_K", [], ftype::Q6_K, "q6_K", " 6.14G, +0.0217 ppl @ Llama-3-8B");
