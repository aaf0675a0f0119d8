//! The architecture registry, forward passes and generation. Filled by the engine issue.
#![deny(missing_docs)]
