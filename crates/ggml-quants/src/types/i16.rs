//! TODO: i16 (being written)
