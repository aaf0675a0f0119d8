//! TODO: q2_k (being written)
