//! TODO: i64 (being written)
