//! TODO: q8_k (being written)
