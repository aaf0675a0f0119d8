//! TODO: q5_1 (being written)
