//! TODO: f64 (being written)
