//! MXFP4_MOE: expert tensors (3-D) in MXFP4, everything else Q8_0.

use super::builtin;
use crate::rules::ftype;

builtin!(4, "MXFP4_MOE", [], ftype::MXFP4_MOE, "mxfp4", " MXFP4 MoE");
