//! Gantry node agents: device plugin, discovery, exporter, MIG manager, toolkit, validator.

pub mod args;
pub mod device_plugin;
pub mod discovery;
pub mod exporter;
pub mod mig;
pub mod proto;
pub mod toolkit;
pub mod validator;
pub mod warn_limit;
