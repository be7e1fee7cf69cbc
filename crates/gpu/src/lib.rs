//! The GPU seam: a [`Backend`] trait over NVML, the NVML backend, and a simulated backend
//! built from a catalog of real GPU models.

pub mod backend;
pub mod catalog;
pub mod error;
pub mod layout;
pub mod mig;
pub mod nvml;
pub mod sim;
pub mod types;

pub use backend::{Backend, EventStream};
pub use catalog::GpuModel;
pub use error::{GpuError, Result};
pub use nvml::NvmlBackend;
pub use sim::{SimBackend, SimConfig, SimProcess};
pub use types::*;
