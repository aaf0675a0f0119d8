//! TODO: q5_0 (being written)
