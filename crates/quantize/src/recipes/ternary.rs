//! The ternary types TQ1_0 and TQ2_0 (token embeddings in Q4_K).

use super::builtin;
use crate::rules::ftype;

builtin!(13, "TQ1_0", [], ftype::TQ1_0, "tq1_0", " 1.69 bpw ternarization");
builtin!(14, "TQ2_0", [], ftype::TQ2_0, "tq2_0", " 2.06 bpw ternarization");
