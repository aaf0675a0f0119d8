//! TODO: i8 (being written)
