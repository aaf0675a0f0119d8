//! TODO: i32 (being written)
