//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod agent_args_e2e;
mod lenient_pods;
mod migpolicy_e2e;
mod nvidiadriver_e2e;
mod operator_e2e;
mod operator_steady_state;
mod plugin_config_e2e;
mod support;
mod upgrade_blockers_e2e;
mod upgrade_e2e;
