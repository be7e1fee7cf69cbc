//! `gantry node device-plugin`: the kubelet device plugin (API v1beta1) for NVIDIA GPUs —
//! whole GPUs, MIG devices (strategies none / single / mixed), time-slicing and MPS
//! replicas — with health from the GPU event stream and config file v1.
//!
//! Pure cores: [`resources::build`] (inventory + settings → resource sets),
//! [`allocate::allocate`], [`preferred::preferred`], [`health`] (XID policy, faults and
//! recovery). The shell ([`manager::run`]) serves one gRPC server per resource on a unix
//! socket, registers with the kubelet and restarts on kubelet restarts and config changes.
//!
//! In-process use (the sim kubelet):
//! ```ignore
//! let opts = device_plugin::Options::new("/tmp/node-a/device-plugins");
//! tokio::spawn(device_plugin::run(opts, backend.clone(), async move { let _ = stop_rx.await; }));
//! ```

pub mod allocate;
pub mod args;
pub mod check;
pub mod config_file;
mod error;
pub mod health;
#[cfg(test)]
mod health_props;
pub mod health_report;
pub mod identity;
pub mod imex;
pub mod inventory;
pub mod load;
pub mod manager;
pub mod metrics;
pub mod named;
mod node_api;
pub mod options;
mod overrides;
pub mod preferred;
pub mod resources;
pub mod server;
pub mod settings;
pub mod uds;

pub use error::{DevicePluginError, RequestError};
pub use health::HealthPolicy;
pub use load::{ConfigSource, Overrides};
pub use manager::run;
pub use options::{Options, PluginStatus};
pub use settings::Settings;
