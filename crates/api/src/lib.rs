//! Gantry API types: CRDs, well-known names and config file formats. No I/O.
//!
//! - [`cluster_policy::ClusterPolicy`] (nvidia.com/v1), [`nvidia_driver::NVIDIADriver`] and
//!   [`mig_cluster_policy::MigClusterPolicy`] (nvidia.com/v1alpha1)
//! - [`kai::Queue`] (scheduling.run.ai/v2) and [`kai::PodGroup`] (scheduling.run.ai/v2alpha2)
//! - config files: [`device_plugin_config::DevicePluginConfig`], [`mig_parted::MigPartedConfig`]
//! - [`crds`] (the CRDs with structural schemas), [`validate`] (offline checks), [`names`]
//! - [`lenient::Lenient`]: a typed object a list or watch never fails on

pub mod cluster_policy;
pub mod common;
pub mod crd_defaults;
pub mod crds;
pub mod device_plugin_config;
pub mod gofloat;
pub mod gpu_devices;
pub mod kai;
pub mod lenient;
pub mod mig_cluster_policy;
pub mod mig_parted;
pub mod names;
pub mod nvidia_driver;
pub mod pod_check;
pub mod problem;
pub mod resource_of;
pub mod schema_check;
pub mod validate;

pub use problem::Problem;
