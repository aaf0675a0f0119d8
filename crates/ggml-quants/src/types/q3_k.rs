//! TODO: q3_k (being written)
