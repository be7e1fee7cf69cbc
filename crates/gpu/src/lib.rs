//! The GPU seam: a [`Backend`] trait over NVML, the NVML backend, and a simulated backend
//! built from a catalog of real GPU models.
//!
//! - [`Backend`] (object-safe; share as `Arc<dyn Backend>`): identity, memory, utilisation,
//!   temperature, power, energy, clocks, ECC, row remapping, PCIe, NVLink, topology, processes,
//!   GPM profiling, MIG state and the MIG manager's mutating calls, and event subscriptions.
//! - [`NvmlBackend::open`]: NVML loaded at run time from a driver root; a clear
//!   [`GpuError::LibraryNotFound`] when it is not there.
//! - [`SimBackend`]: one simulated node's GPUs ([`SimConfig`]: model × count, seed), with load
//!   ([`SimBackend::set_load`], [`SimBackend::start_process`]) and fault controls
//!   ([`SimBackend::inject_xid`], [`SimBackend::inject_fallen_off_bus`],
//!   [`SimBackend::inject_ecc_dbe`], [`SimBackend::reset_gpu`]).
//! - [`catalog`]: real models and their MIG profile tables; [`mig`]: the placement rules;
//!   [`layout`]: plan / read / apply whole-GPU MIG layouts through any backend.

pub mod backend;
pub mod catalog;
pub mod error;
pub mod layout;
pub mod mig;
pub mod nvml;
pub mod sim;
pub mod types;

pub use backend::{Backend, EventStream, Wake};
pub use catalog::GpuModel;
pub use error::{GpuError, Result};
pub use nvml::NvmlBackend;
pub use sim::{SimBackend, SimConfig, SimProcess};
pub use types::*;
