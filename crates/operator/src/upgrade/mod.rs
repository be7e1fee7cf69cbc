//! Rolling driver upgrades, node by node (reference `gpu-operator.md` §4).
//!
//! When the driver DaemonSet's template changes (a new `driver.version`), its `OnDelete` update
//! strategy leaves the old pods running; this module walks each GPU node through
//! `upgrade-required → cordon-required → wait-for-jobs-required → pod-deletion-required →
//! drain-required → pod-restart-required → validation-required → uncordon-required →
//! upgrade-done` (or `upgrade-failed`), a few nodes at a time, recording the walk in the node
//! label `nvidia.com/gpu-driver-upgrade-state`.
//!
//! - [`plan`]: the pure core — [`view::ClusterView`] + policy + now → [`plan::Action`]s.
//! - [`view`]: plain values built from API objects; [`slots`]: the parallelism rules;
//!   [`state`]: the state names; [`pools`]: one plan per NVIDIADriver pool, each under its
//!   CR's policy. Pod selectors are `gantry_k8s_rules::Selector`.
//! - [`run`]: the controller that lists the cluster, plans and applies.

mod controller;
pub mod plan;
pub mod pools;
mod removal;
pub mod slots;
pub mod state;
pub mod view;

#[cfg(test)]
mod tests;

pub use controller::{Round, UpgradeError, UpgradeOptions, reconcile_once, run};
pub use plan::{Action, Config, Plan, PlanError, PolicyAt, plan};
pub use state::UpgradeState;
