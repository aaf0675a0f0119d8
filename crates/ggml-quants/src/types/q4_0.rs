//! TODO: q4_0 (being written)
