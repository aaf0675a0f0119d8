//! TODO: q6_k (being written)
