//! The i-quant mixtures: IQ1_S … IQ4_XS (the 1–2-bit ones need an importance matrix).

use super::builtin;
use crate::rules::ftype;

builtin!(7, "IQ2_XXS", [], ftype::IQ2_XXS, "iq2_xxs", " 2.06 bpw quantization");
builtin!(8, "IQ2_XS", [], ftype::IQ2_XS, "iq2_xs", " 2.31 bpw quantization");
builtin!(9, "IQ2_S", [], ftype::IQ2_S, "iq2_xs", " 2.5  bpw quantization");
builtin!(10, "IQ2_M", [], ftype::IQ2_M, "iq2_s", " 2.7  bpw quantization");
builtin!(11, "IQ1_S", [], ftype::IQ1_S, "iq1_s", " 1.56 bpw quantization");
builtin!(12, "IQ1_M", [], ftype::IQ1_M, "iq1_m", " 1.75 bpw quantization");
builtin!(17, "IQ3_XXS", [], ftype::IQ3_XXS, "iq3_xxs", " 3.06 bpw quantization");
builtin!(18, "IQ3_S", [], ftype::IQ3_S, "iq3_s", " 3.44 bpw quantization");
builtin!(19, "IQ3_M", [], ftype::IQ3_M, "iq3_s", " 3.66 bpw quantization mix");
builtin!(21, "IQ3_XS", [], ftype::IQ3_XS, "iq3_s", " 3.3 bpw quantization");
builtin!(25, "IQ4_NL", [], ftype::IQ4_NL, "iq4_nl", " 4.50 bpw non-linear quantization");
builtin!(26, "IQ4_XS", [], ftype::IQ4_XS, "iq4_xs", " 4.25 bpw non-linear quantization");
