//! TODO: q5_k (being written)
