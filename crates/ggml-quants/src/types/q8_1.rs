//! TODO: q8_1 (being written)
