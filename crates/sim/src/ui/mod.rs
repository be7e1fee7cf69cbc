//! A read-only live view of the simulated cluster: the node × GPU grid (who holds which GPU
//! or fraction, utilisation) and queues (fair share vs allocated, over time). Served on
//! loopback by `gantry up` and `gantry demo`; the terminal view draws the same [`Snapshot`].

pub mod cluster_state;
pub mod gpu_readings;
pub mod snapshot;
pub mod web;

pub use gpu_readings::readings;
pub use snapshot::{GpuReading, Snapshot, build, grid_lines};
pub use web::{Collector, UiServer, serve};
