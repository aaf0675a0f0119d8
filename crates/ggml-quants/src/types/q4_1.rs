//! TODO: q4_1 (being written)
