//! Gantry API types: CRDs, well-known names and config file formats. No I/O.

pub mod names;
