//! TODO: q8_0 (being written)
