//! Gantry node agents: device plugin, discovery, exporter, MIG manager, toolkit, validator,
//! each started through one contract and registry ([`agent`]).

pub mod agent;
pub mod args;
pub mod device_plugin;
pub mod discovery;
pub mod exporter;
pub mod host;
pub mod mig;
pub mod proto;
pub mod toolkit;
pub mod validator;
pub mod warn_limit;
