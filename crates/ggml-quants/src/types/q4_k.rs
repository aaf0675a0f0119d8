//! TODO: q4_k (being written)
