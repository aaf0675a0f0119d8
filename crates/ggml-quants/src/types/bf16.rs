//! TODO: bf16 (being written)
